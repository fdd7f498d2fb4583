"""protocol/_compiled.c: each compiled reader gives what its Python twin gives (the same result, or a
ProtocolError of the same reason) on valid bodies of every version with many topics and partitions, on
those bodies cut, corrupted, padded and nulled, and on random bytes, read from bytes, bytearrays and
views, at any offset in a frame. The Python twins are the reference (their own tests: test_response_walks,
test_produce_stream, test_record_sets, test_headers); what the proxy runs is the compiled one, where the
install has it.
"""

from __future__ import annotations

import contextlib
import sys
import uuid
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer.fetch import FetchResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from sluice.protocol import (
    compiled,
    frame_memory,
    headers,
    node_endpoints,
    produce,
    produce_stream,
    record_sets,
    response_walks,
)
from sluice.protocol import frames as frames_module
from sluice.protocol.api_keys import ApiKey
from sluice.protocol.codec_quirks import encode_body
from sluice.protocol.errors import ProtocolError
from sluice.protocol.primitives import encode_uvarint

EQUAL = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Record sets of every varint width the walks read inline or not: none, empty, one byte, two, three.
_RECORDS = st.one_of(st.none(), st.sampled_from([0, 1, 126, 127, 128, 300, 16_383, 16_384, 20_000]))
# Topic names of one-byte lengths and, up to Kafka's 249 characters, of two-byte ones.
_NAMES = st.text(min_size=1, max_size=12) | st.text(alphabet="aé", min_size=120, max_size=249)
_MESSAGES = st.one_of(st.none(), st.text(max_size=140))


def test_this_install_has_the_compiled() -> None:
    # CI builds the wheel and the development install with a C compiler: a walk missing there means the
    # build skipped the extension (pyproject.toml's ext-modules is optional) and the proxy runs the Python.
    missing = [name for name in compiled.__all__ if getattr(compiled, name) is None]
    assert missing == [], f"built without protocol/_compiled.c: {missing}"
    # and they are what the proxy's readers run
    assert headers.parse_request_header is compiled.parse_request_header
    assert response_walks._produce_end is compiled.produce_responses_end
    assert response_walks._fetch_walk is compiled.fetch_responses
    assert response_walks.fetch_answer_topics is compiled.fetch_answer_topics
    assert produce_stream._walk_whole is compiled.walk_produce_body
    assert produce_stream._topics_whole is compiled.produce_topic_bytes
    assert node_endpoints.rewrite_node_endpoints is compiled.rewrite_node_endpoints
    assert response_walks.walked_fetch_topics is compiled.walked_fetch_topics


def _outcome(walk: Callable[..., object], *args: object) -> tuple[str, object]:
    try:
        return "walked", walk(*args)
    except ProtocolError as exc:
        return "refused", exc.reason


@st.composite
def _produce_requests(draw: st.DrawFn) -> tuple[int, bytes]:
    version = draw(st.integers(0, produce_stream.PRODUCE_MAX))
    layout = draw(st.lists(st.tuples(_NAMES, st.lists(_RECORDS, max_size=5)), max_size=4))
    topic = ProduceRequest.TopicProduceData
    topics = [
        topic(
            **({"topic_id": uuid.UUID(int=i + 1)} if version >= 13 else {"name": name}),
            partition_data=[
                topic.PartitionProduceData(index=p, records=None if size is None else b"r" * size)
                for p, size in enumerate(sizes)
            ],
        )
        for i, (name, sizes) in enumerate(layout)
    ]
    request = ProduceRequest(version=version, acks=draw(st.sampled_from([-1, 0, 1])), timeout_ms=30_000)
    request.topic_data = topics
    if version >= 3:
        request.transactional_id = draw(st.one_of(st.none(), st.text(max_size=200)))
    return version, bytes(request.encode(version=version))


@st.composite
def _produce_answers(draw: st.DrawFn) -> tuple[int, bytes]:
    version = draw(st.integers(9, 13))
    answer = ProduceResponse.TopicProduceResponse
    partition = answer.PartitionProduceResponse
    topics = []
    for i, (name, count) in enumerate(draw(st.lists(st.tuples(_NAMES, st.integers(0, 4)), max_size=4))):
        partitions = []
        for p in range(count):
            errors = [
                partition.BatchIndexAndErrorMessage(batch_index=b, batch_index_error_message=message)
                for b, message in enumerate(draw(st.lists(_MESSAGES, max_size=3)))
            ]
            entry = partition(index=p, error_code=0, base_offset=p, record_errors=errors)
            entry.error_message = draw(_MESSAGES)
            if version >= 10 and draw(st.booleans()):
                entry.current_leader = partition.LeaderIdAndEpoch(leader_id=2, leader_epoch=7)
                entry.tags = {"current_leader"}
            partitions.append(entry)
        identity = {"topic_id": uuid.UUID(int=i + 1)} if version >= 13 else {"name": name}
        topics.append(answer(**identity, partition_responses=partitions))
    message = ProduceResponse(version=version, responses=topics, throttle_time_ms=draw(st.integers(0, 9)))
    return version, encode_body(message, version)


@st.composite
def _fetch_answers(draw: st.DrawFn) -> tuple[int, bytes]:
    version = draw(st.integers(12, 18))
    topic = FetchResponse.FetchableTopicResponse
    data = topic.PartitionData
    topics = []
    for i, (name, sizes) in enumerate(
        draw(st.lists(st.tuples(_NAMES, st.lists(_RECORDS, max_size=5)), max_size=4))
    ):
        partitions = []
        for p, size in enumerate(sizes):
            aborted = draw(st.one_of(st.none(), st.lists(st.integers(0, 9), max_size=3)))
            entry = data(
                partition_index=p,
                error_code=0,
                high_watermark=10,
                last_stable_offset=10,
                log_start_offset=0,
                aborted_transactions=None
                if aborted is None
                else [data.AbortedTransaction(producer_id=a, first_offset=a) for a in aborted],
                preferred_read_replica=-1,
                records=None if size is None else b"f" * size,
            )
            if draw(st.booleans()):
                entry.current_leader = data.LeaderIdAndEpoch(leader_id=1, leader_epoch=3)
                entry.tags = {"current_leader"}
            partitions.append(entry)
        identity = {"topic_id": uuid.UUID(int=i + 1)} if version >= 13 else {"topic": name}
        topics.append(topic(**identity, partitions=partitions))
    message = FetchResponse(version=version, throttle_time_ms=0, error_code=0, session_id=5, responses=topics)
    return version, encode_body(message, version)


