"""The filter chain with the real filters and quota managers, one connection's filters at a time: the
ApiVersions clamp computed from what the filters declare, quotas that appear and disappear at run time
(through the managers' API) and take effect on the next request, and CPU time measured only while a
request_percentage quota needs it."""

from __future__ import annotations

import functools
import operator
import struct
from unittest import mock

import pytest
from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.producer import ProduceRequest

from sluice.config.quota_settings import MutationSettings
from sluice.protocol.api_keys import ApiKey
from sluice.protocol.api_vetting import vetted_max_versions
from sluice.protocol.broker_addresses import REWRITABLE_MAX_VERSIONS
from sluice.protocol.fetch import FETCH_MAX_VERSION
from sluice.protocol.headers import RequestHeader, encode_request, encode_response, parse_request_header
from sluice.protocol.message_codec import decode_response_body
from sluice.protocol.sasl import SASL_MAX_VERSIONS
from sluice.protocol.topic_mutations import MUTATION_MAX_VERSIONS
from sluice.proxy.cluster.brokers import BrokerDirectory
from sluice.proxy.cluster.topic_cache import TopicCache
from sluice.proxy.data_path.entity_gate import TIMED_OUT
from sluice.proxy.data_path.filter_chain import Deferred, FilterChain
from sluice.proxy.filter_api import Answer, Forward, InFlight, Respond
from sluice.proxy.filter_api.contract import FilterFactory
from sluice.proxy.filters import ApiVersionsClampFactory, BrokerAddressRewriteFactory
from sluice.proxy.filters.client_quotas import ClientQuotas, ClientQuotasFactory
from sluice.proxy.filters.mutation_quotas import MutationQuotasFactory
from sluice.proxy.filters.sasl_inspector import SaslInspectorFactory
from sluice.proxy.filters.unadvertised_requests import UnadvertisedRequestsFactory
from sluice.proxy.observability.quota_metrics import MutationRates, ThrottleStats
from sluice.quota import ANONYMOUS, QuotaEntity, QuotaKey, QuotaManagers

# Each test on both twins of the chain's and the pipeline's hot loops (tests/proxy/conftest.py).
pytestmark = pytest.mark.usefixtures("both_runs")

CLIENT = "chain-test"


class Connection:
    """The parts of ConnectionInfo the quota filters use, on a clock moved by hand."""

    def __init__(self) -> None:
        self.now = 1_000_000
        self.read = self.now  # when the request being filtered was read
        self.peer = "127.0.0.1:1"
        self.upstream_peer = "127.0.0.1:2"
        self.listener = "bootstrap"
        self.user = ANONYMOUS
        self.cpu_ns = 0
        self.cpu_taken = 0

    def now_ms(self) -> int:
        return self.now

    def read_ms(self) -> int:
        return self.read

    def take_cpu_ns(self) -> int:
        self.cpu_taken += 1
        spent, self.cpu_ns = self.cpu_ns, 0
        return spent

    def mute_remaining_ms(self) -> int:
        return 0


def quota_chain(managers: QuotaManagers) -> FilterChain:
    return FilterChain(
        [
            MutationQuotasFactory(
                managers,
                MutationSettings(),
                TopicCache(),
                ThrottleStats(),
                MutationRates(managers.config.controller_window),
            ),
            ClientQuotasFactory(managers),
        ]
    )


def produce(correlation_id: int, size: int = 10_000, client_id: str = CLIENT) -> bytes:
    body = struct.pack(">hhii", -1, 1, 1000, 0) + bytes(size)
    return encode_request(ApiKey.PRODUCE, 3, correlation_id, client_id, body)


def run_request(filters, frame: bytes):  # type: ignore[no-untyped-def]
    return filters.on_request(parse_request_header(frame), frame)


