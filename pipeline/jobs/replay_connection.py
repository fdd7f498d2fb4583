"""One connection of the what-if replay and what it tallies: its requests go through the quota manager,
its throttles mute it, what it could not send yet waits in order (for the delay each byte had)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from sluice.quota import ClientQuotaManager

# Hourly counters of a connection: admitted, delayed, throttle_ms, throttle_count, throttled_seconds.
ADMITTED, DELAYED, THROTTLE_MS, THROTTLE_COUNT, THROTTLED_S = range(5)


@dataclass(slots=True)
class DirectionResult:
    """One entity's producer or consumer under the candidate quotas."""

    limited: bool = False
    bound: float | None = None
    sensor: str = ""
    demand_bytes: int = 0
    admitted_bytes: int = 0
    delayed_bytes: int = 0
    backlog_end_bytes: int = 0
    max_backlog_bytes: int = 0
    max_delay_ms: int = 0
    throttle_ms: int = 0
    throttle_count: int = 0
    throttled_seconds: int = 0
    # hour (epoch seconds // 3600) -> [admitted, delayed, throttle_ms, throttle_count, throttled_seconds]
    hours: dict[int, list[int]] = field(default_factory=dict)
    demand_hours: dict[int, int] = field(default_factory=dict)
    # (epoch ms, throttle ms) of every throttle, when asked for.
    events: list[tuple[int, int]] = field(default_factory=list)


def hour_counters(hours: dict[int, list[int]], hour: int) -> list[int]:
    counters = hours.get(hour)
    if counters is None:
        counters = hours[hour] = [0, 0, 0, 0, 0]
    return counters


class Connection:
    """One connection of the replay (an entity's producer or consumer): what waits, when it may send."""

    __slots__ = (
        "backlog",
        "cap",
        "client_id",
        "cum",
        "demand",
        "last_marked",
        "manager",
        "muted_until",
        "pending",
        "result",
        "retry_throttled",
        "start_s",
        "user",
    )

    def __init__(
        self,
        manager: ClientQuotaManager,
        user: str,
        client_id: str | None,
        demand: np.ndarray,
        start_s: int,
        cap: int,
        retry_throttled: bool,
        result: DirectionResult,
    ) -> None:
        self.manager: ClientQuotaManager = manager
        self.user = user
        self.client_id = client_id
        self.demand = demand
        self.cum = np.concatenate(([0], np.cumsum(demand)))
        self.start_s = start_s
        self.cap = max(1, cap)
        self.retry_throttled = retry_throttled
        self.result: DirectionResult = result
        self.backlog: deque[list[int]] = deque()
        self.pending = 0
        self.muted_until = -1
        self.last_marked = -1

    def arrive(self, second: int, size: int) -> None:
        self.backlog.append([second, size])
        self.pending += size
        if self.pending > self.result.max_backlog_bytes:
            self.result.max_backlog_bytes = self.pending

    def send(self, now: int, keep_events: bool) -> int:
        """Send what waits, request by request, until done or throttled; returns the throttle (0 if none)."""
        manager, user, client_id = self.manager, self.user, self.client_id
        while self.pending:
            chunk = self.pending if self.pending < self.cap else self.cap
            throttle = manager.record_and_get_throttle_ms(user, client_id, chunk, now)
            if throttle > 0 and self.retry_throttled:
                manager.unrecord(user, client_id, chunk, now)
            else:
                self._admit(chunk, now)
            if throttle > 0:
                self._throttled(now, throttle, keep_events)
                return throttle
        return 0

    def _admit(self, size: int, now: int) -> None:
        self.pending -= size
        second = now // 1000
        result = self.result
        counters = hour_counters(result.hours, second // 3600)
        counters[ADMITTED] += size
        left = size
        backlog = self.backlog
        while left:
            head = backlog[0]
            take = head[1] if head[1] <= left else left
            if head[0] < second:
                counters[DELAYED] += take
                waited = now - head[0] * 1000
                if waited > result.max_delay_ms:
                    result.max_delay_ms = waited
            head[1] -= take
            left -= take
            if not head[1]:
                backlog.popleft()

    def _throttled(self, now: int, throttle: int, keep_events: bool) -> None:
        result = self.result
        counters = hour_counters(result.hours, now // 3_600_000)
        counters[THROTTLE_MS] += throttle
        counters[THROTTLE_COUNT] += 1
        if keep_events:
            result.events.append((now, throttle))
        self.muted_until = now + throttle
        # The seconds the connection is muted in, each counted once.
        first = max(now // 1000, self.last_marked + 1)
        last = (now + throttle - 1) // 1000
        while first <= last:
            hour_end = (first // 3600 + 1) * 3600
            upto = min(last, hour_end - 1)
            hour_counters(result.hours, first // 3600)[THROTTLED_S] += upto - first + 1
            first = upto + 1
        self.last_marked = max(self.last_marked, last)

    def skip(self, begin: int, end: int) -> None:
        """Credit seconds [begin, end) (indexes) as admitted on arrival: nothing could be throttled there."""
        first = self.start_s + begin
        while begin < end:
            hour_end = ((first // 3600) + 1) * 3600 - self.start_s
            upto = min(end, hour_end)
            admitted = int(self.cum[upto] - self.cum[begin])
            if admitted:
                hour_counters(self.result.hours, (self.start_s + begin) // 3600)[ADMITTED] += admitted
            begin = upto
            first = self.start_s + begin