@st.composite
def _spoiled(draw: st.DrawFn, body: bytes) -> bytes:
    """The body as it came, or cut, padded, with bytes overwritten (nulls, huge varints, lengths and
    counts just out of range), inserted or removed: what a broken or hostile peer sends."""
    data = bytearray(body)
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(data)))
        op = draw(st.integers(0, 5))
        if op == 0 and at < len(data):
            data[at] = draw(st.sampled_from([0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF]) | st.integers(0, 255))
        elif op == 1:
            data[at:at] = draw(st.binary(min_size=1, max_size=6))
        elif op == 2:
            del data[at : at + draw(st.integers(1, 6))]
        elif op == 3:
            del data[at:]
        elif op == 4:
            data[at : at + 4] = b"\xff\xff\xff\xff"
        else:  # a small negative or positive int16 or int32: a length or count just out of range
            width = draw(st.sampled_from([2, 4]))
            data[at : at + width] = draw(st.integers(-3, 3)).to_bytes(width, "big", signed=True)
    return bytes(data)


def _views(data: bytes, prefix: bytes) -> list[tuple[object, int]]:
    """The same bytes as the proxy may hold them: whole, or after a prefix (a frame's length and header)."""
    framed = prefix + data
    return [
        (data, 0),
        (bytearray(data), 0),
        (memoryview(framed)[len(prefix) :], 0),
        (memoryview(framed), len(prefix)),
        (framed, len(prefix)),
    ]


@EQUAL
@given(case=_produce_requests(), data=st.data())
def test_the_produce_request_walk_is_the_pythons(case: tuple[int, bytes], data: st.DataObject) -> None:
    version, body = case
    body = data.draw(_spoiled(body))
    walk, topics = compiled.walk_produce_body, compiled.produce_topic_bytes
    assert walk is not None and topics is not None
    for held in (body, bytearray(body), memoryview(b"head" + body)[4:]):
        assert _outcome(walk, version, held) == _outcome(
            produce_stream.walk_produce_body_in_python, version, body
        )
    for held, start in _views(body, data.draw(st.binary(max_size=9))):
        whole = _outcome(produce_stream.walk_produce_body_in_python, version, held, start)
        assert _outcome(walk, version, held, start) == whole
        # the topics alone: the same walk's topics, or the same refusal
        alone = _outcome(produce_stream.produce_topic_bytes_in_python, version, held, start)
        assert alone == (whole if whole[0] == "refused" else ("walked", whole[1][2]))  # type: ignore[index]
        assert _outcome(topics, version, held, start) == alone


@EQUAL
@given(case=_produce_answers(), data=st.data())
def test_the_produce_answer_walk_is_the_pythons(case: tuple[int, bytes], data: st.DataObject) -> None:
    version, body = case
    body = data.draw(_spoiled(body))
    walk = compiled.produce_responses_end
    assert walk is not None
    for held, start in _views(body, data.draw(st.binary(max_size=9))):
        assert _outcome(walk, version, held, start) == _outcome(
            response_walks.produce_responses_end_in_python, version, held, start
        )


@EQUAL
@given(case=_fetch_answers(), wanted=st.booleans(), data=st.data())
def test_the_fetch_answer_walk_is_the_pythons(
    case: tuple[int, bytes], wanted: bool, data: st.DataObject
) -> None:
    version, body = case
    body = data.draw(_spoiled(body))
    walk = compiled.fetch_responses
    assert walk is not None
    for held, start in _views(body, data.draw(st.binary(max_size=9))):
        assert _outcome(walk, version, held, start, wanted) == _outcome(
            response_walks.fetch_responses_in_python, version, held, start, wanted
        )


@EQUAL
@given(case=_fetch_answers(), data=st.data())
def test_the_fetch_answer_topics_walk_with_its_tagged_fields_is_the_pythons(
    case: tuple[int, bytes], data: st.DataObject
) -> None:
    version, body = case
    body = data.draw(_spoiled(body))
    walk = compiled.fetch_answer_topics
    assert walk is not None
    for held, start in _views(body, data.draw(st.binary(max_size=9))):
        assert _outcome(walk, version, held, start) == _outcome(
            response_walks.fetch_answer_topics_in_python, version, held, start
        )


def test_the_fetch_answer_topics_walk_ends_after_the_top_level_tagged_fields() -> None:
    # Not where the responses end (fetch_responses' offset): past the answer's own tagged fields, a field
    # with 3 bytes of data here, where record_sets.fetch_topic_bytes checks that nothing follows.
    walk = compiled.fetch_answer_topics
    assert walk is not None
    body = _small_fetch_answer(12)
    assert body[-1] == 0  # the answer's empty tagged fields, which the test replaces
    tagged = body[:-1] + bytes([1, 0, 3]) + b"xyz"
    found, responses_end = response_walks.fetch_responses_in_python(12, tagged, 0, True)
    assert responses_end == len(body) - 1
    assert walk(12, tagged, 0) == (found, len(tagged))
    assert walk(12, tagged + b"!", 0) == (found, len(tagged))  # what follows is the caller's to refuse
    assert record_sets.fetch_topic_bytes(12, tagged) == found
    with pytest.raises(ProtocolError) as refused:
        record_sets.fetch_topic_bytes(12, tagged + b"!")
    assert (refused.value.reason, refused.value.detail) == ("bad_fetch_response", "1 bytes after the topics")


@pytest.mark.parametrize("version", [9, 12, 13])
@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=64))
def test_random_bytes_are_walked_or_refused_alike(version: int, data: bytes) -> None:
    produce_end, fetch_walk, produce_walk = (
        compiled.produce_responses_end,
        compiled.fetch_responses,
        compiled.walk_produce_body,
    )
    assert produce_end is not None and fetch_walk is not None and produce_walk is not None
    assert _outcome(produce_end, version, data, 0) == _outcome(
        response_walks.produce_responses_end_in_python, version, data, 0
    )
    assert _outcome(fetch_walk, version, data, 0, True) == _outcome(
        response_walks.fetch_responses_in_python, version, data, 0, True
    )
    assert _outcome(compiled.fetch_answer_topics, version, data, 0) == _outcome(
        response_walks.fetch_answer_topics_in_python, version, data, 0
    )
    assert _outcome(produce_walk, version, data) == _outcome(
        produce_stream.walk_produce_body_in_python, version, data
    )
    assert _outcome(compiled.produce_topic_bytes, version, data) == _outcome(
        produce_stream.produce_topic_bytes_in_python, version, data
    )


def test_a_walk_reads_what_the_valid_body_says() -> None:
    # Not only equal to the Python: right. A Fetch v12 answer of two topics, its record bytes summed.
    version, body = (
        12,
        encode_body(
            FetchResponse(
                version=12,
                throttle_time_ms=0,
                error_code=0,
                session_id=0,
                responses=[
                    FetchResponse.FetchableTopicResponse(
                        topic=name,
                        partitions=[
                            FetchResponse.FetchableTopicResponse.PartitionData(
                                partition_index=p, high_watermark=1, records=b"x" * size
                            )
                            for p, size in enumerate(sizes)
                        ],
                    )
                    for name, sizes in (("orders", [300, 20_000]), ("ünï", [0, 5]))
                ],
            ),
            12,
        ),
    )
    fetch_walk = compiled.fetch_responses
    assert fetch_walk is not None
    found, end = fetch_walk(version, body, 0, True)
    assert found == [("orders", 20_300), ("ünï", 5)]
    assert end == len(body) - 1  # before the top-level tagged fields: one empty block
    again, _ = fetch_walk(version, body, 0, True)
    assert again == found
    assert again[0][0] is found[0][0]  # a recent ASCII name's str, handed back (see below)