def test_the_api_versions_clamp_is_what_the_chain_declares() -> None:
    managers = QuotaManagers()
    clamp = ApiVersionsClampFactory()
    chain = FilterChain(
        [
            SaslInspectorFactory(),
            BrokerAddressRewriteFactory(
                BrokerDirectory("127.0.0.1", lambda node: 9000 + node, lambda _n: None)
            ),
            clamp,
            *quota_chain(managers).factories,
        ]
    )
    assert clamp.max_versions == chain.versions.max_versions
    for declared in (REWRITABLE_MAX_VERSIONS, SASL_MAX_VERSIONS, MUTATION_MAX_VERSIONS):
        for key, version in declared.items():
            assert chain.versions.max_versions[key] <= version
    assert chain.versions.max_versions[ApiKey.FETCH] == FETCH_MAX_VERSION
    assert (
        ApiKey.OFFSET_COMMIT not in chain.versions.max_versions
    )  # no filter touches it: the cluster's range stands


def test_the_vetting_is_computed_once_for_the_whole_chain_and_handed_to_the_clamp_and_the_gate() -> None:
    clamp, gate = ApiVersionsClampFactory(), UnadvertisedRequestsFactory()
    directory = BrokerDirectory("127.0.0.1", lambda node: 9000 + node, lambda _n: None)
    chain = FilterChain([gate, BrokerAddressRewriteFactory(directory), clamp])
    assert chain.versions.vetted == vetted_max_versions(chain.versions.address_rewrites)
    assert clamp.vetted == chain.versions.vetted
    assert gate.newest[ApiKey.METADATA] == chain.versions.newest_vetted_offer(ApiKey.METADATA) == 13
    assert gate.newest[ApiKey.VOTE] == -1  # a controllers' API: never offered


def test_a_chain_in_which_two_filters_rewrite_the_same_apis_addresses_is_refused() -> None:
    directory = BrokerDirectory("127.0.0.1", lambda node: 9000 + node, lambda _n: None)
    with pytest.raises(TypeError, match="two filters rewrite the broker addresses of api key"):
        FilterChain([BrokerAddressRewriteFactory(directory), BrokerAddressRewriteFactory(directory)])


def test_a_produce_quota_added_at_run_time_throttles_the_next_request_and_its_removal_frees_it() -> None:
    managers = QuotaManagers()
    conn = Connection()
    filters = quota_chain(managers).for_connection(conn, lambda _ms: None)
    frame = produce(1)
    assert run_request(filters, frame) is frame  # no quota: forwarded as it is, nothing charged

    entity = QuotaEntity(client_id=CLIENT)
    managers.set_quota(entity, QuotaKey.PRODUCER_BYTE_RATE, 1000)
    throttled = run_request(filters, produce(2))
    assert type(throttled) is Forward and throttled.throttle_ms > 0

    managers.set_quota(entity, QuotaKey.PRODUCER_BYTE_RATE, None)
    frame = produce(3)
    assert run_request(filters, frame) is frame


def test_a_mutation_quota_added_at_run_time_charges_the_next_create_topics() -> None:
    managers = QuotaManagers()
    conn = Connection()
    filters = quota_chain(managers).for_connection(conn, lambda _ms: None)
    topics = [
        CreateTopicsRequest.CreatableTopic(
            name=f"t{i}", num_partitions=50, replication_factor=1, assignments=[], configs=[]
        )
        for i in range(2)
    ]
    body = bytes(CreateTopicsRequest(topics=topics, timeout_ms=5000, validate_only=False).encode(version=5))
    frame = encode_request(ApiKey.CREATE_TOPICS, 5, 1, CLIENT, body)
    assert run_request(filters, frame) is frame
    managers.set_quota(QuotaEntity(client_id=CLIENT), QuotaKey.CONTROLLER_MUTATION_RATE, 1)
    charged = run_request(filters, encode_request(ApiKey.CREATE_TOPICS, 5, 2, CLIENT, body))
    assert type(charged) is Forward and charged.throttle_ms > 0  # permissive v5: forwarded, throttled


