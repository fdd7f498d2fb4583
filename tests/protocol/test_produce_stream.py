"""protocol/produce_stream.py: the one Produce walk fed in pieces gives what it gives fed the whole body at
once (acks, timeout, every topic's and partition's record bytes), for every version, wherever the pieces
are cut."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.producer import ProduceRequest

from sluice.protocol import produce_stream
from sluice.protocol.errors import ProtocolError
from sluice.protocol.headers import encode_request_header, frame, parse_request_header
from sluice.protocol.primitives import INT32_PACK, encode_uvarint
from sluice.protocol.produce_stream import ProduceTopicStream, produce_topic_bytes, walk_produce_body

Topic = ProduceRequest.TopicProduceData
Partition = Topic.PartitionProduceData


def produce_frame(version: int, transactional_id: str | None = "tx-ünï") -> bytes:
    parts = {"orders": [b"a" * 300, None, b"b" * 70], "ünïcode": [b"c" * 5], "": [b""]}
    topics = [
        Topic(
            **({"topic_id": uuid.UUID(int=i + 1)} if version >= 13 else {"name": name}),
            partition_data=[Partition(index=p, records=r) for p, r in enumerate(records)],
        )
        for i, (name, records) in enumerate(parts.items())
    ]
    request = ProduceRequest(version=version, acks=-1, timeout_ms=30000, topic_data=topics)
    if version >= 3:
        request.transactional_id = transactional_id
    body = bytes(request.encode(version=version))
    return frame(encode_request_header(0, version, 7, "producer-1") + body)


def fed(framed: bytes, cuts: list[int]) -> ProduceTopicStream:
    header = parse_request_header(framed)
    stream = ProduceTopicStream(header.api_version, header.size, len(framed))
    start = 0
    for cut in [*sorted(cuts), len(framed)]:
        stream.feed(memoryview(framed)[start:cut])
        start = cut
    return stream


def streamed(framed: bytes, cuts: list[int]) -> list | None:
    return fed(framed, cuts).result()


def whole(framed: bytes) -> list:
    header = parse_request_header(framed)
    return produce_topic_bytes(header.api_version, framed[4 + header.size :])


@pytest.mark.parametrize("version", range(14))
def test_every_version_cut_at_every_single_point(version: int) -> None:
    framed = produce_frame(version)
    expected = whole(framed)
    assert expected and sum(size for _, size in expected) == 375
    for cut in range(len(framed) + 1):
        assert streamed(framed, [cut]) == expected, cut


@settings(max_examples=200, deadline=None)
@given(version=st.integers(0, 13), data=st.data())
def test_any_cuts_give_the_same_breakdown(version: int, data: st.DataObject) -> None:
    framed = produce_frame(version, data.draw(st.one_of(st.none(), st.text(max_size=40))))
    cuts = data.draw(st.lists(st.integers(0, len(framed)), max_size=30))
    assert streamed(framed, cuts) == whole(framed)


_LAYOUTS = st.lists(st.lists(st.one_of(st.none(), st.integers(0, 3000)), max_size=6), min_size=0, max_size=5)


@settings(max_examples=300, deadline=None)
@given(
    version=st.integers(0, 13),
    layout=_LAYOUTS,
    acks=st.sampled_from([-1, 0, 1]),
    timeout_ms=st.integers(0, 2**31 - 1),
    data=st.data(),
)
def test_pieces_of_any_split_walk_as_the_whole_body(
    version: int, layout: list[list[int | None]], acks: int, timeout_ms: int, data: st.DataObject
) -> None:
    """Any request, cut anywhere: the walk fed the pieces ends with the very result of the walk over the
    whole body (acks, timeout_ms, each topic's record bytes, each partition's index and record bytes)."""
    topics = [
        Topic(
            **({"topic_id": uuid.UUID(int=i + 1)} if version >= 13 else {"name": f"t{i}" * (i + 1)}),
            partition_data=[
                Partition(index=p * 7, records=None if n is None else b"r" * n) for p, n in enumerate(sizes)
            ],
        )
        for i, sizes in enumerate(layout)
    ]
    request = ProduceRequest(version=version, acks=acks, timeout_ms=timeout_ms, topic_data=topics)
    if version >= 3:
        request.transactional_id = data.draw(st.one_of(st.none(), st.text(max_size=300)))
    framed = frame(encode_request_header(0, version, 7, "p") + bytes(request.encode(version=version)))
    header = parse_request_header(framed)
    whole_body = walk_produce_body(version, memoryview(framed)[4 + header.size :])
    assert (whole_body.acks, whole_body.timeout_ms) == (acks, timeout_ms)
    cuts = data.draw(st.lists(st.integers(0, len(framed)), max_size=40))
    assert fed(framed, cuts).walked() == whole_body


@pytest.mark.parametrize("version", [0, 3, 9, 13])
def test_a_request_cut_short_or_overlong_gives_no_breakdown(version: int) -> None:
    framed = produce_frame(version)
    header = parse_request_header(framed)
    short = ProduceTopicStream(header.api_version, header.size, len(framed))
    short.feed(framed[:-1])
    assert short.result() is None
    overlong = ProduceTopicStream(header.api_version, header.size, len(framed) + 3)
    overlong.feed(framed + b"\x00\x00\x00")
    assert overlong.result() is None


@settings(max_examples=300, deadline=None)
@given(version=st.integers(0, 13), junk=st.binary(max_size=300), data=st.data())
def test_garbage_never_raises(version: int, junk: bytes, data: st.DataObject) -> None:
    framed = frame(encode_request_header(0, version, 1, "c") + junk)
    cuts = data.draw(st.lists(st.integers(0, len(framed)), max_size=5))
    result = streamed(framed, cuts)
    if result is not None:  # junk that happens to be a well-formed request reads as the whole walk reads it
        assert result == whole(framed)


def test_the_filters_of_one_request_share_one_walk_of_its_body(monkeypatch: pytest.MonkeyPatch) -> None:
    """Topic quotas, the broker shield, the entity gate and the usage records each read a part of the same
    Produce: its body is walked once for them all, and again only for another request (a new header)."""
    from sluice.protocol.produce_topics import (
        produce_partition_sizes,
        produce_partitions,
        produce_topic_sizes,
    )

    walks: list[int] = []
    walk = produce_stream.walk_produce_body

    def counted(api_version: int, body: bytes | memoryview, start: int = 0) -> produce_stream.ProduceBody:
        walks.append(api_version)
        return walk(api_version, body, start)

    framed = produce_frame(9)
    expected = whole(framed)
    monkeypatch.setattr(produce_stream, "walk_produce_body", counted)
    header = parse_request_header(framed)
    sizes = produce_topic_sizes(framed, header)
    assert produce_partition_sizes(framed, header) == [
        ("orders", 300),
        ("orders", 0),
        ("orders", 70),
        ("ünïcode", 5),
        ("", 0),
    ]
    assert [index for _, indexes in produce_partitions(framed, header) for index in indexes] == [
        0,
        1,
        2,
        0,
        0,
    ]
    assert produce_stream.produce_body(framed, header).topics == expected
    assert produce_stream.produce_topics(framed, header) == expected  # the usage records' question
    assert sizes == {"orders": 370, "ünïcode": 5, "": 0}
    assert walks == [9]
    # The next request, even byte for byte the same, is walked for itself.
    produce_topic_sizes(framed, parse_request_header(framed))
    assert walks == [9, 9]
    # Asked only for its topics (no topic quota walked it first), a request's walk keeps no partition.
    topics_alone: list[int] = []
    topics_whole = produce_stream._topics_whole

    def counted_topics(api_version: int, body: bytes | memoryview, start: int = 0) -> list[tuple[str, int]]:
        topics_alone.append(api_version)
        return topics_whole(api_version, body, start)  # type: ignore[return-value]  # names, not ids (v9)

    monkeypatch.setattr(produce_stream, "_topics_whole", counted_topics)
    for asked in (produce_stream.produce_topics, produce_stream.produce_topics_in_python):
        assert asked(framed, parse_request_header(framed)) == expected
    # neither walked the whole body; the Python walked the topics alone (the compiled one does, in C)
    assert (walks, topics_alone) == ([9, 9], [9])


def _tagged(*fields: tuple[int, bytes]) -> bytes:
    """A tagged-field block, from protocol/'s own varint encoder (kafka-python writes none in Produce)."""
    return encode_uvarint(len(fields)) + b"".join(
        encode_uvarint(tag) + encode_uvarint(len(value)) + value for tag, value in fields
    )