def test_a_walk_refuses_a_negative_start_and_a_non_buffer_and_a_start_past_the_end_is_a_cut() -> None:
    produce_end, fetch_walk = compiled.produce_responses_end, compiled.fetch_responses
    assert produce_end is not None and fetch_walk is not None
    with pytest.raises(ValueError):
        produce_end(9, b"\x01", -1)
    for start in (21, 2**40, sys.maxsize - 5, sys.maxsize):  # an offset that would overflow past the end
        assert _outcome(produce_end, 9, bytes(20), start) == ("refused", "truncated")
        assert _outcome(fetch_walk, 12, bytes(20), start, True) == ("refused", "truncated")
    with pytest.raises(TypeError):
        produce_end(9, "not bytes", 0)  # type: ignore[arg-type]  # the error this test asserts
    produce_walk, produce_topics = compiled.walk_produce_body, compiled.produce_topic_bytes
    assert produce_walk is not None and produce_topics is not None
    for walk in (produce_walk, produce_topics):
        with pytest.raises(ValueError):
            walk(9, b"\x01", -1)
        # A cut: "truncated", said with the Produce walks' reason.
        for start in (21, 2**40, sys.maxsize - 5, sys.maxsize):
            assert _outcome(walk, 9, bytes(20), start) == ("refused", "bad_produce_request")
            assert _outcome(produce_stream.walk_produce_body_in_python, 9, bytes(20), start) == (
                "refused",
                "bad_produce_request",
            )
        with pytest.raises(TypeError):
            walk(9)  # type: ignore[call-arg]  # the error this test asserts


def _small_produce_request(version: int) -> bytes:
    topic = ProduceRequest.TopicProduceData
    request = ProduceRequest(version=version, acks=1, timeout_ms=100)
    request.topic_data = [
        topic(
            **({"topic_id": uuid.UUID(int=1)} if version >= 13 else {"name": "t"}),
            partition_data=[
                topic.PartitionProduceData(index=0, records=b"ab"),
                topic.PartitionProduceData(index=1),
            ],
        )
    ]
    if version >= 3:
        request.transactional_id = ""
    return bytes(request.encode(version=version))


def _overwritten(body: bytes) -> list[bytes]:
    """The body with one field at every offset set to a value just in or out of range: -2, -1, 0 and 1
    as int16 and int32, and single bytes that start a null, an empty or a long varint; each also with the
    body ending right after it."""
    out = []
    for at in range(len(body) + 1):
        for width, values in ((1, (0x00, 0x01, 0x80, 0xFF)), (2, (-2, -1, 0, 1)), (4, (-2, -1, 0, 1))):
            for value in values:
                data = bytearray(body)
                data[at : at + width] = value.to_bytes(width, "big", signed=width > 1)
                out += [bytes(data), bytes(data[: at + width])]  # and the body ending after it
    return out


@pytest.mark.parametrize("version", [0, 2, 3, 8, 9, 12, 13])
def test_every_request_field_set_just_out_of_range_is_walked_or_refused_alike(version: int) -> None:
    walk = compiled.walk_produce_body
    assert walk is not None
    topics = compiled.produce_topic_bytes
    assert topics is not None
    for data in _overwritten(_small_produce_request(version)):
        assert _outcome(walk, version, data) == _outcome(
            produce_stream.walk_produce_body_in_python, version, data
        ), data.hex()
        assert _outcome(topics, version, data) == _outcome(
            produce_stream.produce_topic_bytes_in_python, version, data
        ), data.hex()


def _named_request(version: int, names: list[str]) -> bytes:
    topic = ProduceRequest.TopicProduceData
    request = ProduceRequest(version=version, acks=1, timeout_ms=100)
    request.topic_data = [
        topic(name=name, partition_data=[topic.PartitionProduceData(index=0, records=b"x" * (i + 1))])
        for i, name in enumerate(names)
    ]
    if version >= 3:
        request.transactional_id = None
    return bytes(request.encode(version=version))


@pytest.mark.parametrize("version", [2, 9])
def test_the_walks_hand_back_the_str_of_a_recent_topic_name_and_read_each_name_right(version: int) -> None:
    # The walks keep the str of the last few ASCII topic names: a producer's next request gets the same
    # object (its hash already computed for the usage records' dictionaries), never another name's.
    walk, topics = compiled.walk_produce_body, compiled.produce_topic_bytes
    assert walk is not None and topics is not None
    first = topics(version, _named_request(version, ["orders-1"]))[0][0]
    again = walk(version, _named_request(version, ["orders-1"]))[2][0][0]
    assert first == again == "orders-1"
    assert again is first
    # Names of one length differing in one byte, more of them than are remembered, non-ASCII ones (decoded,
    # not remembered) and the empty name, over and over: each read as the bytes say.
    names = [f"orders-{c}" for c in "0123456789abcdef"] + ["ordérs-1", "", "orders-1"]
    for _ in range(3):
        for version_names in (names, names[::-1]):
            body = _named_request(version, version_names)
            expected = [(name, i + 1) for i, name in enumerate(version_names)]
            assert topics(version, body) == expected
            assert walk(version, body)[2] == expected
    # Only ASCII names are kept: a non-ASCII one whose str's stored units could equal another name's bytes
    # ('中' is 0x2D 0x4E in UCS-2; "-" is 0x2D) is never handed back for it.
    for first, then in (("中", "-"), ("é", "\xe9"), ("ü-x", "\xfc-x")):
        assert topics(version, _named_request(version, [first])) == [(first, 1)]
        assert topics(version, _named_request(version, [then])) == [(then, 1)]


def test_a_topic_name_longer_than_kafkas_limit_is_read_but_not_kept() -> None:
    # A hostile client's name, as long as a frame allows, must not stay pinned in the walks' names.
    topics = compiled.produce_topic_bytes
    assert topics is not None
    for length in (249, 250, 100_000):
        name = "y" * length
        first = topics(9, _named_request(9, [name]))[0][0]
        # Held by `first` and getrefcount's argument, and by the walks' names when kept.
        assert sys.getrefcount(first) == (3 if length <= 249 else 2)
        again = topics(9, _named_request(9, [name]))[0][0]
        assert first == again == name
        assert (again is first) == (length <= 249)


