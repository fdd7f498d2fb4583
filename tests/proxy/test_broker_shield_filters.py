"""The broker shield's filter in a real chain, one connection at a time: each Produce charged to the broker
its connection reaches and throttled there, and each broker's Produce round trips timed for the latency
trigger (proxy/filters/broker_shield.py)."""

from __future__ import annotations

from records import one_batch_produce

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.frames import FrameHead
from sluice.protocol.headers import encode_request, parse_request_header
from sluice.protocol.produce_topics import LAST_WITH_TOPIC_NAMES
from sluice.proxy.cluster.broker_nodes import BrokerNodes, listener_name, listener_node
from sluice.proxy.data_path.filter_chain import FilterChain
from sluice.proxy.filter_api import Forward, InFlight
from sluice.proxy.filter_api.contract import EntryKind
from sluice.proxy.filters.broker_shield import BROKER_PRODUCE, BrokerShieldFactory
from sluice.proxy.observability.quota_metrics import ThrottleStats
from sluice.quota import QuotaTags
from sluice.quota.broker_shield import BrokerShield, ShieldLimits
from sluice.quota.latency_trigger import LatencyTargets
from sluice.quota.round_trips import EDGES, bucket_of

NODES = {1: ("127.0.0.1", 9001), 2: ("127.0.0.1", 9002)}


class Connection:
    """What these filters ask of ConnectionInfo: where the connection goes, and a clock moved by hand."""

    def __init__(self, listener: str, upstream_peer: str) -> None:
        self.listener = listener
        self.upstream_peer = upstream_peer
        self.now = 1_000_000

    def now_ms(self) -> int:
        return self.now


class Live:
    """Stands for LiveQuotas: the shield in force, which a reload may replace."""

    def __init__(self, limits: ShieldLimits | None) -> None:
        self.brokers = BrokerShield(limits) if limits is not None else None


def chain(live: Live, stats: ThrottleStats | None = None) -> tuple[FilterChain, BrokerShieldFactory]:
    shield = BrokerShieldFactory(live, BrokerNodes(lambda: dict(NODES)), stats or ThrottleStats())
    return FilterChain([shield]), shield


def connection(listener: str, upstream: str = "127.0.0.1:9001") -> Connection:
    return Connection(listener, upstream)


def produce(correlation_id: int, topic: str = "hot", size: int = 10_000, acks: int = 1) -> bytes:
    request = one_batch_produce(topic, [bytes(size)], acks=acks)
    return encode_request(ApiKey.PRODUCE, 7, correlation_id, "c", bytes(request.encode(version=7)))


def answer(filters, frame: bytes, conn: Connection, after_ms: int, kind=EntryKind.FORWARDED):  # type: ignore[no-untyped-def]
    conn.now += after_ms
    filters.on_response(InFlight(parse_request_header(frame), kind), b"\0\0\0\4" + frame[8:12])


def test_listener_names_say_which_node() -> None:
    assert listener_node(listener_name(7)) == 7
    assert listener_node("bootstrap") is None
    nodes = BrokerNodes(lambda: dict(NODES))
    assert nodes.node_of("broker-2", "") == 2
    assert nodes.node_of("bootstrap", "127.0.0.1:9002") == 2  # the node that bootstrap server is
    assert nodes.node_of("bootstrap", "kafka-lb:9092") is None


def test_a_produce_is_charged_to_its_broker_and_throttled_there_only() -> None:
    live = Live(ShieldLimits(bytes_in_per_s=100_000))
    stats = ThrottleStats()
    filter_chain, _ = chain(live, stats)
    mutes: list[int] = []
    hot = filter_chain.for_connection(connection("broker-1"), mutes.append)
    other = filter_chain.for_connection(connection("broker-2"), mutes.append)
    out = [hot.on_request(parse_request_header(f), f) for f in (produce(i, size=30_000) for i in range(10))]
    throttled = [o for o in out if type(o) is Forward]
    assert throttled and mutes == [o.throttle_ms for o in throttled]
    assert stats.by_quota[(BROKER_PRODUCE, QuotaTags("", ""))][0] == len(throttled)
    frame = produce(99, size=30_000)
    assert other.on_request(parse_request_header(frame), frame) is frame  # broker 2 has headroom
    assert live.brokers is not None
    assert live.brokers.view(1, 0).produce_bytes > 300_000
    assert live.brokers.view(2, 0).held_topics == ()


