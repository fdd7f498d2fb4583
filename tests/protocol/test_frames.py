"""FrameSplitter: incremental splitting, zero-copy views, and every way a length prefix can be bad."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.protocol.errors import ProtocolError
from sluice.protocol.frame_memory import stays_valid
from sluice.protocol.frames import DEFAULT_MAX_FRAME_BYTES, FrameSplitter
from sluice.protocol.headers import frame

pytestmark = pytest.mark.usefixtures("frame_assembly")  # each test twice: heap pieces, own mappings


def _frames(*payloads: bytes) -> list[bytes]:
    return [frame(p) for p in payloads]


def _feed_in_chunks(splitter: FrameSplitter, data: bytes, cuts: list[int]) -> list[bytes]:
    out: list[bytes] = []
    start = 0
    for cut in [*sorted(cuts), len(data)]:
        out.extend(bytes(view) for view in splitter.feed(data[start:cut]))
        start = cut
    return out


def test_one_chunk_holding_several_frames_yields_each_whole_frame_with_its_prefix() -> None:
    framed = _frames(b"abcd", b"0123456789", b"wxyz")
    frames = FrameSplitter().feed(b"".join(framed))
    assert [bytes(v) for v in frames] == framed


def test_frame_inside_one_chunk_is_a_view_over_that_chunk_without_copy() -> None:
    data = b"".join(_frames(b"abcd", b"efgh"))
    frames = FrameSplitter().feed(data)
    assert all(view.obj is data for view in frames)


def test_frame_spanning_chunks_is_one_object_of_exactly_the_frame(frame_assembly: str) -> None:
    whole = frame(b"x" * 1000)
    splitter = FrameSplitter()
    assert splitter.feed(whole[:2]) == []
    assert splitter.feed(whole[2:300]) == []
    assert splitter.buffered_bytes == 300
    (view,) = splitter.feed(whole[300:])
    # One join below a mebibyte; from it on (64 bytes here), a mapping of its own that stays as it is.
    assert (type(view.obj) is bytes) == (frame_assembly == "heap pieces")
    assert view.readonly and stays_valid(view)
    assert len(view.obj) == len(whole)
    assert bytes(view) == whole
    assert splitter.buffered_bytes == 0


def test_tail_of_a_chunk_that_completes_a_frame_is_parsed_in_the_same_feed() -> None:
    first, second, third = _frames(b"aaaa", b"bbbbbb", b"cccc")
    splitter = FrameSplitter()
    assert splitter.feed(first[:6]) == []
    frames = splitter.feed(first[6:] + second + third[:3])
    assert [bytes(v) for v in frames] == [first, second]
    assert splitter.buffered_bytes == 3
    assert [bytes(v) for v in splitter.feed(third[3:])] == [third]


def test_byte_by_byte_feeding_gives_the_same_frames_as_one_chunk() -> None:
    framed = _frames(b"abcd", b"0123456789" * 3, b"wxyz")
    data = b"".join(framed)
    splitter = FrameSplitter()
    got = [bytes(v) for i in range(len(data)) for v in splitter.feed(data[i : i + 1])]
    assert got == framed
    splitter.eof()


@given(
    payloads=st.lists(st.binary(min_size=4, max_size=300), min_size=1, max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=20),
)
def test_any_chunking_gives_the_same_frames(payloads: list[bytes], cuts: list[int]) -> None:
    framed = _frames(*payloads)
    data = b"".join(framed)
    splitter = FrameSplitter()
    got = _feed_in_chunks(splitter, data, [c for c in cuts if c <= len(data)])
    assert got == framed
    assert splitter.buffered_bytes == 0


def test_views_stay_valid_after_later_feeds() -> None:
    first, second = _frames(b"first-frame", b"second-frame")
    splitter = FrameSplitter()
    held = splitter.feed(first[:5])
    held += splitter.feed(first[5:] + second[:7])
    held += splitter.feed(second[7:])
    splitter.feed(frame(b"more data that must not disturb the earlier views"))
    assert [bytes(v) for v in held] == [first, second]


def test_a_mutable_buffer_is_copied_so_later_mutation_cannot_change_a_frame() -> None:
    data = bytearray(frame(b"stable"))
    (view,) = FrameSplitter().feed(data)  # type: ignore[arg-type]
    data[5:] = b"XXXXXX"
    assert bytes(view) == frame(b"stable")


@pytest.mark.parametrize("length", [-1, -2147483648])
def test_negative_length_is_rejected(length: int) -> None:
    with pytest.raises(ProtocolError) as info:
        FrameSplitter().feed(struct.pack(">i", length))
    assert info.value.reason == "negative_frame_length"


def test_two_gib_length_is_too_large_with_the_default_limit() -> None:
    with pytest.raises(ProtocolError) as info:
        FrameSplitter().feed(struct.pack(">i", 0x7FFFFFFF))
    assert info.value.reason == "frame_too_large"


def test_limit_is_inclusive() -> None:
    splitter = FrameSplitter(max_frame_bytes=8)
    assert [bytes(v) for v in splitter.feed(frame(b"12345678"))] == [frame(b"12345678")]
    with pytest.raises(ProtocolError) as info:
        splitter.feed(frame(b"123456789"))
    assert info.value.reason == "frame_too_large"


def test_default_limit_is_100_mib() -> None:
    assert DEFAULT_MAX_FRAME_BYTES == 100 * 1024 * 1024
    splitter = FrameSplitter()
    assert splitter.feed(struct.pack(">i", DEFAULT_MAX_FRAME_BYTES)) == []
    with pytest.raises(ProtocolError):
        FrameSplitter().feed(struct.pack(">i", DEFAULT_MAX_FRAME_BYTES + 1))


def test_bad_length_is_reported_as_soon_as_the_prefix_is_complete_even_across_chunks() -> None:
    splitter = FrameSplitter(max_frame_bytes=1000)
    prefix = struct.pack(">i", 1001)
    assert splitter.feed(prefix[:3]) == []
    with pytest.raises(ProtocolError) as info:
        splitter.feed(prefix[3:])
    assert info.value.reason == "frame_too_large"


def test_bad_length_after_a_good_frame_in_the_same_chunk_is_rejected() -> None:
    with pytest.raises(ProtocolError) as info:
        FrameSplitter().feed(frame(b"good") + struct.pack(">i", -5))
    assert info.value.reason == "negative_frame_length"


@pytest.mark.parametrize("length", [0, 1, 2, 3])
def test_frame_shorter_than_a_correlation_id_is_too_small(length: int) -> None:
    with pytest.raises(ProtocolError) as info:
        FrameSplitter().feed(struct.pack(">i", length) + b"\x00" * length)
    assert info.value.reason == "frame_too_small"


def test_eof_inside_a_frame_is_truncated() -> None:
    splitter = FrameSplitter()
    splitter.feed(frame(b"abcdefgh")[:9])
    with pytest.raises(ProtocolError) as info:
        splitter.eof()
    assert info.value.reason == "truncated_frame"


def test_eof_inside_a_length_prefix_is_truncated() -> None:
    splitter = FrameSplitter()
    splitter.feed(b"\x00\x00")
    with pytest.raises(ProtocolError) as info:
        splitter.eof()
    assert info.value.reason == "truncated_frame"


def test_eof_between_frames_is_clean() -> None:
    splitter = FrameSplitter()
    splitter.feed(frame(b"abcd"))
    splitter.eof()
    assert splitter.buffered_bytes == 0


def test_empty_feed_changes_nothing() -> None:
    splitter = FrameSplitter()
    assert splitter.feed(b"") == []
    splitter.feed(b"\x00")
    assert splitter.feed(b"") == []
    assert splitter.buffered_bytes == 1


@given(chunks=st.lists(st.binary(max_size=64), max_size=12), limit=st.integers(min_value=4, max_value=200))
def test_garbage_raises_nothing_but_protocol_error(chunks: list[bytes], limit: int) -> None:
    splitter = FrameSplitter(max_frame_bytes=limit)
    try:
        for chunk in chunks:
            for view in splitter.feed(chunk):
                length = struct.unpack(">i", view[:4])[0]
                assert 4 <= length <= limit
                assert len(view) == 4 + length
        splitter.eof()
    except ProtocolError:
        pass
