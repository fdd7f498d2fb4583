"""The filters that keep clients inside what the proxy can answer for, in process (no sockets):

* BrokerAddressRewrite rewrites NodeEndpoints in Produce/Fetch answers, leaves older versions (and answers
  without endpoints) as the very same frame, counts what it rewrites outside Metadata, and leaves out a node
  the directory has no listener for, logged once per node;
* ApiVersionsClamp offers only vetted versions (hide) or the chain's caps alone (pass);
* UnadvertisedRequests refuses a request for what was not offered, reads nothing but the header, and never
  refuses ApiVersions; ClientQuotas refuses Produce, Fetch and ShareFetch beyond the chain's versions, and an
  answer newer than the rewrite reads is refused the same way.
"""

from __future__ import annotations

import pytest
from kafka.protocol.metadata import ApiVersionsResponse, FindCoordinatorResponse
from node_endpoint_answers import REAL, answer
from structlog.testing import capture_logs

from sluice.config.protocol_settings import UnvettedApis
from sluice.protocol.api_keys import ApiKey
from sluice.protocol.codec_quirks import decode_body, encode_body
from sluice.protocol.errors import ProtocolError
from sluice.protocol.frames import FrameHead
from sluice.protocol.headers import RequestHeader, encode_request, encode_response, parse_request_header
from sluice.protocol.node_endpoints import decode_node_endpoints
from sluice.proxy.cluster.brokers import BrokerDirectory, ListenerUnavailable
from sluice.proxy.data_path.filter_chain import FilterChain
from sluice.proxy.filter_api import InFlight
from sluice.proxy.filters import ApiVersionsClampFactory, BrokerAddressRewriteFactory
from sluice.proxy.filters.unadvertised_requests import UnadvertisedRequestsFactory
from sluice.proxy.observability.metrics import ProxyMetrics
from sluice.proxy.process.listener_failures import ListenerFailures
from sluice.quota import ANONYMOUS


class Connection:
    peer, upstream_peer, listener, user = "127.0.0.1:1", "127.0.0.1:2", "bootstrap", ANONYMOUS

    def now_ms(self) -> int:
        return 0

    def mute_remaining_ms(self) -> int:
        return 0


def no_listener_for_node_2(node_id: int) -> int:
    if node_id == 2:
        raise ListenerUnavailable(2, "127.0.0.1:9002", "Address already in use", config_error=False)
    return 9000 + node_id


def rewriting_chain(metrics: ProxyMetrics) -> tuple[FilterChain, BrokerAddressRewriteFactory]:
    failures = ListenerFailures(metrics, lambda: directory, lambda *_a: None)
    directory = BrokerDirectory("sluice.example", no_listener_for_node_2, on_unavailable=failures.unavailable)
    rewrite = BrokerAddressRewriteFactory(directory, metrics.addresses_rewritten)
    return FilterChain([rewrite, ApiVersionsClampFactory()]), rewrite


def respond(chain: FilterChain, key: int, version: int, body: bytes) -> bytes | memoryview:
    frame = encode_response(key, version, 7, body)
    out = chain.for_connection(Connection(), lambda _ms: None).on_response(
        InFlight(RequestHeader(key, version, 7, "test", 0)), frame
    )
    assert isinstance(out, bytes | memoryview)
    return out if out is not frame else frame


def test_produce_and_fetch_answers_before_node_endpoints_leave_as_the_same_frame() -> None:
    chain, _ = rewriting_chain(ProxyMetrics())
    filters = chain.for_connection(Connection(), lambda _ms: None)
    for key, version in ((ApiKey.PRODUCE, 9), (ApiKey.FETCH, 15), (ApiKey.PRODUCE, 10), (ApiKey.FETCH, 16)):
        body = (
            answer(key, max(version, 10 if key == ApiKey.PRODUCE else 16), [])[1] if version >= 10 else b"x"
        )
        frame = encode_response(key, version, 7, body)
        assert filters.on_response(InFlight(RequestHeader(key, version, 7, "t", 0)), frame) is frame


def test_node_endpoints_are_rewritten_counted_and_a_node_without_listener_left_out_logged_once() -> None:
    metrics = ProxyMetrics()
    chain, _ = rewriting_chain(metrics)
    with capture_logs() as logs:
        for _ in range(3):
            out = respond(chain, ApiKey.FETCH, 16, answer(ApiKey.FETCH, 16, REAL)[1])
            body = memoryview(out)[4 + 5 :]  # flexible response header: correlation id, empty tags
            assert decode_node_endpoints(ApiKey.FETCH, 16, body) == [(3, "sluice.example", 9003)]
    assert metrics.addresses_rewritten[ApiKey.FETCH] == 6  # per answer: one rewritten, one left out
    assert [e["node_id"] for e in logs if e["event"] == "broker_not_advertised"] == [2]
    assert metrics.brokers_not_advertised == 1