def test_cpu_time_is_asked_for_and_charged_only_while_a_request_quota_is_configured() -> None:
    managers = QuotaManagers()
    chain = quota_chain(managers)
    cpu_time_needed = chain.cpu_time_needed()
    conn = Connection()
    mutes: list[int] = []
    filters = chain.for_connection(conn, mutes.append)
    header = parse_request_header(encode_request(ApiKey.METADATA, 1, 1, CLIENT, b"\x00\x00\x00\x00"))
    metadata_response = encode_response(ApiKey.METADATA, 1, 1, bytes(16))
    assert not cpu_time_needed()
    assert filters.on_response(InFlight(header), metadata_response) is metadata_response
    assert conn.cpu_taken == 0  # Metadata is no quota filter's business without a request quota

    managers.set_quota(QuotaEntity(client_id=CLIENT), QuotaKey.REQUEST_PERCENTAGE, 0.01)
    assert cpu_time_needed()
    conn.cpu_ns = 50_000_000  # 50 ms of the proxy's time on this connection
    out = filters.on_response(InFlight(header), metadata_response)
    assert conn.cpu_taken == 1  # now every response charges the connection's CPU time
    # Over the quota: KIP-219 mode sends the response at once (no delay) and mutes the connection.
    assert type(out) is not Respond
    assert len(mutes) == 1 and mutes[0] > 0

    managers.set_quota(QuotaEntity(client_id=CLIENT), QuotaKey.REQUEST_PERCENTAGE, None)
    assert not cpu_time_needed()


def test_the_cpu_time_check_is_a_call_into_c_where_the_quotas_offer_one_and_the_method_elsewhere() -> None:
    # Asked at every pass's start and end: the client quotas' check reads their live rules' bits with no
    # Python frame, and gives the answer `needs_cpu_time` gives; a factory with only `needs_cpu_time` is
    # asked through it.
    managers = QuotaManagers()
    check = quota_chain(managers).cpu_time_needed()
    assert type(check) is functools.partial and type(check.func) is operator.attrgetter
    for percentage in (0.01, None, 5.0, None):
        managers.set_quota(QuotaEntity(client_id=CLIENT), QuotaKey.REQUEST_PERCENTAGE, percentage)
        assert bool(check()) is (percentage is not None)

    class AlwaysNeedsCpu(FilterFactory):
        filter_class = ClientQuotas  # any filter: only the factory's answer is looked at here

        def needs_cpu_time(self) -> bool:
            return True

    factory = AlwaysNeedsCpu()
    only_method = FilterChain([factory]).cpu_time_needed()
    assert only_method == factory.needs_cpu_time and only_method() is True


@pytest.mark.parametrize("key", [ApiKey.METADATA, 127, 128, 0x7FFF, -1, -0x8000])
def test_cpu_time_is_charged_on_the_response_of_any_api_key_even_outside_the_routing_table(key: int) -> None:
    managers = QuotaManagers()
    managers.set_quota(QuotaEntity(client_id=CLIENT), QuotaKey.REQUEST_PERCENTAGE, 0.01)
    conn = Connection()
    mutes: list[int] = []
    filters = quota_chain(managers).for_connection(conn, mutes.append)
    header = parse_request_header(encode_request(key, 0, 1, CLIENT, b"\x00\x00\x00\x00"))
    conn.cpu_ns = 50_000_000
    filters.on_response(InFlight(header), encode_response(key, 0, 1, bytes(16)))
    assert conn.cpu_taken == 1
    assert len(mutes) == 1 and mutes[0] > 0


