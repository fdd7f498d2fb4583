"""Topic-level produce quotas, after seeds/broker-side-topic-quota-v1.txt ("Broker side quota (V1)").

A total produce byte-rate threshold is shared by the topics: some topics have an explicit threshold, the
others split what is left equally, ``(total - sum(explicit)) / (number of topics without one)``,
recomputed whenever a threshold or the set of topics changes. An explicit threshold that would push the
explicit sum over the total is refused.

A produce to a topic violates the quota only when **both** the total rate and that topic's rate are over
their thresholds: a topic may exceed its share while the total has headroom, and a topic within its share
is never throttled because others are busy.

Differences from the seed, on purpose:

* The seed *drops* the produced data on a violation. Sluice never drops data: the request is forwarded
  and the client is **throttled** instead, for the time until either rate is back under its threshold
  (the smaller of the two throttles), exactly like a client quota throttle.
* The seed checks before recording and records only accepted data. Since Sluice forwards everything, it
  records everything, then checks (Kafka's record-then-check order, spec §1.5).
* The seed measures with a one-minute EWMA meter; Sluice uses the same sensors as the client quotas (a
  sampled window, or a token bucket), with the same N and W.
* The seed's thresholds are per broker; these apply to all traffic through this proxy. The broker shield
  (quota/broker_shield.py) applies the same arithmetic per broker, one TopicQuotas each.
"""

from __future__ import annotations

from collections.abc import Iterable

from sluice.quota.errors import QuotaConfigError, require_bound
from sluice.quota.keys import SensorKind, parse_sensor_kind
from sluice.quota.quota_config import QuotaWindow
from sluice.quota.sensor import QuotaSensor, new_quota_sensor