def test_a_node_first_named_in_node_endpoints_gets_its_listener_before_the_answer_leaves() -> None:
    opened: list[int] = []

    def open_listener(node_id: int) -> int:
        opened.append(node_id)
        return 9000 + node_id

    directory = BrokerDirectory("sluice.example", open_listener)
    chain = FilterChain([BrokerAddressRewriteFactory(directory)])
    out = respond(chain, ApiKey.PRODUCE, 11, answer(ApiKey.PRODUCE, 11, [(7, "kafka-7.internal", 9092)])[1])
    assert opened == [7]  # a broker the proxy had never heard of, learnt from this answer
    assert decode_node_endpoints(ApiKey.PRODUCE, 11, memoryview(out)[9:]) == [(7, "sluice.example", 9007)]
    assert directory.upstream_address(7) == ("kafka-7.internal", 9092)


def test_find_coordinator_rewrites_are_counted_and_metadata_ones_are_not() -> None:
    metrics = ProxyMetrics()
    chain, _ = rewriting_chain(metrics)
    coordinators = [
        FindCoordinatorResponse.Coordinator(
            key=f"g{n}", node_id=n, host=f"kafka-{n}", port=9092, error_code=0, error_message=None
        )
        for n in (1, 3)
    ]
    body = encode_body(FindCoordinatorResponse(version=4, throttle_time_ms=0, coordinators=coordinators), 4)
    respond(chain, ApiKey.FIND_COORDINATOR, 4, body)
    assert metrics.addresses_rewritten[ApiKey.FIND_COORDINATOR] == 2
    assert sum(metrics.addresses_rewritten) == 2


def _api_versions(ranges: dict[int, tuple[int, int]], version: int = 3) -> bytes:
    entries = [
        ApiVersionsResponse.ApiVersion(api_key=k, min_version=a, max_version=b)
        for k, (a, b) in ranges.items()
    ]
    message = ApiVersionsResponse(version=version, error_code=0, api_keys=entries, throttle_time_ms=0)
    return encode_body(message, version)


BROKER = {
    ApiKey.PRODUCE: (0, 13),
    ApiKey.METADATA: (0, 13),
    ApiKey.DESCRIBE_QUORUM: (0, 2),
    ApiKey.VOTE: (0, 2),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
    ApiKey.SHARE_FETCH: (1, 2),
    120: (0, 3),  # an API newer than every schema the proxy knows
}


@pytest.mark.parametrize("version", range(5))
@pytest.mark.parametrize("unvetted", list(UnvettedApis))
def test_the_clamp_offers_only_vetted_versions_unless_told_to_pass(
    version: int, unvetted: UnvettedApis
) -> None:
    clamp = ApiVersionsClampFactory(unvetted)
    chain = FilterChain([BrokerAddressRewriteFactory(BrokerDirectory("p", lambda n: n)), clamp])
    out = respond(chain, ApiKey.API_VERSIONS, version, _api_versions(BROKER, version))
    offered = {
        e.api_key: (e.min_version, e.max_version)
        for e in decode_body(ApiVersionsResponse, version, memoryview(out)[8:]).api_keys
    }
    if unvetted is UnvettedApis.HIDE:
        assert offered == {
            ApiKey.PRODUCE: (0, 13),
            ApiKey.METADATA: (0, 13),
            ApiKey.DESCRIBE_QUORUM: (0, 1),  # v2 names the controllers
            ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
            ApiKey.SHARE_FETCH: (1, 2),
        }
    else:
        assert offered == BROKER  # only the chain's own limits, which these ranges do not reach


def gated_chain() -> FilterChain:
    return FilterChain(
        [
            UnadvertisedRequestsFactory(),
            BrokerAddressRewriteFactory(BrokerDirectory("p", lambda n: n)),
            ApiVersionsClampFactory(),
        ]
    )


