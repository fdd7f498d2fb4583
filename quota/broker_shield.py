"""The broker shield: the seed's bytesIn threshold per broker, with the topics over their share held.

"Broker side quota (V1)" (seeds/broker-side-topic-quota-v1.txt) sets a bytes-in threshold on each broker,
and per-topic thresholds that decide who is held back when the broker is over it. The proxy-wide topic
quotas (quota/topic_quotas.py) apply that arithmetic to all traffic through the proxy; the shield applies
it to each broker, which is where I/O degrades: a cluster whose leadership is skewed has headroom in total
while one broker drowns.

Per broker node id:

* its threshold: the static one (`bytes_in_per_s`, overridden per node), or the latency trigger's
  (quota/latency_trigger.py), the lower of the two when both apply; none means the broker is *open*;
* the seed's rule under it, a :class:`TopicQuotas` whose total is the threshold: explicit topic
  thresholds, the other topics seen on that broker sharing the rest, and a Produce throttled only when the
  broker is over its threshold *and* the topic over its share on that broker;
* its bytes-in rate (local and, in a fleet, the other instances' charges), for the metrics and the
  latency trigger, and which topics it holds now.

The sensors are token buckets holding one second of the threshold: a broker wants steady ingress, and a
sampled window's comb (docs/quotas.md) would let ten seconds' worth of the threshold in within one second,
the very overload the shield exists to prevent. Throttles, never drops, as the proxy-wide topic quotas.
Sans-IO and clock-free.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from sluice.quota import compiled
from sluice.quota.broker_episodes import HoldEpisodes, ShieldEvent
from sluice.quota.keys import SensorKind
from sluice.quota.latency_trigger import LatencyTargets, LatencyTrigger, TriggerChange
from sluice.quota.quota_config import QuotaWindow
from sluice.quota.round_trips import RoundTripWindow
from sluice.quota.topic_quotas import TopicQuotas
from sluice.quota.window import WindowRate

# The shield's buckets hold one second of the threshold (B = N x W x Q with N = 1, W = 1 s).
SHIELD_WINDOW = QuotaWindow(num_samples=1, size_s=1)
# The bytes-in rate reported and read by the latency trigger: the last five seconds or so.
RATE_SAMPLES, RATE_WINDOW_MS = 5, 1000
# The p99 window: three one-second sub-windows; the trigger lowers at most once per that span.
P99_SAMPLES, P99_WINDOW_MS = 3, 1000
P99 = 0.99
# The p99 is read so that at least this many round trips lie at or above it, and a window with fewer (but
# some) is not judged at all. A broker that leads few busy partitions answers a few Produce requests a
# second, the p99 of under 100 round trips is the slowest of them, and one round trip stalled by the
# machine (a pause of the proxy's process, not the broker's latency) would engage the loop and hold its
# topics.
SLOW_ROUND_TRIPS = 3
# Topics tracked per broker; further ones share one entry, so invented topic names cannot grow memory
# or dilute the other topics' shares without bound.
MAX_TOPICS = 1_000
OTHER_TOPICS = "<other topics>"  # never a Kafka topic name ('<' is not allowed in one)
# A topic not produced to for this long leaves its broker's share (as an idle quota sensor expires).
IDLE_TOPIC_MS = 3_600_000
_EXPIRY_EVERY_MS = 30_000
# Brokers a fleet's usage records may name (a cluster has far fewer; this only bounds bad records).
MAX_BROKERS = 10_000


@dataclass(frozen=True, slots=True)
class ShieldLimits:
    """What the operator configured: a default threshold, overrides per node, topic thresholds (applied
    on each broker), and the latency trigger's targets (None: `trigger: bytes_in`)."""

    bytes_in_per_s: float | None = None
    nodes: Mapping[int, float] = field(default_factory=dict, hash=False)
    topic_thresholds: Mapping[str, float] = field(default_factory=dict, hash=False)
    latency: LatencyTargets | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", MappingProxyType(dict(self.nodes)))
        object.__setattr__(self, "topic_thresholds", MappingProxyType(dict(self.topic_thresholds)))

    def static_threshold(self, node: int) -> float | None:
        return self.nodes.get(node, self.bytes_in_per_s)


@dataclass(frozen=True, slots=True)
class BrokerView:
    """One broker as the metrics show it."""

    node: int
    bytes_in_per_s: float
    threshold: float | None  # None: open
    held_topics: tuple[str, ...]
    p99_ms: float | None
    produce_bytes: int  # charged here (this instance), since start
    throttles: int
    throttle_ms: int