def test_a_bootstrap_connection_is_charged_to_the_node_it_reached_or_to_none() -> None:
    live = Live(ShieldLimits(bytes_in_per_s=1e9))
    filter_chain, factory = chain(live)
    reached = filter_chain.for_connection(connection("bootstrap", "127.0.0.1:9002"), lambda _ms: None)
    frame = produce(1)
    reached.on_request(parse_request_header(frame), frame)
    assert live.brokers is not None and live.brokers.nodes() == [2]
    alias = filter_chain.for_connection(connection("bootstrap", "kafka-lb:9092"), lambda _ms: None)
    alias.on_request(parse_request_header(frame), frame)
    assert live.brokers.nodes() == [2]
    assert factory.unattributed_bytes == len(frame) - 4


def test_without_a_shield_nothing_is_read_and_a_large_produce_may_stream() -> None:
    live = Live(None)
    filter_chain, _ = chain(live)
    filters = filter_chain.for_connection(connection("broker-1"), lambda _ms: None)
    frame = produce(1, size=100_000)
    assert filter_chain.may_stream(ApiKey.PRODUCE)
    head = FrameHead(memoryview(frame)[:1024], len(frame))
    assert filters.on_request(parse_request_header(frame), head) is head
    answer(filters, frame, Connection("broker-1", ""), 10)  # nothing was timed: nothing to match
    live.brokers = BrokerShield(ShieldLimits(bytes_in_per_s=1000))  # a reload brings one
    assert not filter_chain.may_stream(ApiKey.PRODUCE)
    assert filter_chain.versions.max_versions[ApiKey.PRODUCE] == LAST_WITH_TOPIC_NAMES


def test_round_trips_are_timed_per_broker_only_with_the_latency_trigger() -> None:
    targets = LatencyTargets(produce_p99_ms=50, release_p99_ms=40, floor_bytes_per_s=1000)
    live = Live(ShieldLimits(bytes_in_per_s=1e9))
    filter_chain, _ = chain(live)
    conn = connection("broker-1")
    filters = filter_chain.for_connection(conn, lambda _ms: None)
    frame = produce(1)
    filters.on_request(parse_request_header(frame), frame)
    answer(filters, frame, conn, 70)
    assert live.brokers is not None and live.brokers.view(1, conn.now).p99_ms is None  # not measured
    live.brokers.configure(ShieldLimits(bytes_in_per_s=1e9, latency=targets))
    for i in range(2, 12):
        frame = produce(i)
        filters.on_request(parse_request_header(frame), frame)
        answer(filters, frame, conn, 70)
    assert live.brokers.view(1, conn.now).p99_ms == EDGES[bucket_of(70)]  # to its bucket's upper edge


def test_an_acks0_produce_and_an_answer_the_proxy_made_are_not_timed() -> None:
    targets = LatencyTargets(produce_p99_ms=50, release_p99_ms=40, floor_bytes_per_s=1000)
    live = Live(ShieldLimits(latency=targets))
    filter_chain, _ = chain(live)
    conn = connection("broker-1")
    filters = filter_chain.for_connection(conn, lambda _ms: None)
    silent = produce(1, acks=0)  # no answer will come for it
    filters.on_request(parse_request_header(silent), silent)
    conn.now += 5000
    timed = produce(2)
    filters.on_request(parse_request_header(timed), timed)
    refused = produce(3)
    answer(filters, timed, conn, 20)
    answer(filters, refused, conn, 900, kind=EntryKind.ANSWERED)  # never forwarded
    assert live.brokers is not None
    window = live.brokers._brokers[1].round_trips
    assert window is not None and window.count(conn.now) == 1
    assert window.percentile(0.99, conn.now) == 20  # the one timed; the trigger waits for three


def test_an_unknown_upstream_is_looked_for_again_at_most_once_a_second() -> None:
    known: dict[int, tuple[str, int]] = {}
    reads = []
    clock = [0.0]

    def known_nodes() -> dict[int, tuple[str, int]]:
        reads.append(clock[0])
        return dict(known)

    nodes = BrokerNodes(known_nodes, clock=lambda: clock[0])
    assert nodes.node_of("bootstrap", "127.0.0.1:9001") is None  # nothing discovered yet
    known.update(NODES)
    assert nodes.node_of("bootstrap", "127.0.0.1:9001") is None  # not read again so soon
    clock[0] = 1.0
    assert nodes.node_of("bootstrap", "127.0.0.1:9001") == 1
    assert nodes.node_of("bootstrap", "127.0.0.1:9002") == 2  # from what was read
    assert reads == [0.0, 1.0]