def _small_produce_answer(version: int) -> bytes:
    answer = ProduceResponse.TopicProduceResponse
    partition = answer.PartitionProduceResponse
    entry = partition(index=0, error_code=0, base_offset=1, error_message="e")
    entry.record_errors = [partition.BatchIndexAndErrorMessage(batch_index=0, batch_index_error_message="m")]
    identity = {"topic_id": uuid.UUID(int=1)} if version >= 13 else {"name": "t"}
    topics = [
        answer(**identity, partition_responses=[entry, partition(index=1, error_code=0, base_offset=2)])
    ]
    return encode_body(ProduceResponse(version=version, responses=topics, throttle_time_ms=0), version)


def _small_fetch_answer(version: int) -> bytes:
    topic = FetchResponse.FetchableTopicResponse
    data = topic.PartitionData
    partitions = [
        data(partition_index=0, high_watermark=1, records=b"ab", aborted_transactions=[]),
        data(
            partition_index=1,
            high_watermark=1,
            aborted_transactions=[data.AbortedTransaction(producer_id=1, first_offset=2)],
            records=None,
        ),
    ]
    identity = {"topic_id": uuid.UUID(int=1)} if version >= 13 else {"topic": "t"}
    message = FetchResponse(
        version=version, throttle_time_ms=0, responses=[topic(**identity, partitions=partitions)]
    )
    return encode_body(message, version)


@pytest.mark.parametrize("version", [9, 10, 13])
def test_every_produce_answer_field_set_just_out_of_range_is_walked_or_refused_alike(version: int) -> None:
    walk = compiled.produce_responses_end
    assert walk is not None
    for data in _overwritten(_small_produce_answer(version)):
        assert _outcome(walk, version, data, 0) == _outcome(
            response_walks.produce_responses_end_in_python, version, data, 0
        ), data.hex()


@pytest.mark.parametrize("version", [12, 13, 16])
def test_every_fetch_answer_field_set_just_out_of_range_is_walked_or_refused_alike(version: int) -> None:
    walk = compiled.fetch_responses
    assert walk is not None
    for data in _overwritten(_small_fetch_answer(version)):
        for wanted in (True, False):
            assert _outcome(walk, version, data, 0, wanted) == _outcome(
                response_walks.fetch_responses_in_python, version, data, 0, wanted
            ), data.hex()
        assert _outcome(compiled.fetch_answer_topics, version, data, 0) == _outcome(
            response_walks.fetch_answer_topics_in_python, version, data, 0
        ), data.hex()


@st.composite
def _request_frames(draw: st.DrawFn) -> bytes:
    api_key = draw(st.integers(-2, 90) | st.sampled_from([0, 1, 7, 18]))
    api_version = draw(st.integers(-1, 20))
    client_id = draw(st.one_of(st.none(), st.text(max_size=30), st.binary(max_size=30)))
    if isinstance(client_id, bytes):  # not UTF-8, maybe: decoded with replacement characters
        encoded_id = len(client_id).to_bytes(2, "big") + client_id
    elif client_id is None:
        encoded_id = b"\xff\xff"
    else:
        raw = client_id.encode()
        encoded_id = len(raw).to_bytes(2, "big") + raw
    tags = draw(st.sampled_from([b"", b"\x00", b"\x01\x00\x02ab", b"\x01\x00\x05ab", b"\x80"]))
    body = draw(st.binary(max_size=8))
    header = (
        api_key.to_bytes(2, "big", signed=True)
        + api_version.to_bytes(2, "big", signed=True)
        + draw(st.integers(-(2**31), 2**31 - 1)).to_bytes(4, "big", signed=True)
    )
    payload = header + encoded_id + tags + body
    return draw(_spoiled(len(payload).to_bytes(4, "big") + payload))


@settings(max_examples=1500, deadline=None)
@given(frame=_request_frames())
def test_the_request_header_parse_is_the_pythons(frame: bytes) -> None:
    parse = compiled.parse_request_header
    assert parse is not None
    expected = _outcome(headers.parse_request_header_in_python, frame)
    for held in (frame, bytearray(frame), memoryview(frame), memoryview(bytearray(b"ab" + frame))[2:]):
        found = _outcome(parse, held)
        assert found == expected
        if found[0] == "walked":
            assert type(found[1]) is headers.RequestHeader
    headers.forget_client_ids()  # and both read the one cache: a miss now, then a hit
    assert _outcome(parse, frame) == expected == _outcome(parse, frame)


@pytest.mark.parametrize("beyond", [0, 1, 2])
def test_an_array_count_just_past_the_bytes_left_is_refused_alike(beyond: int) -> None:
    # A count read as a full varint (128 and more) is checked against the bytes left: at the boundary the
    # twins say bad_array_length, or walk on and find the body cut.
    produce_end, fetch_walk = compiled.produce_responses_end, compiled.fetch_responses
    assert produce_end is not None and fetch_walk is not None
    left = 200
    count = encode_uvarint(left + beyond + 1)  # count + 1, as a compact array's length
    produce_answer = count + bytes(left)
    fetch_answer = bytes(10) + count + bytes(left)
    expected = _outcome(response_walks.produce_responses_end_in_python, 9, produce_answer, 0)
    assert _outcome(produce_end, 9, produce_answer, 0) == expected
    assert expected == ("refused", "bad_array_length" if beyond else "truncated")
    expected = _outcome(response_walks.fetch_responses_in_python, 12, fetch_answer, 0, True)
    assert _outcome(fetch_walk, 12, fetch_answer, 0, True) == expected


# ---- the NodeEndpoints rewrite: its common case compiled, every other case its Python reference's ----------


def _endpoint(node: int, host: str, port: int, rack: str | None) -> bytes:
    raw_host, raw_rack = host.encode(), None if rack is None else rack.encode()
    return b"".join(
        (
            node.to_bytes(4, "big", signed=True),
            encode_uvarint(len(raw_host) + 1),
            raw_host,
            port.to_bytes(4, "big", signed=True),
            b"\x00" if raw_rack is None else encode_uvarint(len(raw_rack) + 1) + raw_rack,
            b"\x00",
        )
    )


@st.composite
def _top_level_tags(draw: st.DrawFn) -> bytes:
    """A top-level tagged block: the usual empty one (the compiled path), or NodeEndpoints (tag 0) and
    other tags, or a cut one."""
    fields: list[tuple[int, bytes]] = []
    if draw(st.booleans()):
        entries = draw(
            st.lists(
                st.tuples(
                    st.integers(1, 4),
                    st.text(min_size=1, max_size=20),
                    st.integers(1, 65535),
                    st.none() | st.text(max_size=8),
                ),
                max_size=3,
            )
        )
        array = encode_uvarint(len(entries) + 1) + b"".join(_endpoint(*entry) for entry in entries)
        fields.append((0, array))
    for tag in draw(st.lists(st.integers(1, 300), max_size=2)):
        fields.append((tag, draw(st.binary(max_size=4))))
    block = encode_uvarint(len(fields)) + b"".join(
        encode_uvarint(tag) + encode_uvarint(len(value)) + value for tag, value in fields
    )
    return block[: draw(st.integers(0, len(block)))] if draw(st.integers(0, 9)) == 0 else block