class _Broker:
    __slots__ = (
        "node",
        "produce_bytes",
        "quotas",
        "rate",
        "round_trips",
        "static",
        "throttle_ms",
        "throttles",
        "topics",
        "trigger",
    )

    def __init__(self, node: int, limits: ShieldLimits) -> None:
        self.node = node
        self.rate: WindowRate = compiled.SAMPLED_RATE(RATE_SAMPLES, RATE_WINDOW_MS)
        self.topics: dict[str, int] = {}  # topic -> last produced to (ms)
        self.quotas: TopicQuotas | None = None  # None while open
        self.static = limits.static_threshold(node)
        self.trigger: LatencyTrigger | None = None
        self.round_trips: RoundTripWindow | None = None
        self.produce_bytes = 0
        self.throttles = 0
        self.throttle_ms = 0

    def threshold(self) -> float | None:
        dynamic = self.trigger.threshold if self.trigger is not None else None
        if dynamic is None:
            return self.static
        return dynamic if self.static is None else min(dynamic, self.static)

    def named(self, topic_sizes: Iterable[tuple[str, int]], now_ms: int) -> list[tuple[str, int]]:
        """The sizes with each topic stamped as seen (a topic beyond MAX_TOPICS counted as OTHER_TOPICS)."""
        topics = self.topics
        named = []
        for topic, size in topic_sizes:
            if topic not in topics and len(topics) >= MAX_TOPICS:
                topic = OTHER_TOPICS
            topics[topic] = now_ms
            named.append((topic, size))
        return named


