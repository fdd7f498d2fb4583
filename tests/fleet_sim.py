"""A fleet of Sluice instances on a simulated clock: flat-out producers, usage batches, late delivery.

Each instance has its own QuotaManagers, UsageLedger and FleetQuotas, as a process has. Every instance's
producer sends as fast as the quota lets it (the client model of tests/quota_simulation.py: one request at a
time, the next one `send_interval_ms` later or after the throttle). Every `interval_ms` an instance drains
its ledger into a batch, encodes it as the usage topic carries it, and each other instance decodes and
charges it a random delivery delay later (up to `delivery_ms`: the produce and the follower's fetch).
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from sluice.quota import QuotaConfig, QuotaEntity, QuotaKey, QuotaManagers, QuotaWindow, SensorKind
from sluice.quota.fleet import FleetQuotas
from sluice.quota.usage_ledger import UsageLedger
from sluice.quota.usage_records import decode_batch, encode_batch

CLIENT_ID = "pump"
USER = "ANONYMOUS"
WALL_ORIGIN_MS = 1_800_000_000_000  # the wall clock at simulated time 0

_SEND, _PUBLISH, _DELIVER = 0, 1, 2


@dataclass
class FleetRun:
    """Every admitted request: (time ms, instance, bytes)."""

    admitted: list[tuple[int, int, int]] = field(default_factory=list)

    def rate(self, start_ms: int, end_ms: int, instances: set[int] | None = None) -> float:
        """Bytes per second admitted in [start, end)."""
        total = sum(
            size
            for t, i, size in self.admitted
            if start_ms <= t < end_ms and (instances is None or i in instances)
        )
        return total / ((end_ms - start_ms) / 1000)

    def slope(self, start_ms: int, end_ms: int, step_ms: int = 100) -> float:
        """Least-squares slope (bytes/s) of the cumulative bytes admitted in [start, end).

        A sampled window admits in bursts about every N x W seconds; a plain sum over an arbitrary span
        holds one burst more or less depending on where it starts (a +-9 % swing over 120 s). The slope
        of the cumulative curve is the long-run rate without that phase effect.
        """
        times = sorted((t, size) for t, _i, size in self.admitted if start_ms <= t < end_ms)
        xs: list[float] = []
        ys: list[float] = []
        total = 0
        j = 0
        for x in range(start_ms, end_ms, step_ms):
            while j < len(times) and times[j][0] < x:
                total += times[j][1]
                j += 1
            xs.append(x / 1000)
            ys.append(total)
        mean_x = sum(xs) / len(xs)
        mean_y = sum(ys) / len(ys)
        return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sum(
            (x - mean_x) ** 2 for x in xs
        )


def simulate_fleet(
    sensor: str,
    *,
    instances: int = 3,
    quota: int = 100_000,
    interval_ms: int = 1000,
    delivery_ms: int = 200,
    duration_ms: int = 150_000,
    request_bytes: int = 10_120,
    send_interval_ms: float = 0.11,
    sharing: bool = True,
    estimate: bool = True,
    stop: dict[int, int] | None = None,
    paces: list[float] | None = None,
    seed: int = 0,
    samples: int = 11,
) -> FleetRun:
    """Run the fleet; `stop` maps an instance to the time it dies (it neither sends nor publishes after)."""
    rng = random.Random(seed)
    config = QuotaConfig(
        client_window=QuotaWindow(samples, 1),
        sensor_kinds={QuotaKey.PRODUCER_BYTE_RATE: SensorKind(sensor)},
    )
    names = [f"sluice-{i}" for i in range(instances)]
    managers, fleets, ledgers = [], [], []
    for name in names:
        m = QuotaManagers(config)
        m.set_quota(QuotaEntity(client_id=CLIENT_ID), QuotaKey.PRODUCER_BYTE_RATE, quota)
        fleet = FleetQuotas(m, name, interval_ms=interval_ms, estimate=estimate)
        if sharing:
            fleet.install()
        managers.append(m)
        fleets.append(fleet)
        ledgers.append(UsageLedger(name))
    paces = paces or [send_interval_ms] * instances
    stop = stop or {}
    events: list[tuple[float, int, int, int, object]] = []
    order = 0  # ties broken by insertion order, never by comparing payloads

    def push(t: float, kind: int, i: int, payload: object = None) -> None:
        nonlocal order
        order += 1
        heapq.heappush(events, (t, order, kind, i, payload))

    for i in range(instances):
        push(rng.random() * 50, _SEND, i)
        first = rng.random() * interval_ms
        push(first, _PUBLISH, i, first - interval_ms)  # payload: the interval's start
    run = FleetRun()
    while events:
        t, _order, kind, i, payload = heapq.heappop(events)
        if t >= duration_ms:
            break
        now = int(t)
        dead = i in stop and now >= stop[i]
        if kind == _SEND:
            if dead:
                continue
            throttle = managers[i].produce.record_and_get_throttle_ms(USER, CLIENT_ID, request_bytes, now)
            ledgers[i].entity(USER, CLIENT_ID).produce_bytes += request_bytes
            run.admitted.append((now, i, request_bytes))
            push(t + max(throttle, paces[i]), _SEND, i)
        elif kind == _PUBLISH:
            if dead:
                continue
            start = payload
            assert isinstance(start, float)
            batch = ledgers[i].drain(WALL_ORIGIN_MS + int(start), interval_ms)
            message = encode_batch(batch)
            if sharing:
                for j in range(instances):
                    if j != i:
                        push(t + rng.random() * delivery_ms, _DELIVER, j, message)
            push(t + interval_ms, _PUBLISH, i, t)
        else:
            assert isinstance(payload, bytes)
            fleets[i].charge(decode_batch(payload), now, WALL_ORIGIN_MS + now)
    return run
