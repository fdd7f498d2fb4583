"""protocol/_compiled.c: each compiled reader gives what its Python twin gives (the same result, or a
ProtocolError of the same reason) on valid bodies of every version with many topics and partitions, on
those bodies cut, corrupted, padded and nulled, and on random bytes, read from bytes, bytearrays and
views, at any offset in a frame. The Python twins are the reference (their own tests: test_response_walks,
test_produce_stream, test_record_sets, test_headers); what the proxy runs is the compiled one, where the
install has it.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer.fetch import FetchResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from sluice.protocol import compiled, headers, produce_stream, response_walks
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
    assert produce_stream._walk_whole is compiled.walk_produce_body
    assert produce_stream._topics_whole is compiled.produce_topic_bytes


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