def test_an_answer_with_no_cpu_time_of_its_own_is_throttled_as_recording_0_would_throttle_it() -> None:
    """The answers after the first in a pass bring no CPU time (a pass's is charged to the first answer
    after it) and reuse the check before them instead of recording 0: the throttles and the sensors are
    Kafka's, which records every request, whenever the ms, the user, the client-id or the quota changes
    between them, and when the pass's CPU time went to an uncharged answer (ApiVersions) while another
    connection of the entity charged the sensor since this one's last check, in the same ms."""
    managers, kafka = QuotaManagers(), QuotaManagers()
    conn, elsewhere = Connection(), Connection()
    mutes: list[int] = []
    chain = quota_chain(managers)
    filters = chain.for_connection(conn, mutes.append)
    other_filters = chain.for_connection(elsewhere, lambda _ms: None)

    def set_quotas(bound: float) -> None:
        for m in (managers, kafka):
            m.set_quota(QuotaEntity(client_id=CLIENT), QuotaKey.REQUEST_PERCENTAGE, bound)
            m.set_quota(QuotaEntity(client_id="other"), QuotaKey.REQUEST_PERCENTAGE, 5)
            m.set_quota(QuotaEntity(user="alice", client_id=CLIENT), QuotaKey.REQUEST_PERCENTAGE, 5)

    set_quotas(0.088)  # throttles below the 1 s cap, so that each recording can move them
    request_time = kafka.manager(QuotaKey.REQUEST_PERCENTAGE)
    # Passes: the ms it runs in, the CPU time of the pass before it, its answers' client-ids; between
    # two answers (at the same ms), "quota" for a quota changed, "as" for the user (re-authenticated),
    # "elsewhere" for another connection's pass charging CLIENT's sensor, "api_versions" for an answer
    # that is not charged (it takes the pass's CPU time and drops it).
    passes: list[tuple[int, int, list[str]]] = [
        (0, 3_000_000, [CLIENT, CLIENT, CLIENT]),
        (0, 2_000_000, [CLIENT, "other", CLIENT, "other"]),
        (1, 4_000_000, [CLIENT, CLIENT]),
        (1, 1_000_000, [CLIENT, "quota 0.092", CLIENT, CLIENT]),
        (5, 0, [CLIENT, CLIENT]),  # a pass whose first answer has no CPU time either
        (5, 3_000_000, ["elsewhere 50000", "api_versions", CLIENT, CLIENT]),
        (6, 2_000_000, [CLIENT, "as alice", CLIENT, f"as {ANONYMOUS}", CLIENT]),
        (700, 5_000_000, ["other", CLIENT, CLIENT]),
        (3000, 0, [CLIENT]),
    ]
    got, expected = [], []
    correlation_id = 0
    for at, cpu_ns, answers in passes:
        conn.now = 1_000_000 + at
        conn.cpu_ns = cpu_ns
        for client_id in answers:
            if client_id.startswith("quota "):
                set_quotas(float(client_id.split()[1]))
                continue
            if client_id.startswith("as "):
                conn.user = client_id.split()[1]
                continue
            correlation_id += 1
            if client_id.startswith("elsewhere "):
                spent_elsewhere = int(client_id.split()[1])
                elsewhere.now, elsewhere.cpu_ns = conn.now, spent_elsewhere
                header = parse_request_header(
                    encode_request(ApiKey.METADATA, 1, correlation_id, CLIENT, b"\x00\x00\x00\x00")
                )
                other_filters.on_response(
                    InFlight(header), encode_response(ApiKey.METADATA, 1, correlation_id, bytes(16))
                )
                request_time.record_request_time_ns(ANONYMOUS, CLIENT, spent_elsewhere, conn.now)
                continue
            if client_id == "api_versions":
                header = parse_request_header(
                    encode_request(ApiKey.API_VERSIONS, 0, correlation_id, CLIENT, b"")
                )
                filters.on_response(
                    InFlight(header), encode_response(ApiKey.API_VERSIONS, 0, correlation_id, bytes(8))
                )
                cpu_ns = 0  # taken, and charged to no request
                continue
            header = parse_request_header(
                encode_request(ApiKey.METADATA, 1, correlation_id, client_id, b"\x00\x00\x00\x00")
            )
            spent, cpu_ns = cpu_ns, 0  # the pass's CPU time goes to its first answer
            mutes.clear()
            filters.on_response(
                InFlight(header), encode_response(ApiKey.METADATA, 1, correlation_id, bytes(16))
            )
            got.append(max(mutes, default=0))
            expected.append(request_time.record_request_time_ns(conn.user, client_id, spent, conn.now))
    assert got == expected
    assert len(set(expected)) >= 5  # throttles that move from answer to answer, not only 0 and the cap
    for client_id in (CLIENT, "other"):
        ours = managers.manager(QuotaKey.REQUEST_PERCENTAGE).sensor_for(ANONYMOUS, client_id, conn.now)
        theirs = request_time.sensor_for(ANONYMOUS, client_id, conn.now)
        assert ours.measure(conn.now) == theirs.measure(conn.now)


