"""What-if replay: recorded demand sent through quota/'s own managers, as the proxy would decide it.

The model (docs/pipeline.md, "What-if"):

* Demand: each second, an entity wants to produce and to fetch the bytes its usage records show for that
  second (`replay_series.spread_per_second`). Its producer and its consumer are two connections.
* A connection that is not muted sends what is waiting at once, as requests of at most
  `request_bytes` (a producer's max.request.size); a fetch returns at most the consumer's fetch.max.bytes
  or what the quota window can hold (`max_value_in_quota_window`, the proxy's KAFKA-9677 cap).
* Each request is recorded by the quota manager at its millisecond (`record_and_get_throttle_ms`). A
  throttle mutes that connection for the throttle's length; what arrives meanwhile waits. A throttled
  Produce was forwarded, so its bytes count as admitted; a throttled Fetch is answered empty and
  un-charged (`quota.fetch_throttle: empty` in kip219 mode), so its bytes wait for the retry at the mute's
  end. With `fetch_throttle: pass` or `throttle_mode: delay` the fetched bytes are admitted.
* Entities that share a sensor (a user quota over several client-ids, ...) are replayed together, their
  requests interleaved in time, so the shared bound is shared as in the proxy.

Nothing here computes a throttle: every number comes from `sluice.quota`. The loop only decides when a
request happens. It skips work in two places that provably change no result:

* idle seconds (no demand, nothing waiting, nobody muted): no request would be made;
* long safe stretches: when every second's demand on every sensor stays below `safe_bound` (so nothing
  can be throttled) after a clean lead-in (nothing waiting or muted for N+2 seconds, so the window holds
  only such seconds), the stretch is credited as admitted on time without calling the engine, and the
  engine resumes K seconds before the stretch ends, early enough that its state there is the state the
  full replay would have: a window ring with one sample per second of the last N+1 seconds (each tail
  second has demand), a token bucket that is full (the stretch refilled it). `fast_forward=False` turns
  this off; tests check both ways give the same throttles.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from sluice.config.quota_settings import FetchThrottle, QuotaSettings, ThrottleMode
from sluice.quota import ClientQuotaManager, QuotaTags, SensorKind
from sluice.quota.throttle import saturating_int32

from .replay_connection import (
    ADMITTED,
    DELAYED,
    THROTTLE_COUNT,
    THROTTLE_MS,
    THROTTLED_S,
    Connection,
    DirectionResult,
    hour_counters,
)
from .replay_series import latest_start_at_or_before, next_busy, run_lengths, safe_bound

__all__ = [
    "ADMITTED",
    "DELAYED",
    "THROTTLED_S",
    "THROTTLE_COUNT",
    "THROTTLE_MS",
    "DirectionResult",
    "GroupStats",
    "ReplayOptions",
    "replay_group",
]

PRODUCE, FETCH = "produce", "fetch"


@dataclass(slots=True)
class _Sensor:
    """A sensor the group's entities share: its manager, its bound, and the sum of their demands."""

    manager: ClientQuotaManager
    bound: float
    demand: np.ndarray | int = 0  # 0 until an entity adds its per-second demand


# (direction, the sensor's tags) -> the sensor
_Sensors = dict[tuple[str, QuotaTags], _Sensor]

DEFAULT_REQUEST_BYTES = 1_048_576  # the Java producer's max.request.size
DEFAULT_FETCH_MAX_BYTES = 52_428_800  # the Java consumer's fetch.max.bytes


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    request_bytes: int = DEFAULT_REQUEST_BYTES
    fetch_max_bytes: int = DEFAULT_FETCH_MAX_BYTES
    fast_forward: bool = True
    keep_events: bool = False


@dataclass(slots=True)
class GroupStats:
    seconds: int = 0
    skipped_seconds: int = 0


def _retries_fetches(settings: QuotaSettings) -> bool:
    return settings.fetch_throttle is FetchThrottle.EMPTY and settings.throttle_mode is not ThrottleMode.DELAY


def replay_group(
    entities: list[tuple[str, str | None]],
    start_s: int,
    produce: list[np.ndarray],
    fetch: list[np.ndarray],
    settings: QuotaSettings,
    options: ReplayOptions | None = None,
) -> tuple[list[dict[str, DirectionResult]], GroupStats]:
    """Replay entities that may share sensors, each with per-second demand arrays starting at `start_s`."""
    options = options or ReplayOptions()
    managers = settings.new_managers()
    n = len(produce[0]) if produce else 0
    results: list[dict[str, DirectionResult]] = []
    conns: list[Connection] = []
    sensors: _Sensors = {}
    for j, (user, client_id) in enumerate(entities):
        per_entity = {}
        for direction, manager, demand in (
            (PRODUCE, managers.produce, produce[j]),
            (FETCH, managers.fetch, fetch[j]),
        ):
            result = DirectionResult(demand_bytes=int(demand.sum()))
            per_entity[direction] = result
            _demand_hours(result, demand, start_s)
            resolution = manager.resolve(user, client_id)
            if not manager.quotas_enabled or resolution.rule is None:
                # Unlimited: the proxy admits it as it comes; nothing to replay.
                result.admitted_bytes = result.demand_bytes
                _credit_all(result)
                continue
            result.limited, result.bound = True, resolution.bound
            result.sensor = f"{manager.sensor_kind.value}:{resolution.tags.sensor_suffix}"
            if direction == FETCH:
                window_cap = saturating_int32(manager.max_value_in_quota_window(user, client_id))
                cap = min(options.fetch_max_bytes, window_cap)
                retry = _retries_fetches(settings)
            else:
                cap, retry = options.request_bytes, False
            conns.append(Connection(manager, user, client_id, demand, start_s, cap, retry, result))
            entry = sensors.setdefault((direction, resolution.tags), _Sensor(manager, resolution.bound))
            entry.demand = entry.demand + demand
        results.append(per_entity)
    stats = GroupStats(seconds=n)
    if conns:
        _run(conns, sensors, start_s, n, options, stats)
        for conn in conns:
            result = conn.result
            result.backlog_end_bytes = conn.pending
            result.admitted_bytes = sum(c[ADMITTED] for c in result.hours.values())
            result.delayed_bytes = sum(c[DELAYED] for c in result.hours.values())
            result.throttle_ms = sum(c[THROTTLE_MS] for c in result.hours.values())
            result.throttle_count = sum(c[THROTTLE_COUNT] for c in result.hours.values())
            result.throttled_seconds = sum(c[THROTTLED_S] for c in result.hours.values())
    return results, stats