def _advertise(node: int, host: str, port: int) -> tuple[str, int] | None:
    return None if node == 4 else ("sluice.example", 9000 + node)  # node 4 has no listener


def _unchanged(node: int, host: str, port: int) -> tuple[str, int]:
    return host, port


def _rewrite_outcome(rewrite: Callable[..., object], body: object, *args: object, **kwargs: object) -> object:
    """What a rewrite answers or raises, and what it leaves remembered for the throttle patch and the usage
    records (response_walks' two walks, forgotten first)."""
    response_walks._last = (None, -1, -1, -1)
    response_walks._last_fetch = response_walks._NO_FETCH_WALK
    try:
        outcome: object = ("rewritten", rewrite(*args, **kwargs))
    except (ProtocolError, ValueError, TypeError, BufferError) as exc:
        outcome = ("refused", type(exc), getattr(exc, "reason", None), getattr(exc, "detail", str(exc)))
    walked, walked_start, walked_version, end = response_walks._last
    fetched, fetched_start, fetched_version, found = response_walks._last_fetch
    remembered = (
        (walked is body, walked is None, walked_start, walked_version, end),
        (fetched is body, fetched is None, fetched_start, fetched_version, found),
    )
    return outcome, remembered


@st.composite
def _answers_to_rewrite(draw: st.DrawFn) -> tuple[int, int, bytes]:
    """(api key, version, body): a Produce or Fetch answer of any version the walks know, asked for as
    itself or as a neighbouring version, with any top-level tagged block, maybe spoiled; or bytes of
    another API."""
    kind = draw(st.sampled_from(["produce", "fetch", "other"]))
    if kind == "other":
        key = draw(st.sampled_from([ApiKey.METADATA, ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE, 90]))
        return int(key), draw(st.integers(-1, 3)), draw(st.binary(max_size=40))
    version, body = draw(_produce_answers() if kind == "produce" else _fetch_answers())
    assert body.endswith(b"\x00")  # the usual empty top-level tagged block
    body = body[:-1] + draw(_top_level_tags())
    if draw(st.integers(0, 3)) == 0:
        body = draw(_spoiled(body))
    version += draw(st.sampled_from([0, 0, 0, -1, 1, -3, 4]))
    return (ApiKey.PRODUCE if kind == "produce" else ApiKey.FETCH), version, body


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_answers_to_rewrite(), data=st.data())
def test_the_compiled_node_endpoints_rewrite_is_the_pythons(
    case: tuple[int, int, bytes], data: st.DataObject
) -> None:
    key, version, body = case
    rewrite = compiled.rewrite_node_endpoints
    assert rewrite is not None
    address_for = data.draw(st.sampled_from([_advertise, _unchanged]))
    remember = data.draw(st.sampled_from([True, False, 1, 0]))
    # the key as the header parse gives it (an int), or as ApiKey names it
    asked = data.draw(st.sampled_from([int(key), ApiKey(key) if key in ApiKey._value2member_map_ else key]))
    for held, start in _views(body, data.draw(st.binary(max_size=9))):
        for call in ("positional", "keywords", "defaults"):
            if call == "defaults" and start:
                continue
            args: tuple[object, ...] = (asked, version, held, address_for)
            kwargs: dict[str, object] = {}
            if call == "positional":
                args += (start, remember)
            elif call == "keywords":
                kwargs = {"start": start, "remember": remember}
            expected = _rewrite_outcome(
                node_endpoints.rewrite_node_endpoints_in_python, held, *args, **kwargs
            )
            assert _rewrite_outcome(rewrite, held, *args, **kwargs) == expected