def test_a_produce_read_in_an_earlier_ms_is_held_to_its_timeout_with_no_entity_throttled() -> None:
    managers = QuotaManagers()
    managers.set_quota(QuotaEntity(client_id=CLIENT), QuotaKey.PRODUCER_BYTE_RATE, 10_000_000)
    conn = Connection()
    filters = quota_chain(managers).for_connection(conn, lambda _ms: None)
    # Read this ms: it goes on (its deadline is not even read).
    frame = produce_to(1, 1000, (0,))
    assert run_request(filters, frame) is frame
    # Read 1.5 s ago, held behind something, past its 1 s timeout_ms: answered, not forwarded.
    conn.read = conn.now - 1500
    assert type(run_request(filters, produce_to(2, 1000, (0,)))) is Answer
    # Read 0.5 s ago: still within it.
    conn.read = conn.now - 500
    frame = produce_to(3, 1000, (0,))
    assert run_request(filters, frame) is frame


def test_each_connection_gets_its_own_filters() -> None:
    chain = quota_chain(QuotaManagers())
    first = chain.for_connection(Connection(), lambda _ms: None)
    second = chain.for_connection(Connection(), lambda _ms: None)
    quotas = [f for f in first.filters if isinstance(f, ClientQuotas)]
    assert quotas and all(f not in second.filters for f in first.filters)


def produce_to(correlation_id: int, timeout_ms: int, partitions: tuple[int, ...]) -> bytes:
    topic = ProduceRequest.TopicProduceData(
        name="orders",
        partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=i, records=bytes(20_000))
            for i in partitions
        ],
    )
    body = bytes(ProduceRequest(acks=1, timeout_ms=timeout_ms, topic_data=[topic]).encode(version=7))
    return encode_request(ApiKey.PRODUCE, 7, correlation_id, CLIENT, body)


def test_at_the_entity_gate_a_produce_held_past_its_timeout_is_answered_request_timed_out() -> None:
    managers = QuotaManagers()
    managers.set_quota(QuotaEntity(client_id=CLIENT), QuotaKey.PRODUCER_BYTE_RATE, 1000)
    chain = quota_chain(managers)  # mute_scope: entity, the default
    first, second = Connection(), Connection()
    throttled = run_request(chain.for_connection(first, lambda _ms: None), produce_to(1, 1000, (0,)))
    assert type(throttled) is Forward and throttled.throttle_ms > 1000  # the entity's gate shuts

    # On another connection, a Produce read 1.5 s ago (it waited behind that connection's own mute):
    # its client gave up after its 1 s timeout_ms, so it is answered, not forwarded nor charged.
    second.read = second.now - 1500
    answer = run_request(chain.for_connection(second, lambda _ms: None), produce_to(2, 1000, (0, 3)))
    assert type(answer) is Answer
    response = decode_response_body(ApiKey.PRODUCE, 7, answer.response[4 + 4 :])  # length, correlation id
    assert [(p.index, p.error_code) for p in response.responses[0].partition_responses] == [(0, 7), (3, 7)]
    assert response.throttle_time_ms > 0  # how long the gate stays shut, for a KIP-219 client
    assert chain.factories[1].stats.gate_timeouts == 1
    # Nothing was charged: the entity's gate stays shut exactly as long as the first request made it.
    gates = chain.factories[1].gates()
    assert (
        gates is not None
        and gates.shut_for_ms((ApiKey.PRODUCE, managers.produce.tags_for(ANONYMOUS, CLIENT)), first.now)
        == throttled.throttle_ms
    )


async def test_a_produce_let_go_because_its_quota_went_leaves_no_stale_turn_behind() -> None:
    """A Produce waits at the gate, times out there, and the quota is removed before it resumes: it goes
    on uncharged. When a quota comes back, the connection's next Produce is judged on its own, not
    answered REQUEST_TIMED_OUT for the one before it."""
    managers = QuotaManagers()
    entity = QuotaEntity(client_id=CLIENT)
    managers.set_quota(entity, QuotaKey.PRODUCER_BYTE_RATE, 1000)
    chain = quota_chain(managers)
    throttled = run_request(chain.for_connection(Connection(), lambda _ms: None), produce_to(1, 30_000, (0,)))
    assert type(throttled) is Forward
    waiting = Connection()
    filters = chain.for_connection(waiting, lambda _ms: None)
    frame = produce_to(2, 30_000, (0,))
    deferred = run_request(filters, frame)
    assert type(deferred) is Deferred
    deferred.ready.set_result(TIMED_OUT)  # its deadline passed at the gate
    managers.set_quota(entity, QuotaKey.PRODUCER_BYTE_RATE, None)
    assert filters.on_request(parse_request_header(frame), frame, deferred) is frame  # no quota now
    managers.set_quota(entity, QuotaKey.PRODUCER_BYTE_RATE, 10_000_000)
    waiting.now += 60_000
    waiting.read = waiting.now
    fresh = produce_to(3, 30_000, (0,))
    assert run_request(filters, fresh) is fresh  # well within the new quota: forwarded, not answered