def _demand_hours(result: DirectionResult, demand: np.ndarray, start_s: int) -> None:
    if not len(demand):
        return
    hours = (np.arange(len(demand)) + start_s) // 3600
    totals = np.bincount(hours - hours[0], weights=demand.astype(np.float64))
    for offset, total in enumerate(totals):
        if total:
            result.demand_hours[int(hours[0]) + offset] = round(total)


def _credit_all(result: DirectionResult) -> None:
    for hour, total in result.demand_hours.items():
        hour_counters(result.hours, hour)[ADMITTED] += total


def _skip_plan(sensors: _Sensors, n: int) -> tuple[np.ndarray, np.ndarray, int, int, int] | None:
    """Safe-run lengths, latest valid tail starts, and the lead-in, tail and gap lengths (None: no skips)."""
    safe = np.ones(n, dtype=bool)
    dense = np.ones(n, dtype=bool)
    lead, tail, gap = 1, 2, 2
    for sensor in sensors.values():
        manager, bound, demand = sensor.manager, sensor.bound, sensor.demand
        window = manager.window
        size_s, samples = window.size_s, window.num_samples
        bound_safe = safe_bound(bound, samples, size_s)
        if bound_safe <= 0:
            return None
        if isinstance(demand, int):  # no demand at all on this sensor
            demand = np.zeros(n, dtype=np.int64)
        safe &= demand <= bound_safe
        if manager.sensor_kind is SensorKind.WINDOW:
            if size_s != 1:
                return None  # samples longer than a second: their phase depends on history
            dense &= demand > 0
            lead = max(lead, samples + 2)
            tail = max(tail, samples + 2)
            gap = max(gap, samples + 2)
        else:
            spans = (samples - 1) * size_s
            gap = max(gap, (samples * size_s + 1) * (spans + 1) + 2)
    runs = run_lengths(safe)
    tails = latest_start_at_or_before(run_lengths(safe & dense) >= tail)
    return runs, tails, lead, tail, gap


def _run(
    conns: list[Connection],
    sensors: _Sensors,
    start_s: int,
    n: int,
    options: ReplayOptions,
    stats: GroupStats,
) -> None:
    keep = options.keep_events
    plan = _skip_plan(sensors, n) if options.fast_forward else None
    any_demand = np.zeros(n, dtype=bool)
    for conn in conns:
        any_demand |= conn.demand > 0
    busy_next = next_busy(any_demand)
    safe_runs = plan[0] if plan is not None else None
    heap: list[tuple[int, int]] = []
    dirty = -1  # the last second (index) in which anything but on-time, unthrottled sends happened
    s = 0
    while s < n:
        now = (start_s + s) * 1000
        while heap and heap[0][0] < now:
            at, index = heapq.heappop(heap)
            if conns[index].muted_until != at:
                continue  # the connection sent at its mute's end (a second boundary) already
            dirty = max(dirty, at // 1000 - start_s)
            throttle = conns[index].send(at, keep)
            if throttle:
                heapq.heappush(heap, (at + throttle, index))
                dirty = max(dirty, (at + throttle) // 1000 - start_s)
        if not heap and not any(c.pending for c in conns):
            if plan is not None and s - dirty - 1 >= plan[2]:
                runs, tails, _, tail, gap = plan
                length = int(runs[s])
                if length >= gap + tail:
                    resume = int(tails[s + length - tail])
                    if resume >= s + gap:
                        for conn in conns:
                            conn.skip(s, resume)
                        stats.skipped_seconds += resume - s
                        s = resume
                        continue
            if not any_demand[s]:
                stats.skipped_seconds += int(busy_next[s]) - s
                s = int(busy_next[s])
                continue
        for conn in conns:
            size = int(conn.demand[s])
            if size:
                conn.arrive(start_s + s, size)
        for index, conn in enumerate(conns):
            if conn.pending and conn.muted_until <= now:
                throttle = conn.send(now, keep)
                if throttle:
                    heapq.heappush(heap, (now + throttle, index))
                    dirty = max(dirty, (now + throttle) // 1000 - start_s)
        if (safe_runs is not None and not safe_runs[s]) or any(c.pending for c in conns):
            dirty = max(dirty, s)
        s += 1
    end = (start_s + n) * 1000
    while heap and heap[0][0] < end:
        at, index = heapq.heappop(heap)
        if conns[index].muted_until != at:
            continue
        throttle = conns[index].send(at, keep)
        if throttle:
            heapq.heappush(heap, (at + throttle, index))
