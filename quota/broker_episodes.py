"""When a broker starts and stops holding topics back: two log events per episode, never one per request.

An episode starts with a broker's first throttle and ends once none of its topics has been throttled for
``quiet_ms`` past the end of its last throttle (as the client quotas' throttle episodes,
proxy/observability/throttle_episodes.py). The start is reported at the next sweep (about a second later)
with the topics held by then; the end with how long it lasted, its throttles and every topic it held. A broker
holds a topic from its throttle until ``quiet_ms`` after it ends: that is the metrics' "holding which
topics". Sans-IO: the caller passes the time and logs what it gets back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

DEFAULT_QUIET_MS = 5_000
# Topics named in one event, at most (a broker may hold thousands; the count says how many in all).
MAX_TOPICS_NAMED = 20


@dataclass(frozen=True, slots=True)
class ShieldEvent:
    """One line to log: `event` is the event name, `fields` its structured fields."""

    event: str
    fields: dict[str, object] = field(default_factory=dict)


@dataclass(slots=True)
class _Episode:
    started_ms: int
    until_ms: int  # the end of the latest throttle
    reported: bool = False
    throttles: int = 0
    throttle_ms: int = 0
    largest_ms: int = 0
    # topic -> the end of its latest throttle; a topic is held until quiet_ms after that.
    held: dict[str, int] = field(default_factory=dict)
    every_topic: set[str] = field(default_factory=set)


class HoldEpisodes:
    __slots__ = ("_open", "_quiet_ms")

    def __init__(self, quiet_ms: int = DEFAULT_QUIET_MS) -> None:
        self._quiet_ms = quiet_ms
        self._open: dict[int, _Episode] = {}

    def held(self, node: int, topics: Iterable[str], throttle_ms: int, now_ms: int) -> None:
        """`node` throttled a Produce for `throttle_ms`, holding `topics`."""
        until = now_ms + throttle_ms
        episode = self._open.get(node)
        if episode is None:
            episode = self._open[node] = _Episode(now_ms, until)
        episode.throttles += 1
        episode.throttle_ms += throttle_ms
        episode.largest_ms = max(episode.largest_ms, throttle_ms)
        episode.until_ms = max(episode.until_ms, until)
        for topic in topics:
            episode.held[topic] = max(episode.held.get(topic, until), until)
            episode.every_topic.add(topic)

    def holding(self, node: int) -> tuple[str, ...]:
        """The topics `node` holds now (as of the last sweep, or throttled since)."""
        episode = self._open.get(node)
        return tuple(sorted(episode.held)) if episode is not None else ()

    def sweep(self, now_ms: int, threshold_of: Callable[[int], float | None]) -> list[ShieldEvent]:
        """Report new episodes, release topics gone quiet, close quiet episodes."""
        events: list[ShieldEvent] = []
        quiet = self._quiet_ms
        for node, episode in list(self._open.items()):
            if not episode.reported:
                episode.reported = True
                threshold = threshold_of(node)
                events.append(
                    ShieldEvent(
                        "broker_throttle_started",
                        {
                            "node_id": node,
                            "threshold_bytes_per_s": None if threshold is None else round(threshold),
                            "throttle_ms": episode.largest_ms,
                            **_topics(episode.held),
                        },
                    )
                )
            for topic, until in list(episode.held.items()):
                if now_ms > until + quiet:
                    del episode.held[topic]
            if now_ms > episode.until_ms + quiet:
                del self._open[node]
                events.append(
                    ShieldEvent(
                        "broker_throttle_stopped",
                        {
                            "node_id": node,
                            "duration_ms": episode.until_ms - episode.started_ms,
                            "throttles": episode.throttles,
                            "throttle_ms_total": episode.throttle_ms,
                            "throttle_ms_max": episode.largest_ms,
                            **_topics(episode.every_topic),
                        },
                    )
                )
        return events


def _topics(topics: Iterable[str]) -> dict[str, object]:
    names = sorted(topics)
    return {"topics": names[:MAX_TOPICS_NAMED], "topic_count": len(names)}
