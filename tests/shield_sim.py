"""The broker shield's latency trigger on a simulated clock, before a broker whose latency rises with load.

The broker is one queue served at `capacity` bytes/s: a Produce's round trip is `base_ms` plus the time
to serve the bytes queued ahead of it and its own, so latency is flat while the broker keeps up, climbs
as it nears its capacity (requests arrive at random, so queues form before the load reaches it) and grows
without bound past it; `injected` adds a delay whatever the load (a slow disk, another tenant: what the
mock cluster's `rtt` command does end to end). Producers send 10 kB requests at random intervals
averaging their demand, pipelined (the next is sent whatever the answers); one that is throttled sends
its next request no sooner than the throttle allows, as a KIP-219 client or a muted connection does. The
proxy's part is the real BrokerShield: each request is charged as it is forwarded, each answer records
its round trip, and `tick` runs once a simulated second.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from sluice.quota.broker_shield import BrokerShield, ShieldLimits
from sluice.quota.latency_trigger import LatencyTargets
from sluice.quota.round_trips import RoundTripWindow

NODE = 1
REQUEST_BYTES = 10_000
_SEND, _ANSWER, _TICK = 0, 1, 2


@dataclass(frozen=True)
class Producer:
    topic: str
    # (from ms, demand bytes/s) steps, in time order; the first starts at 0.
    demand: tuple[tuple[int, float], ...]

    def demand_at(self, now_ms: int) -> float:
        rate = 0.0
        for start, value in self.demand:
            if now_ms >= start:
                rate = value
        return rate


@dataclass
class ShieldRun:
    """What happened: every request admitted to the broker, the round trips, the trigger's events."""

    admitted: list[tuple[int, str, int]] = field(default_factory=list)  # (ms, topic, bytes)
    round_trips: list[tuple[int, float]] = field(default_factory=list)  # (answered at ms, ms)
    throttled: dict[str, int] = field(default_factory=dict)  # topic -> throttles
    events: list[tuple[int, str]] = field(default_factory=list)  # (ms, event)
    # (ms, the p99 of the last three seconds' round trips: what the trigger reads, measured alike; the
    # trigger's reading keeps three round trips at or above it, the same from 200 in the window, which the
    # simulated broker's hundreds of answers a second always hold)
    p99: list[tuple[int, float | None]] = field(default_factory=list)

    def rate(self, start_ms: int, end_ms: int, topic: str | None = None) -> float:
        total = sum(s for t, name, s in self.admitted if start_ms <= t < end_ms and topic in (None, name))
        return total / ((end_ms - start_ms) / 1000)

    def first_event(self, name: str, after_ms: int = 0) -> int | None:
        return next((t for t, event in self.events if event == name and t >= after_ms), None)

    def peak_p99(self, start_ms: int, end_ms: int) -> float:
        return max((p for t, p in self.p99 if start_ms <= t < end_ms and p is not None), default=0.0)

    def p99_back_under(self, target_ms: float, after_ms: int) -> int | None:
        """The first second after `after_ms` from which the window p99 stays at or under the target for
        ten seconds."""
        seconds = [(t, p) for t, p in self.p99 if t >= after_ms]
        for i, (t, _p) in enumerate(seconds):
            following = [p for t2, p in seconds[i:] if t2 < t + 10_000]
            if len(following) >= 10 and all(p is None or p <= target_ms for p in following):
                return t
        return None

    def p99_over(self, start_ms: int, end_ms: int, window_ms: int = 1000) -> float | None:
        """The p99 of the round trips answered in [start, end)."""
        window = RoundTripWindow(1, end_ms - start_ms + window_ms)
        for t, ms in self.round_trips:
            if start_ms <= t < end_ms:
                window.record(round(ms), start_ms)
        return window.percentile(0.99, start_ms)


def simulate_shield(
    producers: list[Producer],
    *,
    capacity: float = 1_000_000,
    base_ms: float = 2.0,
    targets: LatencyTargets | None = None,
    ceiling: float | None = None,
    injected: tuple[tuple[int, float], ...] = (),
    shielded: bool = True,
    duration_ms: int = 240_000,
    seed: int = 0,
) -> ShieldRun:
    """`shielded=False`: the same traffic with no threshold at all (what the broker gets without Sluice's
    shield), for comparison."""
    rng = random.Random(seed)
    targets = targets or LatencyTargets(50, 40, 0.2 * capacity)
    shield = BrokerShield(ShieldLimits(bytes_in_per_s=ceiling, latency=targets if shielded else None))
    run = ShieldRun()
    queue: list[tuple[float, int, int, object]] = []
    order = 0

    def push(at: float, kind: int, what: object) -> None:
        nonlocal order
        order += 1
        heapq.heappush(queue, (at, kind, order, what))

    for index in range(len(producers)):
        push(rng.uniform(0, 100), _SEND, index)
    push(1000, _TICK, None)
    measured = RoundTripWindow(3, 1000)
    backlog_bytes = 0.0
    last_arrival = 0.0
    while queue:
        at, kind, _order, what = heapq.heappop(queue)
        if at >= duration_ms:
            break
        now_ms = int(at)
        if kind == _TICK:
            for event in shield.tick(now_ms):
                run.events.append((now_ms, event.event))
            run.p99.append((now_ms, measured.percentile(0.99, now_ms)))
            push(at + 1000, _TICK, None)
        elif kind == _ANSWER:
            round_trip = at - what  # type: ignore[operator]
            run.round_trips.append((now_ms, round_trip))
            measured.record(round(round_trip), now_ms)
            shield.round_trip(NODE, round(round_trip), now_ms)
        else:
            producer = producers[what]  # type: ignore[index]
            demand = producer.demand_at(now_ms)
            if demand <= 0:
                push(at + 1000, _SEND, what)
                continue
            throttle = shield.record(NODE, [(producer.topic, REQUEST_BYTES)], now_ms)
            run.admitted.append((now_ms, producer.topic, REQUEST_BYTES))
            if throttle:
                run.throttled[producer.topic] = run.throttled.get(producer.topic, 0) + 1
            # The broker: a queue drained at `capacity`; this request waits for what is ahead of it.
            backlog_bytes = max(0.0, backlog_bytes - capacity * (at - last_arrival) / 1000)
            last_arrival = at
            backlog_bytes += REQUEST_BYTES
            extra = next((ms for start, ms in reversed(injected) if at >= start), 0.0)
            push(at + base_ms + extra + backlog_bytes / capacity * 1000, _ANSWER, at)
            gap = rng.expovariate(demand / REQUEST_BYTES) * 1000
            push(at + max(gap, float(throttle)), _SEND, what)
    return run