class _CountedReference:
    """The Python rewrite, counting the calls the compiled one hands it."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, *args: object, **kwargs: object) -> object:
        self.calls += 1
        return node_endpoints.rewrite_node_endpoints_in_python(*args, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def counted_reference() -> Iterator[_CountedReference]:
    bind = compiled.bind_node_endpoints
    assert bind is not None
    reference = _CountedReference()
    bind(node_endpoints._VERSIONS, vars(response_walks), reference)
    try:
        yield reference
    finally:
        bind(node_endpoints._VERSIONS, vars(response_walks), node_endpoints.rewrite_node_endpoints_in_python)


def test_the_common_answers_are_the_compiled_ones_and_every_other_the_references(
    counted_reference: _CountedReference,
) -> None:
    rewrite = compiled.rewrite_node_endpoints
    assert rewrite is not None
    produce_key, fetch_key = int(ApiKey.PRODUCE), int(ApiKey.FETCH)  # as the header parse gives them
    produce, fetch = _small_produce_answer(10), _small_fetch_answer(16)
    framed = memoryview(b"\x00" * 9 + produce)
    # The common case: an empty top-level tagged block, in bytes and in a view of a frame; an old version.
    assert rewrite(produce_key, 10, framed, _advertise, 9, True) == (None, 0)
    assert response_walks.walked_produce_responses_end(10, framed, 9) == len(framed) - 5
    assert rewrite(fetch_key, 16, fetch, _advertise, 0, True) == (None, 0)
    assert response_walks.walked_fetch_topics(16, fetch, 0) == [(uuid.UUID(int=1).bytes, 2)]
    assert rewrite(produce_key, 9, b"", _advertise, 0, False) == (None, 0)
    assert counted_reference.calls == 0
    # Everything else: NodeEndpoints, another tag, a cut walk, another API, other arguments.
    entry = b"\x02" + _endpoint(2, "k", 1, None)
    with_endpoints = produce[:-1] + b"\x01\x00" + encode_uvarint(len(entry)) + entry
    assert rewrite(produce_key, 10, with_endpoints, _advertise, 0, False)[1] == 1
    assert rewrite(produce_key, 10, produce[:-1] + b"\x01\x07\x00", _advertise, 0, False) == (None, 0)
    with pytest.raises(ProtocolError):
        rewrite(produce_key, 10, produce[:-3], _advertise, 0, False)
    assert rewrite(int(ApiKey.METADATA), 12, b"", _advertise, 0, False) == (None, 0)  # not a field of it
    assert rewrite(produce_key, 10, produce, _advertise) == (None, 0)  # defaults
    assert rewrite(produce_key, 10, produce, _advertise, 0, 1) == (None, 0)  # remember not a bool
    assert rewrite(ApiKey.PRODUCE, 10, produce, _advertise, 0, False) == (None, 0)  # not an exact int
    assert counted_reference.calls == 7


def _long_produce_answer(version: int, partitions: int) -> bytes:
    """A Produce answer whose responses end past 256 bytes: the offset the walk remembers is no cached
    small int, so a reference leaked on it shows."""
    answer = ProduceResponse.TopicProduceResponse
    partition = answer.PartitionProduceResponse
    entries = [partition(index=p, error_code=0, base_offset=p) for p in range(partitions)]
    message = ProduceResponse(version=version, responses=[answer(name="t", partition_responses=entries)])
    return encode_body(message, version)


def test_the_compiled_common_cases_keep_no_reference_and_no_memory() -> None:
    rewrite, acks, header_size, topics = (
        compiled.rewrite_node_endpoints,
        compiled.produce_acks,
        compiled.response_header_size,
        compiled.produce_topics,
    )
    assert rewrite is not None and acks is not None and header_size is not None and topics is not None
    produce_frame = memoryview(b"\x00" * 9 + _long_produce_answer(11, 12))
    fetch_answer = _small_fetch_answer(17)
    # (key, version, body, start): answers walked to the end, and answers cut short (the walk fails there,
    # and the Python refuses them)
    whole = [(0, 11, produce_frame, 9), (1, 17, fetch_answer, 0)]
    cut = [(0, 11, produce_frame[:-6], 9), (1, 17, memoryview(fetch_answer)[:-3], 0)]
    request = ProduceRequest(version=9, acks=1, timeout_ms=100, topic_data=[])
    request.transactional_id = None
    produce_request = memoryview(headers.encode_request(ApiKey.PRODUCE, 9, 1, "c", request.encode(version=9)))
    request_header = headers.parse_request_header(produce_request)

    def run(times: int) -> None:
        for _ in range(times):
            for key, version, body, start in whole:
                for remember in (True, False):
                    rewrite(key, version, body, _advertise, start, remember)
            for key, version, body, start in cut:
                with pytest.raises(ProtocolError):
                    rewrite(key, version, body, _advertise, start, True)
            acks(produce_request, request_header)
            topics(produce_request, request_header)
            header_size(0, 11, produce_frame)  # 5
            header_size(0, 8, produce_frame)  # 4
            header_size(1, 17, fetch_answer)  # not a frame: another header, sized by the Python

    run(1000)  # caches and free lists warmed up
    # The end each Produce walk remembers is a new int, no cached small one: one leaked per walk shows.
    assert response_walks.walked_produce_responses_end(11, produce_frame, 9) > 256
    held = [produce_frame, fetch_answer, *(body for _, _, body, _ in cut), produce_request, request_header]
    references = [sys.getrefcount(one) for one in held]
    # The small ints the calls pass and answer (versions, sizes 4 and 5, a start 4 + the request header's
    # size) are shared objects, whose references a leak would raise.
    small = [0, 1, 4, 5, 8, 9, 11, 17, 4 + request_header.size]
    shared = [sys.getrefcount(n) for n in small]
    blocks = sys.getallocatedblocks()
    run(20_000)
    assert sys.getallocatedblocks() - blocks < 100
    assert [sys.getrefcount(one) for one in held] == references
    assert all(abs(sys.getrefcount(n) - count) < 1000 for n, count in zip(small, shared, strict=True))
    response_walks._last = (None, -1, -1, -1)  # the walk remembered holds the frame
    for view in (produce_frame, *(body for _, _, body, _ in cut), produce_request):
        view.release()  # no buffer of theirs is still held (BufferError otherwise)


# ---- a Produce request's acks: the common case compiled, every other case the Python's --------------------


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_produce_requests(), client_id=st.none() | st.text(max_size=20), data=st.data())
def test_the_compiled_produce_acks_is_the_pythons(
    case: tuple[int, bytes], client_id: str | None, data: st.DataObject
) -> None:
    version, body = case
    frame = headers.encode_request(ApiKey.PRODUCE, version, 7, client_id, body)
    header = headers.parse_request_header_in_python(frame)
    cut = data.draw(st.integers(len(frame) - len(body), len(frame)))  # only the head may have arrived
    acks = compiled.produce_acks
    assert acks is not None
    for held in (frame[:cut], bytearray(frame[:cut]), memoryview(frame)[:cut]):
        expected = _outcome(produce.produce_acks_in_python, held, header)
        assert _outcome(acks, held, header) == expected
        # a header of another version or size than the frame's: read as the Python reads it
        other = header._replace(
            api_version=data.draw(st.integers(-1, 14)), size=data.draw(st.integers(0, 40))
        )
        assert _outcome(acks, held, other) == _outcome(produce.produce_acks_in_python, held, other)


class _CountedAcks:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, frame: bytes, header: headers.RequestHeader) -> int:
        self.calls += 1
        return produce.produce_acks_in_python(frame, header)


def test_a_null_transactional_ids_acks_are_read_by_the_compiled_and_every_other_by_the_python() -> None:
    acks, bind = compiled.produce_acks, compiled.bind_produce_acks
    assert acks is not None and bind is not None
    reference = _CountedAcks()
    bind(produce.FIRST_TRANSACTIONAL, 9, reference)
    try:
        frames = {}
        for version in (2, 3, 8, 9, 12):
            request = ProduceRequest(version=version, acks=-1, timeout_ms=100, topic_data=[])
            if version >= 3:
                request.transactional_id = None  # what every producer but a transactional one sends
            body = bytes(request.encode(version=version))
            frames[version] = headers.encode_request(ApiKey.PRODUCE, version, 1, "c", body)
        for version in (3, 8, 9, 12):
            frame = frames[version]
            assert acks(memoryview(frame), headers.parse_request_header(frame)) == -1
        assert reference.calls == 0
        frame = frames[2]  # acks first: the Python's
        assert acks(frame, headers.parse_request_header(frame)) == -1
        frame = frames[12]
        header = headers.parse_request_header(frame)
        with pytest.raises(ProtocolError):
            acks(frame[: 4 + header.size + 2], header)  # cut before all of acks: the Python's refusal
        assert reference.calls == 2
    finally:
        bind(produce.FIRST_TRANSACTIONAL, 9, produce.produce_acks_in_python)


# ---- a response header's size: the common case compiled, every other case the Python's -------------------


@settings(max_examples=1500, deadline=None)
@given(
    key=st.integers(-2, 90) | st.sampled_from([0, 1, 3, 18, 2**40]),
    version=st.integers(-1, 20) | st.sampled_from([2**63, -(2**63) - 1]),
    tail=st.sampled_from([b"", b"\x00", b"\x01\x05\x00", b"\x01", b"\x02\x01\x00"]),
    data=st.data(),
)
def test_the_compiled_response_header_size_is_the_pythons(
    key: int, version: int, tail: bytes, data: st.DataObject
) -> None:
    size = compiled.response_header_size
    assert size is not None
    frame = data.draw(st.binary(max_size=8)) + tail  # a tagged block, empty or not, after 8 bytes or fewer

    def outcome(sized: Callable[..., object], held: object) -> object:
        try:
            return "sized", sized(key, version, held)
        except Exception as exc:  # a view of chars fails the Python's read: the same failure wanted
            return "refused", type(exc), str(exc)

    for held in (frame, bytearray(frame), memoryview(b"ab" + frame)[2:], memoryview(frame).cast("c")):
        assert outcome(size, held) == outcome(headers.response_header_size_in_python, held)


def test_a_header_without_tagged_fields_is_sized_by_the_compiled_and_every_other_by_the_python() -> None:
    size, bind = compiled.response_header_size, compiled.bind_response_headers
    assert size is not None and bind is not None
    calls: list[tuple[object, ...]] = []

    def reference(*args: object) -> int:
        calls.append(args)
        return headers.response_header_size_in_python(*args)  # type: ignore[arg-type]

    bind(int(ApiKey.API_VERSIONS), reference)
    try:
        answer = memoryview(b"\x00\x00\x00\x09" + b"\x00\x00\x00\x07" + b"\x00" + b"body")
        assert size(int(ApiKey.FETCH), 16, answer) == 5  # flexible, no tagged fields
        assert size(int(ApiKey.FETCH), 11, answer) == 4  # not flexible
        assert size(int(ApiKey.API_VERSIONS), 3, answer) == 4  # header v0 in every version
        assert calls == []
        tagged = b"\x00\x00\x00\x0c" + b"\x00\x00\x00\x07" + b"\x01\x05\x01x" + b"body"
        assert size(int(ApiKey.FETCH), 16, tagged) == 8
        with pytest.raises(ProtocolError):
            size(int(ApiKey.FETCH), 16, b"\x00\x00\x00\x03abc")  # no correlation id
        assert size(ApiKey.FETCH, 16, answer) == 5  # not an exact int
        assert len(calls) == 3
    finally:
        bind(int(ApiKey.API_VERSIONS), headers.response_header_size_in_python)


# ---- a Produce request's topics: the common case compiled, every other case the Python's ------------------


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=_produce_requests(),
    kept=st.sampled_from(["none", "another", "this", "this, another size"]),
    data=st.data(),
)
def test_the_compiled_produce_topics_is_the_pythons(
    case: tuple[int, bytes], kept: str, data: st.DataObject
) -> None:
    version, body = case
    body = data.draw(_spoiled(body))
    frame = headers.encode_request(ApiKey.PRODUCE, version, 7, "c", body)
    header = headers.parse_request_header(frame)
    topics = compiled.produce_topics
    assert topics is not None
    # The walk another filter of a request keeps (produce_body), of none, another or this request
    walk = produce_stream.ProduceBody(1, 1, [("kept", 5)], [[(0, 5)]])
    last = {
        "none": None,
        "another": (headers.parse_request_header(frame), len(frame), walk),
        "this": (header, len(frame), walk),
        "this, another size": (header, len(frame) + 1, walk),
    }[kept]
    asked = data.draw(st.sampled_from([header, header._replace(api_version=data.draw(st.integers(-1, 14)))]))
    for held in (frame, bytearray(frame), memoryview(b"ab" + frame)[2:]):
        produce_stream._last = last
        assert _outcome(topics, held, asked) == _outcome(produce_stream.produce_topics_in_python, held, asked)
    produce_stream._last = None


def test_a_request_no_filter_walked_has_its_topics_walked_by_the_compiled_and_every_other_by_the_python() -> (
    None
):
    topics, bind = compiled.produce_topics, compiled.bind_produce_topics
    assert topics is not None and bind is not None
    calls: list[object] = []

    def reference(frame: bytes, header: headers.RequestHeader) -> object:
        calls.append(header)
        return produce_stream.produce_topics_in_python(frame, header)

    bind(vars(produce_stream), produce_stream.PRODUCE_MAX, reference)
    try:
        frame = headers.encode_request(ApiKey.PRODUCE, 9, 1, "c", _small_produce_request(9))
        header, other = headers.parse_request_header(frame), headers.parse_request_header(frame)
        produce_stream._last = None
        assert topics(frame, header) == [("t", 2)]
        produce_stream.produce_body(frame, other)  # another request's walk kept
        assert topics(frame, header) == [("t", 2)]
        assert calls == []
        produce_stream.produce_body(frame, header)  # this request's walk kept: the Python takes it
        assert topics(frame, header) == [("t", 2)]
        with pytest.raises(ProtocolError):
            topics(frame, header._replace(api_version=produce_stream.PRODUCE_MAX + 1))  # refused there
        assert topics(frame=frame, header=other) == [("t", 2)]  # keywords
        assert calls == [header, header._replace(api_version=produce_stream.PRODUCE_MAX + 1), other]
    finally:
        bind(vars(produce_stream), produce_stream.PRODUCE_MAX, produce_stream.produce_topics_in_python)
        produce_stream._last = None


def test_a_header_too_short_to_be_the_parses_is_read_by_the_python() -> None:
    # tuple.__new__ makes a RequestHeader of any length; the compiled twins read items 1 and 4 only of
    # one of five (the parse's), and hand any other to the Python, which fails on it as it does.
    short = tuple.__new__(headers.RequestHeader, (0, 9))
    frame = headers.encode_request(ApiKey.PRODUCE, 9, 1, "c", _small_produce_request(9))
    for twin, python in (
        (compiled.produce_acks, produce.produce_acks_in_python),
        (compiled.produce_topics, produce_stream.produce_topics_in_python),
    ):
        assert twin is not None
        with pytest.raises(IndexError) as compiled_error:
            twin(frame, short)
        with pytest.raises(IndexError) as python_error:
            python(frame, short)
        assert str(compiled_error.value) == str(python_error.value)


def test_a_view_the_compiled_twins_hand_to_the_python_is_released_by_them() -> None:
    # A view of chars or of signed bytes is read by the Python: the twins open it only to look, and let it
    # go (its release fails with BufferError while a buffer of it is held).
    answer = b"\x00" * 9 + _small_produce_answer(10)
    request = headers.encode_request(ApiKey.PRODUCE, 9, 1, "c", _small_produce_request(9))
    header = headers.parse_request_header(request)
    rewrite, acks, header_size = (
        compiled.rewrite_node_endpoints,
        compiled.produce_acks,
        compiled.response_header_size,
    )
    assert rewrite is not None and acks is not None and header_size is not None
    calls: list[tuple[bytes, Callable[[memoryview], object]]] = [
        (answer, lambda view: rewrite(0, 10, view, _advertise, 9, True)),
        (request, lambda view: acks(view, header)),
        (answer, lambda view: header_size(0, 10, view)),
    ]
    for cast in ("c", "b"):
        for data, call in calls:
            view = memoryview(data).cast(cast)
            with contextlib.suppress(TypeError, ProtocolError):  # the Python's read of chars may fail
                call(view)
            response_walks._last = (None, -1, -1, -1)  # (a walk remembered holds the view it walked)
            view.release()


# ---- the frames of a read ----------------------------------------------------------------------------------


@st.composite
def _reads(draw: st.DrawFn) -> bytes:
    """A read of a stream: whole frames of small lengths, then maybe a frame with a length field out of
    range (negative, too short, too long) or cut, or a few bytes of the next length field."""
    frames = [
        payload_size.to_bytes(4, "big", signed=True) + bytes(payload_size)
        for payload_size in draw(st.lists(st.integers(0, 40), max_size=6))
    ]
    tail = draw(
        st.sampled_from([b"", b"\x00", b"\x00\x00\x01", b"\xff\xff\xff\xff", b"\x00\x00\x00\x02ab"])
        | st.binary(max_size=12)
    )
    return b"".join(frames) + tail


@settings(max_examples=1500, deadline=None)
@given(
    read=_reads(),
    prefix=st.binary(max_size=6),
    min_payload=st.sampled_from([0, 4, 8, -5]),
    max_frame=st.sampled_from([0, 4, 30, 2**31 - 1, 2**40]),
    readonly=st.booleans(),
)
def test_the_compiled_split_of_a_read_is_the_pythons(
    read: bytes, prefix: bytes, min_payload: int, max_frame: int, readonly: bool
) -> None:
    whole = compiled.whole_frames
    assert whole is not None
    data = prefix + read
    outcomes = []
    for split in (whole, frames_module.whole_frames_in_python):
        view = memoryview(data if readonly else bytearray(data))
        found: list[memoryview] = []
        answer = split(view, len(prefix), min_payload, max_frame, found)
        # each frame a view of the read's own buffer, whole
        assert all(frame.obj is view.obj for frame in found)
        outcomes.append((answer, [bytes(frame) for frame in found]))
    assert outcomes[0] == outcomes[1]


def test_the_compiled_buffer_in_use_is_the_pythons() -> None:
    """A lent read buffer is in use exactly while a view of it lives, however the view was made (a slice of
    a view, a read-only one, a view of a view) and whatever else holds it; a bytearray subclass alike; and
    the splitter's module hands out the compiled one."""
    in_use = compiled.buffer_in_use
    assert in_use is not None and frame_memory.buffer_in_use is in_use

    class Buffer(bytearray):
        pass

    for buffer in (bytearray(64), Buffer(64), bytearray()):
        size = len(buffer)
        held: list[memoryview] = []
        answers = []
        makes: tuple[Callable[[bytearray], memoryview], ...] = (
            memoryview,
            lambda b: memoryview(b).toreadonly()[:3],
            lambda b: memoryview(memoryview(b)[1:]),
        )
        for make in makes:
            answers.append((in_use(buffer), frame_memory.buffer_in_use_in_python(buffer)))
            view = make(buffer)
            answers.append((in_use(buffer), frame_memory.buffer_in_use_in_python(buffer)))
            held.append(view)
            answers.append((in_use(buffer), frame_memory.buffer_in_use_in_python(buffer)))
            held.clear()
            del view
        assert answers == [(False, False), (True, True), (True, True)] * 3
        assert len(buffer) == size  # the Python's trial append was taken back
    with pytest.raises(TypeError):
        in_use(b"bytes")  # type: ignore[arg-type]