class TopicQuotas:
    """Per-topic produce thresholds (bytes/s) under a total; ``record`` returns the throttle in ms."""

    __slots__ = (
        "_explicit",
        "_implicit_share",
        "_kind",
        "_legacy",
        "_sensors",
        "_topics",
        "_total",
        "_total_sensor",
        "_window",
    )

    def __init__(
        self,
        total_bytes_per_s: float,
        window: QuotaWindow | None = None,
        sensor_kind: SensorKind = SensorKind.WINDOW,
        *,
        legacy_windows: bool = False,
    ) -> None:
        self._total = require_bound("total_bytes_per_s", total_bytes_per_s)
        self._window = QuotaWindow() if window is None else window
        self._kind = parse_sensor_kind(sensor_kind)
        self._legacy = bool(legacy_windows)
        self._explicit: dict[str, float] = {}
        self._topics: set[str] = set()
        self._sensors: dict[str, QuotaSensor] = {}
        self._total_sensor: QuotaSensor | None = None
        self._implicit_share = self._total

    # -- configuration -------------------------------------------------------------------------------

    @property
    def total_bytes_per_s(self) -> float:
        return self._total

    @property
    def implicit_share(self) -> float:
        """What each topic without an explicit threshold gets (the whole total if there is none)."""
        return self._implicit_share

    @property
    def topics(self) -> frozenset[str]:
        return frozenset(self._topics)

    def threshold(self, topic: str) -> float:
        """The threshold of ``topic``: its explicit one, or the implicit share."""
        explicit = self._explicit.get(topic)
        return self._implicit_share if explicit is None else explicit

    def set_total(self, total_bytes_per_s: float) -> None:
        """Change the total; refused if the explicit thresholds already add up to more."""
        total = require_bound("total_bytes_per_s", total_bytes_per_s)
        explicit_sum = sum(self._explicit.values())
        if explicit_sum > total:
            raise QuotaConfigError(
                "total_bytes_per_s",
                total_bytes_per_s,
                f">= the sum of explicit topic thresholds ({explicit_sum})",
            )
        self._total = total
        self._recompute()

    def set_threshold(self, topic: str, bytes_per_s: float | None) -> None:
        """Give ``topic`` an explicit threshold, or (``None``) return it to the implicit share.

        Refused (nothing changes) if the explicit thresholds would add up to more than the total.
        """
        _check_topic(topic)
        if bytes_per_s is None:
            self._explicit.pop(topic, None)
        else:
            value = require_bound(f"threshold of {topic!r}", bytes_per_s)
            explicit_sum = sum(v for t, v in self._explicit.items() if t != topic) + value
            if explicit_sum > self._total:
                raise QuotaConfigError(
                    f"threshold of {topic!r}",
                    bytes_per_s,
                    f"explicit thresholds summing to <= the total {self._total} (would be {explicit_sum})",
                )
            self._explicit[topic] = value
            self._topics.add(topic)
        self._recompute()

    def add_topic(self, topic: str) -> None:
        """Make ``topic`` known (it then takes part in the implicit share)."""
        _check_topic(topic)
        if topic not in self._topics:
            self._topics.add(topic)
            self._recompute()

    def remove_topic(self, topic: str) -> None:
        """Forget ``topic``, its explicit threshold and its history."""
        self._topics.discard(topic)
        self._explicit.pop(topic, None)
        self._sensors.pop(topic, None)
        self._recompute()

    def set_topics(self, topics: Iterable[str]) -> None:
        """Replace the set of known topics (e.g. from Metadata). Topics with explicit thresholds stay."""
        new = set(topics)
        for topic in new:
            _check_topic(topic)
        new |= self._explicit.keys()
        for gone in self._topics - new:
            self._sensors.pop(gone, None)
        self._topics = new
        self._recompute()

    # -- recording -----------------------------------------------------------------------------------

    def record(self, topic: str, size_bytes: int, now_ms: int) -> int:
        """Record ``size_bytes`` produced to ``topic`` at ``now_ms``; return the throttle in ms (0 if none).

        A topic seen for the first time joins the topic set (and the implicit share is recomputed).
        """
        return self.record_request(((topic, size_bytes),), now_ms)

    def record_request(
        self, topic_sizes: Iterable[tuple[str, int]], now_ms: int, held: list[str] | None = None
    ) -> int:
        """Record one produce request's bytes per topic; the throttle is the largest over its topics.

        `held`, when given, gets the topics that earned a throttle (those over their threshold while the
        total is over too)."""
        total_sensor, topics = self._record(topic_sizes, now_ms)
        if not total_sensor.violated(now_ms):
            return 0
        total_throttle = total_sensor.throttle_ms(now_ms)
        throttle = 0
        for topic, sensor in topics:
            if sensor is None:
                # A zero share: the topic is always over, so the total alone decides.
                topic_throttle = total_throttle
            elif not sensor.violated(now_ms):
                continue
            else:
                topic_throttle = min(total_throttle, sensor.throttle_ms(now_ms))
            if held is not None and topic_throttle > 0:
                held.append(topic)
            throttle = max(throttle, topic_throttle)
        return throttle

    def record_only(self, topic_sizes: Iterable[tuple[str, int]], now_ms: int) -> None:
        """Record bytes without a check (another instance's traffic, in a fleet): they weigh on the next
        local request, as Kafka's unchecked records do."""
        self._record(topic_sizes, now_ms)

    def _record(
        self, topic_sizes: Iterable[tuple[str, int]], now_ms: int
    ) -> tuple[QuotaSensor, list[tuple[str, QuotaSensor | None]]]:
        total_sensor = self._total_sensor
        if total_sensor is None:
            total_sensor = self._total_sensor = self._new_sensor(self._total, now_ms)
        topics: list[tuple[str, QuotaSensor | None]] = []
        request_bytes = 0
        for topic, size in topic_sizes:
            if topic not in self._topics:
                self.add_topic(topic)
            sensor = self._sensors.get(topic)
            threshold = self.threshold(topic)
            if sensor is None and threshold > 0:
                sensor = self._sensors[topic] = self._new_sensor(threshold, now_ms)
            if sensor is not None:
                sensor.record(size, now_ms, False)
            topics.append((topic, sensor))
            request_bytes += size
        total_sensor.record(request_bytes, now_ms, False)
        return total_sensor, topics

    def rate(self, topic: str, now_ms: int) -> float:
        """What ``topic``'s sensor measures now (rate, or tokens left for a token bucket); 0 if none."""
        sensor = self._sensors.get(topic)
        return 0.0 if sensor is None else sensor.measure(now_ms)

    def _recompute(self) -> None:
        implicit = self._topics - self._explicit.keys()
        remaining = self._total - sum(self._explicit.values())
        self._implicit_share = remaining / len(implicit) if implicit else remaining
        for topic, sensor in list(self._sensors.items()):
            threshold = self.threshold(topic)
            if threshold > 0:
                sensor.bound = threshold
            else:
                del self._sensors[topic]
        if self._total_sensor is not None:
            self._total_sensor.bound = self._total

    def _new_sensor(self, bound: float, now_ms: int) -> QuotaSensor:
        window = self._window
        return new_quota_sensor(
            self._kind, bound, now_ms, window.num_samples, window.window_ms, legacy=self._legacy
        )


def _check_topic(topic: object) -> None:
    if not isinstance(topic, str) or not topic:
        raise QuotaConfigError("topic", topic, "a non-empty topic name")