def test_a_throttled_produce_answer_is_walked_once_for_its_node_endpoints_and_its_throttle_field() -> None:
    from kafka.protocol.producer import ProduceResponse

    from sluice.protocol import node_endpoints, response_walks

    managers = QuotaManagers()
    managers.set_quota(QuotaEntity(client_id=CLIENT), QuotaKey.PRODUCER_BYTE_RATE, 1000)
    directory = BrokerDirectory("127.0.0.1", lambda node: 9000 + node, lambda _n: None)
    chain = FilterChain([BrokerAddressRewriteFactory(directory), ClientQuotasFactory(managers)])
    filters = chain.for_connection(Connection(), lambda _ms: None)
    partition = ProduceResponse.TopicProduceResponse.PartitionProduceResponse
    topic = ProduceResponse.TopicProduceResponse(name="t", partition_responses=[partition(index=0)])
    body = bytes(ProduceResponse(version=12, responses=[topic], throttle_time_ms=0).encode(version=12))
    frame = memoryview(encode_response(ApiKey.PRODUCE, 12, 1, body))
    walks: list[int] = []
    walk = response_walks.produce_responses_end

    def counting(api_version: int, buffer: object, start: int = 0, remember: bool = False) -> int:
        walks.append(api_version)
        return walk(api_version, buffer, start, remember)  # type: ignore[arg-type]

    header = RequestHeader(ApiKey.PRODUCE, 12, 1, CLIENT, 0)
    with (
        mock.patch.object(response_walks, "produce_responses_end", counting),
        mock.patch.object(node_endpoints, "produce_responses_end", counting),
    ):
        out = filters.on_response(InFlight(header, throttle_ms=250), frame)
    assert isinstance(out, bytes)  # KIP-219: sent at once (the connection is muted after it)
    assert struct.unpack_from(">i", out, len(out) - 5)[0] == 250  # the throttle, told
    assert walks == [12]


@pytest.mark.parametrize("read", [True, False])
def test_the_rewrite_keeps_a_fetch_answers_topics_only_when_a_filter_reads_them(read: bool) -> None:
    """With usage records the rewrite's walk of a Fetch v16 answer lists its topics and keeps them for them;
    without, nothing reads them, and the walk only finds where the answer ends (no list, nothing held)."""
    import uuid

    from kafka.protocol.consumer import FetchResponse

    from sluice.protocol.response_walks import walked_fetch_topics

    directory = BrokerDirectory("127.0.0.1", lambda node: 9000 + node, lambda _n: None)
    chain = FilterChain([BrokerAddressRewriteFactory(directory, fetch_topics_read=read)])
    filters = chain.for_connection(Connection(), lambda _ms: None)
    topic_id = b"\x07" * 16
    partition = FetchResponse.FetchableTopicResponse.PartitionData(
        partition_index=0, error_code=0, high_watermark=1, records=b"\x01" * 300
    )
    topic = FetchResponse.FetchableTopicResponse(topic_id=uuid.UUID(bytes=topic_id), partitions=[partition])
    body = bytes(FetchResponse(version=16, throttle_time_ms=0, responses=[topic]).encode(version=16))
    frame = encode_response(ApiKey.FETCH, 16, 1, body)
    out = filters.on_response(InFlight(RequestHeader(ApiKey.FETCH, 16, 1, CLIENT, 0)), frame)
    assert out is frame  # no NodeEndpoints: the answer as it came
    assert walked_fetch_topics(16, frame, 4 + 5) == ([(topic_id, 300)] if read else None)


def fetch_request(correlation_id: int, client_id: str, max_bytes: int = 1 << 20) -> bytes:
    from sluice.protocol.client_requests import encode_fetch_request

    body = encode_fetch_request(12, "t", 0, 0, max_bytes=max_bytes, max_wait_ms=500)
    return encode_request(ApiKey.FETCH, 12, correlation_id, client_id, body)