class BrokerShield:
    """Every broker's threshold, the seed's rule under it, and the latency trigger (when configured)."""

    __slots__ = ("_brokers", "_episodes", "_limits", "_next_expiry_ms", "measures_latency")

    def __init__(self, limits: ShieldLimits) -> None:
        self._limits = limits
        # Whether Produce round trips are wanted (the latency trigger is on): read per request.
        self.measures_latency = limits.latency is not None
        self._brokers: dict[int, _Broker] = {}
        self._episodes = HoldEpisodes()
        self._next_expiry_ms: int | None = None

    @property
    def limits(self) -> ShieldLimits:
        return self._limits

    def nodes(self) -> list[int]:
        return sorted(self._brokers)

    def configure(self, limits: ShieldLimits) -> None:
        """New limits (a reload): sensors keep their history, thresholds change at once."""
        dropped = set(self._limits.topic_thresholds) - set(limits.topic_thresholds)
        self._limits = limits
        self.measures_latency = limits.latency is not None
        for broker in self._brokers.values():
            broker.static = limits.static_threshold(broker.node)
            if limits.latency is None:
                broker.trigger = broker.round_trips = None
            elif broker.trigger is None:
                self._add_trigger(broker, limits.latency)
            else:
                broker.trigger.retarget(limits.latency)
            if broker.quotas is not None:
                for topic in dropped:
                    broker.quotas.set_threshold(topic, None)
                    if topic not in broker.topics:
                        broker.quotas.remove_topic(topic)  # reserved here, never produced to
            self._apply_threshold(broker)

    # -- traffic -------------------------------------------------------------------------------------

    def record(self, node: int, topic_sizes: Iterable[tuple[str, int]], now_ms: int) -> int:
        """A Produce forwarded to `node`: its bytes per topic; the throttle it earned (0: none)."""
        broker = self._brokers.get(node)
        if broker is None:
            broker = self._add(node)
        named = broker.named(topic_sizes, now_ms)
        size = 0
        for _topic, bytes_ in named:
            size += bytes_
        broker.rate.record(size, now_ms)
        broker.produce_bytes += size
        quotas = broker.quotas
        if quotas is None:
            return 0
        held: list[str] = []
        throttle = quotas.record_request(named, now_ms, held)
        if throttle > 0:
            broker.throttles += 1
            broker.throttle_ms += throttle
            self._episodes.held(node, held, throttle, now_ms)
        return throttle

    def record_remote(self, node: int, topic_sizes: Iterable[tuple[str, int]], now_ms: int) -> None:
        """Another instance's Produce bytes to `node` (a fleet): recorded, never throttled on."""
        broker = self._brokers.get(node)
        if broker is None:
            if len(self._brokers) >= MAX_BROKERS:
                return  # node ids from a garbled usage record cannot grow memory without bound
            broker = self._add(node)
        named = broker.named(topic_sizes, now_ms)
        broker.rate.record(sum(size for _topic, size in named), now_ms)
        if broker.quotas is not None:
            broker.quotas.record_only(named, now_ms)

    def round_trip(self, node: int, round_trip_ms: int, now_ms: int) -> None:
        """A Produce to `node` answered `round_trip_ms` after it was forwarded."""
        broker = self._brokers.get(node)
        if broker is None:
            broker = self._add(node)
        if broker.round_trips is not None:
            broker.round_trips.record(round_trip_ms, now_ms)

    # -- once a second -------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> list[ShieldEvent]:
        """Evaluate the latency triggers, close quiet holding episodes, forget idle topics (call about once
        a second); the events to log."""
        events: list[ShieldEvent] = []
        for broker in self._brokers.values():
            trigger, round_trips = broker.trigger, broker.round_trips
            if trigger is None or round_trips is None:
                continue
            if 0 < round_trips.count(now_ms) < SLOW_ROUND_TRIPS:
                # Too few answered to judge either way. Read as none, a held broker that answers that little
                # (slowed, or starved by its own throttles) would be raised and released.
                continue
            p99 = round_trips.percentile(P99, now_ms, SLOW_ROUND_TRIPS)
            change = trigger.evaluate(p99, broker.rate.measure(now_ms), now_ms)
            if change is not None:
                self._apply_threshold(broker)
                events.append(_trigger_event(broker.node, change, broker.threshold()))
        events += self._episodes.sweep(now_ms, self._threshold_of)
        if self._next_expiry_ms is None or now_ms >= self._next_expiry_ms:
            self._next_expiry_ms = now_ms + _EXPIRY_EVERY_MS
            self._forget_idle_topics(now_ms)
        return events

    def view(self, node: int, now_ms: int) -> BrokerView:
        broker = self._brokers[node]
        round_trips = broker.round_trips
        p99 = None if round_trips is None else round_trips.percentile(P99, now_ms, SLOW_ROUND_TRIPS)
        return BrokerView(
            node,
            broker.rate.measure(now_ms),
            broker.threshold(),
            self._episodes.holding(node),
            p99,
            broker.produce_bytes,
            broker.throttles,
            broker.throttle_ms,
        )

    # -- inside --------------------------------------------------------------------------------------

    def _threshold_of(self, node: int) -> float | None:
        broker = self._brokers.get(node)
        return None if broker is None else broker.threshold()

    def _add(self, node: int) -> _Broker:
        broker = self._brokers[node] = _Broker(node, self._limits)
        if self._limits.latency is not None:
            self._add_trigger(broker, self._limits.latency)
        self._apply_threshold(broker)
        return broker

    @staticmethod
    def _add_trigger(broker: _Broker, targets: LatencyTargets) -> None:
        broker.round_trips = RoundTripWindow(P99_SAMPLES, P99_WINDOW_MS)
        broker.trigger = LatencyTrigger(targets, settle_ms=broker.round_trips.span_ms)

    def _apply_threshold(self, broker: _Broker) -> None:
        """Make the broker's TopicQuotas follow its threshold: made when one appears (its buckets start
        full: one second of the threshold), dropped when it goes, its total changed otherwise."""
        threshold = broker.threshold()
        if threshold is None:
            broker.quotas = None
            return
        explicit = self._limits.topic_thresholds
        quotas = broker.quotas
        if quotas is None:
            quotas = broker.quotas = TopicQuotas(threshold, SHIELD_WINDOW, SensorKind.TOKEN_BUCKET)
            quotas.set_topics(broker.topics)
        else:
            # Shrinking thresholds first, so the explicit ones always fit the total (validated so that
            # they fit every threshold the shield can reach: the static ones and the floor).
            for topic, value in explicit.items():
                if value < quotas.threshold(topic):
                    quotas.set_threshold(topic, value)
            if quotas.total_bytes_per_s != threshold:
                quotas.set_total(threshold)
        for topic, value in explicit.items():
            if quotas.threshold(topic) != value or topic not in quotas.topics:
                quotas.set_threshold(topic, value)

    def _forget_idle_topics(self, now_ms: int) -> None:
        explicit = self._limits.topic_thresholds
        for broker in self._brokers.values():
            idle = [t for t, seen in broker.topics.items() if now_ms - seen > IDLE_TOPIC_MS]
            for topic in idle:
                del broker.topics[topic]
                if broker.quotas is not None and topic not in explicit:
                    broker.quotas.remove_topic(topic)


def _trigger_event(node: int, change: TriggerChange, threshold: float | None) -> ShieldEvent:
    return ShieldEvent(
        f"broker_latency_{change.step.value}",
        {
            "node_id": node,
            "produce_p99_ms": change.p99_ms,
            "bytes_in_per_s": round(change.bytes_in_per_s),
            "threshold_bytes_per_s": None if threshold is None else round(threshold),
        },
    )