def test_the_split_of_a_read_hands_the_python_what_it_reads_otherwise() -> None:
    whole = compiled.whole_frames
    assert whole is not None
    data = b"\x00\x00\x00\x04abcd" * 2

    def outcome(split: Callable[..., object], view: memoryview) -> object:
        found: list[memoryview] = []
        try:
            answer: object = split(view, 0, 4, 100, found)
        except Exception as exc:  # a strided view fails the Python's read: the same failure wanted
            answer = (type(exc), str(exc))
        return answer, [bytes(frame) for frame in found]

    for odd in (memoryview(data).cast("c"), memoryview(data)[::2]):  # chars, a strided view
        assert outcome(whole, odd) == outcome(frames_module.whole_frames_in_python, odd)
    with pytest.raises(TypeError):  # what the Python raises for a start that is not an int
        whole(memoryview(data), 0.5, 4, 100, [])
    # a negative start (feed never passes one) is the Python's: it reads from the end, the C never before
    # the buffer's start
    found_c, found_python = [], []
    assert whole(memoryview(data), -4, 0, 100, found_c) == frames_module.whole_frames_in_python(
        memoryview(data), -4, 0, 100, found_python
    )
    assert [bytes(f) for f in found_c] == [bytes(f) for f in found_python]
    view = memoryview(data)

    def split(times: int) -> None:
        for _ in range(times):
            found: list[memoryview] = []
            whole(view, 0, 4, 100, found)
            whole(view, 0, 4, 2, found)  # the first frame too long: its length handed back
            del found

    split(1000)  # free lists warmed up
    kept, blocks = sys.getrefcount(view), sys.getallocatedblocks()
    split(10_000)
    assert (sys.getrefcount(view), sys.getallocatedblocks() - blocks < 50) == (kept, True)
    view.release()  # no buffer of it held