def fetch_answer(correlation_id: int, record_bytes: int = 300) -> bytes:
    from kafka.protocol.consumer import FetchResponse

    topic_cls = FetchResponse.FetchableTopicResponse
    partition = topic_cls.PartitionData(
        partition_index=0, error_code=0, high_watermark=1, records=b"\x01" * record_bytes
    )
    body = FetchResponse(
        version=12,
        throttle_time_ms=0,
        error_code=0,
        session_id=0,
        responses=[topic_cls(topic="t", partitions=[partition])],
    ).encode(version=12)
    return encode_response(ApiKey.FETCH, 12, correlation_id, bytes(body))


def fetch_max_bytes(out: object) -> int:
    from sluice.protocol.fetch import fetch_request_limits

    frame = out.frame if isinstance(out, Forward) else out
    assert isinstance(frame, bytes | memoryview)
    limits = fetch_request_limits(12, memoryview(frame)[4 + parse_request_header(frame).size :])
    assert limits is not None
    return limits[1]


def test_a_fetch_is_capped_by_the_quota_in_force_for_its_own_user_and_client_id() -> None:
    """The cap a connection remembers from its last Fetch is asked again whenever what it depends on
    changed: a quota altered or removed between two Fetch requests, another client-id, another user
    (after SASL re-authentication); each request is capped as the manager caps it at that moment."""
    managers = QuotaManagers()
    fetch = managers.manager(QuotaKey.CONSUMER_BYTE_RATE)
    conn = Connection()
    filters = quota_chain(managers).for_connection(conn, lambda _ms: None)
    window = fetch.max_value_in_quota_window  # quota x (samples - 1) x window seconds
    correlation_id = 0

    def capped(client_id: str) -> int:
        nonlocal correlation_id
        correlation_id += 1
        return fetch_max_bytes(run_request(filters, fetch_request(correlation_id, client_id)))

    managers.set_quota(QuotaEntity(client_id=CLIENT), QuotaKey.CONSUMER_BYTE_RATE, 1000)
    assert capped(CLIENT) == capped(CLIENT) == int(window(ANONYMOUS, CLIENT)) == 10_000
    managers.set_quota(QuotaEntity(client_id=CLIENT), QuotaKey.CONSUMER_BYTE_RATE, 2000)
    assert capped(CLIENT) == 20_000  # altered: the very next Fetch
    assert capped("other") == 1 << 20  # no quota of its own: not capped
    assert capped(CLIENT) == 20_000
    managers.set_quota(QuotaEntity(user="alice", client_id=CLIENT), QuotaKey.CONSUMER_BYTE_RATE, 3000)
    assert capped(CLIENT) == 20_000  # a quota of another user's
    conn.user = "alice"  # re-authenticated
    assert capped(CLIENT) == 30_000
    conn.user = ANONYMOUS
    assert capped(CLIENT) == 20_000
    managers.set_quota(QuotaEntity(client_id=CLIENT), QuotaKey.CONSUMER_BYTE_RATE, None)
    assert capped(CLIENT) == 1 << 20  # removed: no longer capped