@pytest.mark.parametrize(
    ("key", "version", "refused"),
    [
        (ApiKey.DESCRIBE_QUORUM, 1, False),
        (ApiKey.DESCRIBE_QUORUM, 2, True),
        (ApiKey.VOTE, 0, True),
        (ApiKey.METADATA, 13, False),
        (ApiKey.METADATA, 14, True),
        (ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, False),
        (120, 0, True),
        (127, 0, True),
        # Keys outside the routing table: every one is refused, as an API never offered.
        (128, 0, True),
        (0x7FFF, 0, True),
        (-1, 0, True),
        (-0x8000, 0, True),
        (ApiKey.API_VERSIONS, 99, False),  # Kafka answers any version of it (UNSUPPORTED_VERSION)
    ],
)
def test_a_request_for_what_was_not_offered_is_refused(key: int, version: int, refused: bool) -> None:
    filters = gated_chain().for_connection(Connection(), lambda _ms: None)
    frame = encode_request(key, version, 3, "client", b"\x00" * 8)
    header = parse_request_header(frame)
    if not refused:
        assert filters.on_request(header, frame) is frame
        return
    with pytest.raises(ProtocolError) as caught:
        filters.on_request(header, frame)
    assert caught.value.reason == "unadvertised_api_version"


def test_the_gate_reads_only_the_header_so_large_requests_still_stream() -> None:
    chain = gated_chain()
    assert chain.may_stream(ApiKey.DELETE_RECORDS)
    filters = chain.for_connection(Connection(), lambda _ms: None)
    frame = encode_request(ApiKey.DELETE_RECORDS, 2, 3, "client", b"\x00" * 100)
    head = FrameHead(memoryview(frame)[:40], len(frame))
    assert filters.on_request(parse_request_header(frame), head) is head


def server_chain(unvetted: UnvettedApis, **quota: object) -> FilterChain:
    from sluice.config.load import config_from_mapping
    from sluice.proxy.process.server import SluiceServer

    config = config_from_mapping(
        {
            "listen": "127.0.0.1:9092",
            "upstream": {"bootstrap": ["127.0.0.1:19092"]},
            "protocol": {"unvetted_apis": unvetted.value},
            "quota": quota,
        }
    )
    return SluiceServer(config).settings.chain


@pytest.mark.parametrize("unvetted", list(UnvettedApis))
def test_produce_fetch_and_share_fetch_beyond_the_chains_versions_are_refused_on_the_way_in(
    unvetted: UnvettedApis,
) -> None:
    """Not by the gate (they never meet it) but by ClientQuotas, which reads every one of them, in either
    mode: no filter could handle them (TopicQuotas reads Produce up to v12), so none was ever offered."""
    chain = server_chain(unvetted, topics={"total_bytes_per_s": 1000, "thresholds": {"t": 500}})
    filters = chain.for_connection(Connection(), lambda _ms: None)
    newest = chain.versions.max_versions
    assert (newest[ApiKey.PRODUCE], newest[ApiKey.FETCH], newest[ApiKey.SHARE_FETCH]) == (12, 18, 2)
    for key, name in (
        (ApiKey.PRODUCE, "Produce"),
        (ApiKey.FETCH, "Fetch"),
        (ApiKey.SHARE_FETCH, "ShareFetch"),
    ):
        # The clamp offers no more than that while it hides unvetted APIs: nothing offered is refused.
        assert chain.versions.newest_vetted_offer(key) == newest[key]
        frame = encode_request(key, newest[key] + 1, 3, "client", bytes(64))
        with pytest.raises(ProtocolError) as caught:
            filters.on_request(parse_request_header(frame), frame)
        assert caught.value.reason == "unadvertised_api_version"
        assert caught.value.detail == f"{name} v{newest[key] + 1}: the proxy offers up to v{newest[key]}"


def test_an_answer_newer_than_the_rewrite_reads_is_refused_as_a_request_never_offered() -> None:
    filters = gated_chain().for_connection(Connection(), lambda _ms: None)
    for key, too_new in (
        (ApiKey.PRODUCE, 14),
        (ApiKey.FETCH, 19),
        (ApiKey.SHARE_ACKNOWLEDGE, 3),
        (ApiKey.METADATA, 14),
    ):
        answer = encode_response(key, too_new, 3, b"\x00" * 16)
        with pytest.raises(ProtocolError) as caught:
            filters.on_response(InFlight(RequestHeader(key, too_new, 3, "client", 0)), answer)
        assert caught.value.reason == "unadvertised_api_version", key


@pytest.mark.parametrize("unvetted", list(UnvettedApis))
def test_the_server_gates_requests_only_while_it_hides_unvetted_apis(unvetted: UnvettedApis) -> None:
    factories = server_chain(unvetted).factories
    gated = any(isinstance(f, UnadvertisedRequestsFactory) for f in factories)
    assert gated is (unvetted is UnvettedApis.HIDE)
    clamp = next(f for f in factories if isinstance(f, ApiVersionsClampFactory))
    assert (clamp.vetted is not None) is (unvetted is UnvettedApis.HIDE)
