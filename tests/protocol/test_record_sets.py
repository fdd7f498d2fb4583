"""produce_topic_bytes / fetch_topic_bytes against bodies built by kafka-python's own codecs, every version,
and fuzzed: whatever the bytes, only ProtocolError escapes."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer import FetchResponse
from kafka.protocol.producer import ProduceRequest

from sluice.protocol import response_walks
from sluice.protocol.api_keys import ApiKey
from sluice.protocol.codec_quirks import encode_body
from sluice.protocol.errors import ProtocolError
from sluice.protocol.node_endpoints import rewrite_node_endpoints
from sluice.protocol.produce_stream import produce_topic_bytes
from sluice.protocol.record_sets import fetch_topic_bytes

PRODUCE_VERSIONS = range(14)
FETCH_VERSIONS = range(19)
# (topic name, [(partition, record bytes or None)]): sizes chosen to cross varint and int16 boundaries.
LAYOUT = [
    ("orders", [(0, b"\x01" * 70), (1, b"\x02" * 300), (2, None)]),
    ("ünïcode-topic", [(5, b"\x03" * 20_000)]),
    ("empty", []),
    ("orders", [(3, b"\x04" * 5)]),
]
EXPECTED_SIZES = [370, 20_000, 0, 5]


def _topic_id(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_DNS, name)


def _expected(version: int, layout=LAYOUT, sizes=EXPECTED_SIZES) -> list[tuple[object, int]]:
    names = [name for name, _ in layout]
    keys = [_topic_id(n).bytes for n in names] if version >= 13 else names
    return list(zip(keys, sizes, strict=True))


def produce_body(version: int, layout=LAYOUT, transactional_id: str | None = "tx-1") -> bytes:
    topic_cls = ProduceRequest.TopicProduceData
    topics = []
    for name, partitions in layout:
        data = [topic_cls.PartitionProduceData(index=i, records=r) for i, r in partitions]
        identity = {"topic_id": _topic_id(name)} if version >= 13 else {"name": name}
        topics.append(topic_cls(**identity, partition_data=data))
    request = ProduceRequest(version=version, acks=-1, timeout_ms=30000, topic_data=topics)
    if version >= 3:
        request.transactional_id = transactional_id
    return bytes(request.encode(version=version))


def fetch_body(version: int, layout=LAYOUT, extras: bool = True) -> bytes:
    topic_cls = FetchResponse.FetchableTopicResponse
    part_cls = topic_cls.PartitionData
    topics = []
    for name, partitions in layout:
        data = []
        for i, records in partitions:
            partition = part_cls(
                partition_index=i,
                error_code=0,
                high_watermark=1000,
                last_stable_offset=990,
                log_start_offset=0,
                aborted_transactions=[
                    part_cls.AbortedTransaction(producer_id=7, first_offset=3),
                    part_cls.AbortedTransaction(producer_id=8, first_offset=4),
                ]
                if extras
                else None,
                preferred_read_replica=-1,
                records=records,
            )
            if extras and version >= 12:
                # Tagged fields a walker must step over.
                partition.diverging_epoch = part_cls.EpochEndOffset(epoch=3, end_offset=99)
                partition.current_leader = part_cls.LeaderIdAndEpoch(leader_id=2, leader_epoch=9)
            data.append(partition)
        identity = {"topic_id": _topic_id(name)} if version >= 13 else {"topic": name}
        topics.append(topic_cls(**identity, partitions=data))
    response = FetchResponse(
        version=version, throttle_time_ms=5, error_code=0, session_id=42, responses=topics
    )
    if extras and version >= 16:
        response.node_endpoints = [
            FetchResponse.NodeEndpoint(node_id=2, host="broker-2", port=9092, rack=None)
        ]
    return encode_body(response, version)


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@pytest.mark.parametrize("transactional_id", [None, "tx-" + "ï" * 100])
def test_produce_every_version(version: int, transactional_id: str | None) -> None:
    body = produce_body(version, transactional_id=transactional_id)
    assert produce_topic_bytes(version, body) == _expected(version)


@pytest.mark.parametrize("version", FETCH_VERSIONS)
@pytest.mark.parametrize("extras", [True, False])
def test_fetch_every_version(version: int, extras: bool) -> None:
    body = fetch_body(version, extras=extras)
    assert fetch_topic_bytes(version, body) == _expected(version)
    # Read in its frame, from where the body starts, as the usage records read an answer.
    framed = b"\x00\x00\x00\x09header" + body
    assert fetch_topic_bytes(version, framed, 10) == _expected(version)
    assert fetch_topic_bytes(version, memoryview(framed), 10) == _expected(version)


def test_memoryview_bodies_are_read_in_place() -> None:
    frame = b"\x00" * 10 + produce_body(7)
    assert produce_topic_bytes(7, memoryview(frame)[10:]) == _expected(7)


@pytest.mark.parametrize("version", [0, 3, 9, 13])
def test_produce_with_no_topics(version: int) -> None:
    assert produce_topic_bytes(version, produce_body(version, layout=[])) == []


@pytest.mark.parametrize("scan,version", [(produce_topic_bytes, 14), (fetch_topic_bytes, 19)])
def test_unknown_versions_are_refused(scan, version: int) -> None:
    with pytest.raises(ProtocolError) as info:
        scan(version, b"")
    assert info.value.reason == "unsupported_version"


@pytest.mark.parametrize("version", [0, 3, 9, 13])
def test_every_truncation_of_a_produce_is_a_protocol_error(version: int) -> None:
    body = produce_body(version, layout=[LAYOUT[0], ("t", [(0, b"x" * 3)])])
    for cut in range(len(body)):
        with pytest.raises(ProtocolError) as info:
            produce_topic_bytes(version, body[:cut])
        assert info.value.reason == "bad_produce_request"


@pytest.mark.parametrize("version", [0, 4, 11, 12, 16])
def test_every_truncation_of_a_fetch_is_a_protocol_error(version: int) -> None:
    body = fetch_body(version, layout=[("a", [(0, b"x" * 40), (1, None)])])
    for cut in range(len(body)):
        with pytest.raises(ProtocolError) as info:
            fetch_topic_bytes(version, body[:cut])
        assert info.value.reason == "bad_fetch_response"
        with pytest.raises(ProtocolError) as info:
            fetch_topic_bytes(version, b"head" + body[:cut], 4)  # and read from its start in a frame
        assert info.value.reason == "bad_fetch_response"


def test_trailing_bytes_are_refused() -> None:
    with pytest.raises(ProtocolError, match="after the topics"):
        produce_topic_bytes(3, produce_body(3) + b"\x00")
    with pytest.raises(ProtocolError, match="after the topics"):
        fetch_topic_bytes(12, fetch_body(12) + b"\x00")


def test_a_topic_name_that_is_not_utf8_is_a_protocol_error() -> None:
    body = bytearray(produce_body(0, layout=[("abc", [(0, b"x")])]))
    at = body.index(b"abc")
    body[at] = 0xFF
    with pytest.raises(ProtocolError) as info:
        produce_topic_bytes(0, bytes(body))
    assert info.value.reason == "bad_produce_request"


def _only_protocol_errors(scan, version: int, data: bytes) -> None:
    try:
        found = scan(version, data)
    except ProtocolError:
        return
    assert all(size >= 0 for _topic, size in found)
    assert sum(size for _topic, size in found) <= len(data)


_SCANS = st.sampled_from([(produce_topic_bytes, 13), (fetch_topic_bytes, 18)])


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(_SCANS, st.data(), st.binary(max_size=300))
def test_fuzz_random_bytes(scan_max, data, raw: bytes) -> None:
    scan, top = scan_max
    version = data.draw(st.integers(0, top))
    _only_protocol_errors(scan, version, raw)


_VALID = {
    ("produce", v): produce_body(v, layout=[("t", [(0, b"ab" * 20), (1, None)]), ("u", [(2, b"c")])])
    for v in PRODUCE_VERSIONS
} | {("fetch", v): fetch_body(v, layout=[("t", [(0, b"ab" * 20)]), ("u", [])]) for v in FETCH_VERSIONS}


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(sorted(_VALID)),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
    st.booleans(),
)
def test_fuzz_mutated_valid_bodies(key, flips, truncate: bool) -> None:
    kind, version = key
    body = bytearray(_VALID[key])
    for at, value in flips:
        body[at % len(body)] = value
    if truncate:
        body = body[: flips[0][0] % len(body)]
    scan = produce_topic_bytes if kind == "produce" else fetch_topic_bytes
    _only_protocol_errors(scan, version, bytes(body))


@pytest.mark.parametrize("version", [16, 18])
@pytest.mark.parametrize("twin", ["compiled", "python"])
def test_the_topics_of_a_fetch_answer_walked_for_its_node_endpoints_are_read_without_a_second_walk(
    version: int, twin: str
) -> None:
    # The compiled walked_fetch_topics (what this install runs) and its Python reference alike.
    walked_fetch_topics = response_walks.walked_fetch_topics
    if twin == "python":
        walked_fetch_topics = response_walks.walked_fetch_topics_in_python
    frame = b"\x00" * 9 + fetch_body(version)  # a size, a correlation id and an empty tagged block first

    def walk() -> None:
        unchanged = rewrite_node_endpoints(ApiKey.FETCH, version, frame, lambda n, h, p: (h, p), 9, True)
        assert unchanged == (None, 0)

    walk()
    assert walked_fetch_topics(version, frame, 9) == _expected(version)
    assert walked_fetch_topics(version, frame, 9) is None  # taken once: the answer is let go
    for other in ((version, bytes(bytearray(frame)), 9), (version - 1, frame, 9), (version, frame, 10)):
        walk()
        assert walked_fetch_topics(*other) is None  # equal bytes in another object, another version or start
    # Walked without `remember` (as fetch_topic_bytes walks): the remembered walk stays.
    walk()
    assert fetch_topic_bytes(version, fetch_body(version, layout=LAYOUT[:1])) == _expected(version)[:1]
    assert walked_fetch_topics(version, frame, 9) == _expected(version)


def test_a_null_topic_name_in_a_fetch_v12_answer_is_refused() -> None:
    """A topic name is a compact string that is never null (length + 1 = 0)."""
    name = LAYOUT[0][0]
    body = fetch_body(12)
    at = 4 + 2 + 4 + 1  # throttle_time_ms, error_code, session_id, the topics' count: the first name
    assert body[at] == len(name) + 1 and body[at + 1 : at + 1 + len(name)] == name.encode()
    with pytest.raises(ProtocolError):
        fetch_topic_bytes(12, body[:at] + b"\x00" + body[at + 1 + len(name) :])