def test_each_fetch_answer_touches_the_throttle_series_its_entity_is_charged_to_now() -> None:
    """The series an answer's charges go to exist from then on: after a quota change that moves the
    entity to other tags, and again after the connection's memory of what it touched was cleared
    (a connection cycling client-ids), as they did when every answer looked its entity up."""
    from sluice.quota import QuotaTags

    managers = QuotaManagers()
    stats = ThrottleStats()
    chain = FilterChain([ClientQuotasFactory(managers, stats=stats)])
    conn = Connection()
    filters = chain.for_connection(conn, lambda _ms: None)
    for key in (QuotaKey.CONSUMER_BYTE_RATE, QuotaKey.REQUEST_PERCENTAGE, QuotaKey.PRODUCER_BYTE_RATE):
        managers.set_quota(QuotaEntity(client_id=CLIENT), key, 1e9)
    correlation_id = 0

    def answer(client_id: str = CLIENT) -> None:
        nonlocal correlation_id
        correlation_id += 1
        conn.cpu_ns = 1000
        header = RequestHeader(ApiKey.FETCH, 12, correlation_id, client_id, 0)
        filters.on_response(InFlight(header), fetch_answer(correlation_id))

    by_client, by_user = QuotaTags("", CLIENT), QuotaTags(ANONYMOUS, "")
    answer()
    assert {("Fetch", by_client), ("Request", by_client)} <= stats.by_quota.keys()
    # A user quota makes the entity's tags the user's (spec 2.3): the next answer makes those series.
    for key in (QuotaKey.CONSUMER_BYTE_RATE, QuotaKey.REQUEST_PERCENTAGE):
        managers.set_quota(QuotaEntity(user=ANONYMOUS), key, 1e9)
    answer()
    assert {("Fetch", by_user), ("Request", by_user)} <= stats.by_quota.keys()
    # Series dropped from the stats (as a full table drops them) come back only when touched again: not
    # while this connection's record of what it touched stands, at once when it was cleared.
    del stats.by_quota[("Fetch", by_user)], stats.by_quota[("Request", by_user)]
    answer()
    assert ("Fetch", by_user) not in stats.by_quota
    for i in range(64):  # Produce requests of 64 client-ids fill the record, which is then cleared
        run_request(filters, produce(1000 + i, 100, f"c{i}"))
    answer()
    assert {("Fetch", by_user), ("Request", by_user)} <= stats.by_quota.keys()

    # Another client-id, then another user (re-authenticated), under the same rules: each entity's series
    # from its first answer on.
    def series_of(user: str, client_id: str) -> set[tuple[str, QuotaTags]]:
        fetch, request = managers.fetch, managers.request
        return {("Fetch", fetch.tags_for(user, client_id)), ("Request", request.tags_for(user, client_id))}

    for user, client_id in ((ANONYMOUS, "other"), ("alice", "other")):
        conn.user = user
        stats.by_quota.clear()
        answer(client_id)
        assert series_of(user, client_id) <= stats.by_quota.keys(), (user, client_id)


def test_each_produce_touches_the_throttle_series_its_entity_is_charged_to_now() -> None:
    """As for answers (above): a Produce's series exist from its first charge on, after a quota change
    that moves its entity to other tags, after the connection's record of what it touched was cleared,
    and for another client-id and another user under the same rules, though the connection remembers the
    entity it touched last."""
    from sluice.quota import QuotaTags

    managers = QuotaManagers()
    stats = ThrottleStats()
    filters = FilterChain([ClientQuotasFactory(managers, stats=stats)]).for_connection(
        Connection(), lambda _ms: None
    )
    conn = filters.filters[0].conn
    managers.set_quota(QuotaEntity(client_id=CLIENT), QuotaKey.PRODUCER_BYTE_RATE, 1e9)
    correlation_id = 0

    def request(client_id: str = CLIENT) -> None:
        nonlocal correlation_id
        correlation_id += 1
        run_request(filters, produce(correlation_id, 100, client_id))

    request()
    assert ("Produce", QuotaTags("", CLIENT)) in stats.by_quota
    managers.set_quota(QuotaEntity(user=ANONYMOUS), QuotaKey.PRODUCER_BYTE_RATE, 1e9)  # tags: the user's
    request()
    by_user = ("Produce", QuotaTags(ANONYMOUS, ""))
    assert by_user in stats.by_quota
    del stats.by_quota[by_user]
    request()
    assert by_user not in stats.by_quota  # remembered as touched: not made again
    # Answers of 64 client-ids, charged for request time, fill the record, which is then cleared: the
    # Produce series come back at the next request, as when every request looked its entity up.
    managers.set_quota(QuotaEntity(user=ANONYMOUS), QuotaKey.REQUEST_PERCENTAGE, 1e9)
    request()
    assert by_user not in stats.by_quota  # still remembered as touched
    for i in range(64):
        header = RequestHeader(ApiKey.FETCH, 12, 1000 + i, f"c{i}", 0)
        filters.on_response(InFlight(header), fetch_answer(1000 + i))
    request()
    assert by_user in stats.by_quota
    for user, client_id in ((ANONYMOUS, "other"), ("alice", "other")):
        conn.user = user
        stats.by_quota.clear()
        request(client_id)
        assert ("Produce", managers.produce.tags_for(user, client_id)) in stats.by_quota, (user, client_id)
