"""When an entity starts and stops being throttled: log events an operator can search, never one per request.

An *episode* starts with the first throttle an entity (quota type and sensor tags, as Kafka's
`throttle-time` metric is keyed) is given and ends once it has gone `quiet_ms` past the end of its last
throttle without another. Each episode gives two events: `throttle_started` (the first throttle) and
`throttle_stopped` (how long it lasted, how many throttles, their sum and largest). Throttles in between
are counted, not logged.

Bounded both ways: at most `max_starts_per_s` episodes start logging per second across all entities (the
rest are counted and reported in one `throttle_events_suppressed` event per sweep), and at most
`max_entities` episodes are open at once. Sans-IO: the caller passes the time and logs what it gets back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sluice.quota import QuotaTags

DEFAULT_QUIET_MS = 5_000
DEFAULT_MAX_STARTS_PER_S = 20
DEFAULT_MAX_ENTITIES = 10_000
_NONE: tuple[ThrottleEvent, ...] = ()


@dataclass(slots=True)
class _Episode:
    started_ms: int
    until_ms: int  # the end of the latest throttle
    logged: bool
    throttles: int = 1
    throttle_ms: int = 0
    largest_ms: int = 0


@dataclass(frozen=True, slots=True)
class ThrottleEvent:
    """One line to log: `event` is the event name, `fields` its structured fields."""

    event: str
    fields: dict[str, object] = field(default_factory=dict)


class ThrottleEpisodes:
    def __init__(
        self,
        quiet_ms: int = DEFAULT_QUIET_MS,
        max_starts_per_s: int = DEFAULT_MAX_STARTS_PER_S,
        max_entities: int = DEFAULT_MAX_ENTITIES,
    ) -> None:
        self._quiet_ms = quiet_ms
        self._max_starts = max_starts_per_s
        self._max_entities = max_entities
        self._open: dict[tuple[str, QuotaTags], _Episode] = {}
        self._second = -1
        self._starts_this_second = 0
        self._suppressed = 0

    def __len__(self) -> int:
        return len(self._open)

    def throttled(
        self, kind: str, tags: QuotaTags, throttle_ms: int, now_ms: int
    ) -> tuple[ThrottleEvent, ...]:
        """A throttle was given: `throttle_started` if it starts an episode that may be logged (after
        `throttle_stopped` for a quiet episode of the same entity that no sweep has closed yet)."""
        key = (kind, tags)
        episode = self._open.get(key)
        until = now_ms + throttle_ms
        if episode is not None and now_ms <= episode.until_ms + self._quiet_ms:
            episode.throttles += 1
            episode.throttle_ms += throttle_ms
            if throttle_ms > episode.largest_ms:
                episode.largest_ms = throttle_ms
            if until > episode.until_ms:
                episode.until_ms = until
            return _NONE
        events: tuple[ThrottleEvent, ...] = _NONE
        if episode is not None:  # a quiet episode the sweep has not closed yet: closed, then a new one
            del self._open[key]
            if episode.logged:
                events = (self._stopped(key, episode),)
        if len(self._open) >= self._max_entities:
            self._suppressed += 1
            return events
        second = now_ms // 1000
        if second != self._second:
            self._second, self._starts_this_second = second, 0
        logged = self._starts_this_second < self._max_starts
        if logged:
            self._starts_this_second += 1
        else:
            self._suppressed += 1
        self._open[key] = _Episode(now_ms, until, logged, 1, throttle_ms, throttle_ms)
        if not logged:
            return events
        started = ThrottleEvent(
            "throttle_started",
            {"quota_type": kind, "user": tags.user, "client_id": tags.client_id, "throttle_ms": throttle_ms},
        )
        return (*events, started)

    def sweep(self, now_ms: int) -> list[ThrottleEvent]:
        """Close the episodes that went quiet: their `throttle_stopped` events, and one for the suppressed."""
        events: list[ThrottleEvent] = []
        quiet = self._quiet_ms
        for key, episode in list(self._open.items()):
            if now_ms > episode.until_ms + quiet:
                del self._open[key]
                if episode.logged:
                    events.append(self._stopped(key, episode))
        if self._suppressed:
            events.append(ThrottleEvent("throttle_events_suppressed", {"episodes": self._suppressed}))
            self._suppressed = 0
        return events

    @staticmethod
    def _stopped(key: tuple[str, QuotaTags], episode: _Episode) -> ThrottleEvent:
        kind, tags = key
        return ThrottleEvent(
            "throttle_stopped",
            {
                "quota_type": kind,
                "user": tags.user,
                "client_id": tags.client_id,
                "duration_ms": episode.until_ms - episode.started_ms,
                "throttles": episode.throttles,
                "throttle_ms_total": episode.throttle_ms,
                "throttle_ms_max": episode.largest_ms,
            },
        )