def test_tagged_fields_anywhere_are_passed_over_cut_at_every_point() -> None:
    """Flexible versions may carry tagged fields after each partition, each topic and the body (Kafka
    defines none for Produce yet; a newer client may send some): the walk passes over them, whole or cut
    at any byte, as over an empty block."""
    body = (
        encode_uvarint(0)  # null transactional_id
        + struct.pack(">h", 1)  # acks
        + INT32_PACK(1500)
        + encode_uvarint(2 + 1)  # two topics
        + encode_uvarint(len(b"orders") + 1)
        + b"orders"
        + encode_uvarint(2 + 1)  # two partitions
        + INT32_PACK(4)
        + encode_uvarint(300 + 1)
        + b"r" * 300
        + _tagged((5, b"abc"), (6, b""))
        + INT32_PACK(9)
        + encode_uvarint(0)  # null records
        + _tagged((0, b"z" * 200))
        + _tagged((7, b"zz"))
        + encode_uvarint(len(b"audit") + 1)
        + b"audit"
        + encode_uvarint(1 + 1)
        + INT32_PACK(0)
        + encode_uvarint(20 + 1)
        + b"a" * 20
        + _tagged()
        + _tagged()
        + _tagged((9, b"q" * 130))
    )
    expected = (1, 1500, [("orders", 300), ("audit", 20)], [[(4, 300), (9, 0)], [(0, 20)]])
    assert walk_produce_body(9, body) == expected
    framed = frame(encode_request_header(0, 9, 7, "p") + body)
    for cut in range(len(framed) + 1):
        assert fed(framed, [cut]).walked() == expected, cut
    assert fed(framed, list(range(len(framed)))).walked() == expected  # a byte at a time