def test_the_compiled_walked_fetch_topics_answers_and_resets_as_the_python_one() -> None:
    # Every kept walk against every call: the same answer, and the kept walk let go after either; a kept
    # value that is not a 4-tuple (never so in the proxy) goes to the Python, which refuses to unpack it.
    compiled_walked = compiled.walked_fetch_topics
    assert compiled_walked is not None
    body, other = b"\x00" * 20, bytearray(20)
    found = [(b"\x01" * 16, 3)]
    kept_walks = [(body, 9, 16, found), (other, 9, 16, found), (body, 10, 16, found), (body, 9, 17, found)]
    calls = [(16, body, 9), (16, other, 9), (17, body, 9), (16, body, 10)]
    twins = (compiled_walked, response_walks.walked_fetch_topics_in_python)
    saved = response_walks._last_fetch
    try:
        for kept in [*kept_walks, response_walks._NO_FETCH_WALK]:
            for call in calls:
                answers = []
                for twin in twins:
                    response_walks._last_fetch = kept
                    answers.append((twin(*call), response_walks._last_fetch))
                assert answers[0] == answers[1]
                assert answers[0][1] is response_walks._NO_FETCH_WALK
                assert (answers[0][0] is found) == (kept[0] is call[1] and kept[1:3] == (call[2], call[0]))
        for twin in twins:
            response_walks._last_fetch = (body, 9, 16)  # type: ignore[assignment]
            with pytest.raises(ValueError, match="not enough values to unpack"):
                twin(16, body, 9)
            with pytest.raises(TypeError):
                twin(16, body)  # type: ignore[call-arg]
    finally:
        response_walks._last_fetch = saved