def test_a_cut_in_a_partitions_tags_resumes_past_its_record_set() -> None:
    """A piece that ends inside the tags after a partition's record set: the walk resumes at the tags, so
    the record set is neither kept nor walked again (before, the walk went back to the partition's start,
    kept its record set and, past 64 KiB of it, gave up the request's breakdown)."""
    records = b"r" * 100_000
    body = (
        encode_uvarint(0)  # null transactional_id
        + struct.pack(">h", 1)
        + INT32_PACK(1500)
        + encode_uvarint(1 + 1)
        + encode_uvarint(len(b"orders") + 1)
        + b"orders"
        + encode_uvarint(1 + 1)
        + INT32_PACK(0)
        + encode_uvarint(len(records) + 1)
        + records
        + _tagged((5, b"abc"))
        + _tagged()
        + _tagged()
    )
    framed = frame(encode_request_header(0, 9, 7, "p") + body)
    tags_at = framed.index(records) + len(records)
    for cut in range(tags_at - 1, tags_at + 7):
        stream = fed(framed, [cut])
        assert stream.result() == [("orders", 100_000)], cut
    header = parse_request_header(framed)
    stream = ProduceTopicStream(9, header.size, len(framed))
    stream.feed(memoryview(framed)[: tags_at + 2])
    assert len(stream._kept) < 16  # the tags' first bytes, not the record set
    stream.feed(memoryview(framed)[tags_at + 2 :])
    assert stream.result() == [("orders", 100_000)]


def test_a_field_longer_than_the_walk_keeps_costs_the_breakdown_not_memory() -> None:
    """A streamed walk keeps only the bytes of a field a piece cuts. A topic name longer than 64 KiB (Kafka
    refuses names over 249 characters) cut by a piece is not gathered: that request gets no breakdown, and
    the walk never holds more than 64 KiB of it. The whole-body walk, which keeps nothing, still reads it."""
    name = "n" * 70_000
    request = ProduceRequest(
        version=9,
        acks=1,
        timeout_ms=5,
        topic_data=[Topic(name=name, partition_data=[Partition(index=0, records=b"r" * 10)])],
    )
    request.transactional_id = None
    framed = frame(encode_request_header(0, 9, 7, "p") + bytes(request.encode(version=9)))
    assert whole(framed) == [(name, 10)]
    assert streamed(framed, []) == [(name, 10)]  # one piece: nothing cut, nothing kept
    header = parse_request_header(framed)
    stream = ProduceTopicStream(9, header.size, len(framed))
    for start in range(0, len(framed), 4096):
        stream.feed(memoryview(framed)[start : start + 4096])
        assert len(stream._kept) <= 1 << 16
    assert stream.result() is None


def _many_empty_topics(count: int) -> bytes:
    """A Produce v3 body naming `count` topics "t", each with no partition (7 bytes a topic)."""
    head = struct.pack(">hhii", -1, 1, 1500, count)  # null transactional_id, acks, timeout, topics
    return head + (struct.pack(">h", 1) + b"t" + struct.pack(">i", 0)) * count


def test_a_request_naming_more_topics_and_partitions_than_any_broker_leads_is_refused() -> None:
    """The walk keeps a tuple or a list per entry, 10 to 40 times its bytes on the wire: past MAX_ENTRIES
    a request is malformed, whole or streamed, instead of a few megabytes taking gigabytes."""
    at_the_limit = walk_produce_body(3, _many_empty_topics(produce_stream.MAX_ENTRIES))
    assert len(at_the_limit.topics) == produce_stream.MAX_ENTRIES
    over = _many_empty_topics(produce_stream.MAX_ENTRIES + 1)
    with pytest.raises(ProtocolError, match="topics and partitions"):
        walk_produce_body(3, over)
    framed = frame(encode_request_header(0, 3, 7, "p") + over)
    assert streamed(framed, list(range(0, len(framed), 65_536))) is None
