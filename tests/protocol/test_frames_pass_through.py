"""FrameSplitter.pass_through: a large frame taken over at its start comes out as its pieces, in order,
and the bytes out are the bytes in, wherever the stream is cut."""

from __future__ import annotations

import itertools
from typing import Protocol

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.protocol.errors import ProtocolError
from sluice.protocol.frame_memory import buffer_in_use
from sluice.protocol.frames import FrameSplitter
from sluice.protocol.headers import frame

pytestmark = pytest.mark.usefixtures("frame_assembly")  # each test twice: heap pieces, own mappings

BIG = 40  # frames of at least this many bytes (prefix included) are passed through by the consumer below
HEAD = 12  # ... once this many of their bytes are in


class PassingConsumer:
    """What a proxy does with the splitter: writes pieces and frames in stream order, and takes over every
    incomplete frame of at least BIG bytes as soon as its start is offered."""

    def __init__(self, take_over: bool = True) -> None:
        self.splitter = FrameSplitter()
        self.take_over = take_over
        self.out: list[bytes] = []  # what would be written upstream, in order
        self.frames: list[bytes] = []  # the frames handed over whole
        self.passed: list[int] = []  # sizes of the frames passed through

    def feed(self, chunk: bytes) -> None:
        frames = self.splitter.feed(chunk)
        self.out += [bytes(piece) for piece in self.splitter.through]
        for view in frames:
            self.out.append(bytes(view))
            self.frames.append(bytes(view))
        offered = self.splitter.incomplete_head(BIG, HEAD)
        if offered is not None and self.take_over:
            head, size = offered
            assert bytes(head[:4]) == (size - 4).to_bytes(4, "big") and len(head) >= HEAD
            self.passed.append(size)
            self.out += [bytes(piece) for piece in self.splitter.pass_through()]


def _stream() -> tuple[bytes, list[bytes], list[bytes]]:
    small_a, big, small_c, big_2 = frame(b"a" * 6), frame(bytes(range(60))), frame(b"c" * 5), frame(b"z" * 45)
    framed = [small_a, big, small_c, big_2]
    return b"".join(framed), [small_a, small_c], [big, big_2]


class Reader(Protocol):
    def feed(self, chunk: bytes) -> None: ...


def _feed(reader: Reader, data: bytes, cuts: list[int]) -> None:
    """`data` fed in chunks cut at `cuts` (those past its end are ignored)."""
    start = 0
    for cut in [*sorted(c for c in cuts if c <= len(data)), len(data)]:
        reader.feed(data[start:cut])
        start = cut


# Any frames, cut anywhere, large ones taken over or declined.
any_frames_any_cuts = given(
    payloads=st.lists(st.binary(min_size=4, max_size=120), min_size=1, max_size=10),
    cuts=st.lists(st.integers(min_value=0, max_value=1300), max_size=30),
    take_over=st.booleans(),
)


def test_every_single_cut_and_every_pair_of_cuts_passes_the_bytes_through_unchanged() -> None:
    data, small, _ = _stream()
    positions = range(len(data) + 1)
    for cuts in itertools.chain(([i] for i in positions), itertools.combinations(positions, 2)):
        consumer = PassingConsumer()
        _feed(consumer, data, list(cuts))
        assert b"".join(consumer.out) == data, cuts
        # Small frames always come whole; a big one comes whole only when one chunk held all of it.
        assert [f for f in consumer.frames if len(f) < BIG] == small, cuts
        assert len(consumer.frames) + len(consumer.passed) == 4, cuts
        assert not consumer.splitter.passing_through
        consumer.splitter.eof()


def test_byte_by_byte_every_big_frame_is_passed_through() -> None:
    data, small, big = _stream()
    consumer = PassingConsumer()
    _feed(consumer, data, list(range(1, len(data))))
    assert b"".join(consumer.out) == data
    assert consumer.frames == small
    assert consumer.passed == [len(f) for f in big]


def test_a_consumer_that_declines_gets_every_frame_whole() -> None:
    data, small, big = _stream()
    consumer = PassingConsumer(take_over=False)
    _feed(consumer, data, list(range(3, len(data), 7)))
    assert consumer.frames == [small[0], big[0], small[1], big[1]]
    assert consumer.passed == []


def test_the_head_is_offered_once_enough_of_a_large_enough_frame_is_in(frame_assembly: str) -> None:
    big = frame(bytes(range(100)))
    splitter = FrameSplitter()
    splitter.feed(big[:7])
    assert splitter.incomplete_head(BIG, HEAD) is None  # 7 of the 12 head bytes
    splitter.feed(big[7:9])
    assert splitter.incomplete_head(BIG, HEAD) is None
    splitter.feed(big[9:30])
    assert splitter.incomplete_head(200, HEAD) is None  # the frame is smaller than asked for
    head, size = splitter.incomplete_head(BIG, HEAD)  # type: ignore[misc]
    if frame_assembly == "heap pieces":
        assert (bytes(head), size) == (big[:HEAD], 104)  # the head joined from the small pieces, nothing more
    else:
        assert (bytes(head), size) == (big[:30], 104)  # all that is in, contiguous in the frame's mapping
    assert b"".join(bytes(p) for p in splitter.pass_through()) == big[:30]
    assert splitter.passing_through and splitter.buffered_bytes == 0
    assert splitter.feed(big[30:50]) == []
    assert [bytes(p) for p in splitter.through] == [big[30:50]]
    nxt = frame(b"next")
    frames = splitter.feed(big[50:] + nxt)
    assert [bytes(p) for p in splitter.through] == [big[50:]]
    assert [bytes(f) for f in frames] == [nxt]
    assert not splitter.passing_through
    assert splitter.feed(frame(b"more")) and splitter.through == []


def test_a_head_inside_the_first_read_is_a_view_of_it_without_a_copy() -> None:
    big = frame(bytes(100))
    chunk = frame(b"abcd") + big[:60]
    splitter = FrameSplitter()
    assert [bytes(f) for f in splitter.feed(chunk)] == [frame(b"abcd")]
    head, size = splitter.incomplete_head(BIG, HEAD)  # type: ignore[misc]
    assert head.obj is chunk and size == 104


def test_end_of_stream_inside_a_passed_frame_is_a_truncated_frame() -> None:
    big = frame(bytes(100))
    splitter = FrameSplitter()
    splitter.feed(big[:50])
    splitter.pass_through()
    with pytest.raises(ProtocolError) as caught:
        splitter.eof()
    assert caught.value.reason == "truncated_frame"


def test_pass_through_without_an_offered_frame_is_refused() -> None:
    with pytest.raises(ValueError):
        FrameSplitter().pass_through()


@settings(max_examples=300, deadline=None)
@given(
    payloads=st.lists(st.binary(min_size=4, max_size=120), min_size=1, max_size=10),
    cuts=st.lists(st.integers(min_value=0, max_value=1300), max_size=30),
)
def test_any_chunking_any_frames_bytes_out_equal_bytes_in(payloads: list[bytes], cuts: list[int]) -> None:
    framed = [frame(p) for p in payloads]
    data = b"".join(framed)
    consumer = PassingConsumer()
    _feed(consumer, data, cuts)
    assert b"".join(consumer.out) == data
    assert [f for f in consumer.frames if len(f) < BIG] == [f for f in framed if len(f) < BIG]
    consumer.splitter.eof()


class ReusedBuffer:
    """A connection reading into one buffer: each chunk is fed as a read-only view of it, and the buffer
    is overwritten with junk as soon as the consumer is done with what the feed returned."""

    def __init__(self, consumer: PassingConsumer) -> None:
        self.consumer = consumer
        self.buffer = bytearray(2048)

    def feed(self, chunk: bytes) -> None:
        self.buffer[: len(chunk)] = chunk
        view = memoryview(self.buffer).toreadonly()[: len(chunk)]
        self.consumer.feed(view)  # type: ignore[arg-type]
        self.buffer[:] = b"\xee" * len(self.buffer)


@settings(max_examples=300, deadline=None)
@any_frames_any_cuts
def test_a_reused_read_buffer_never_corrupts_what_the_splitter_keeps(
    payloads: list[bytes], cuts: list[int], take_over: bool
) -> None:
    framed = [frame(p) for p in payloads]
    data = b"".join(framed)
    consumer = PassingConsumer(take_over)
    _feed(ReusedBuffer(consumer), data, cuts)
    assert b"".join(consumer.out) == data
    if not take_over:
        assert consumer.frames == framed
    consumer.splitter.eof()


def test_a_frame_inside_a_read_only_view_is_a_view_of_it_without_a_copy() -> None:
    buffer = bytearray(frame(b"abcd") + frame(b"efgh"))
    view = memoryview(buffer).toreadonly()
    frames = FrameSplitter().feed(view)
    assert [bytes(f) for f in frames] == [frame(b"abcd"), frame(b"efgh")]
    assert all(f.obj is buffer for f in frames)


class ProxyLikeReader:
    """A connection reading as the proxy's does, with `defer_copies`: each chunk goes into its read buffer
    unless something still holds a view of it (a fresh buffer then), is fed as a read-only view, the
    consumer takes over large frames (or declines them), and the splitter is settled. What the consumer
    writes is kept as views, as a transport queues what it could not send yet, and joined only at the end.
    After each read, a buffer none of those views uses must be free (the splitter kept nothing of it), and
    is overwritten with junk."""

    def __init__(self, take_over: bool = True) -> None:
        self.splitter = FrameSplitter()
        self.splitter.defer_copies = True
        self.take_over = take_over
        self.buffer = bytearray(2048)
        self.out: list[memoryview] = []
        self.fresh_buffers = 0

    def _take_buffer(self) -> bytearray:
        if buffer_in_use(self.buffer):
            self.buffer = bytearray(2048)
            self.fresh_buffers += 1
        return self.buffer

    def feed(self, chunk: bytes) -> None:
        buffer = self._take_buffer()
        buffer[: len(chunk)] = chunk
        frames = self.splitter.feed(memoryview(buffer).toreadonly()[: len(chunk)])
        self.out += self.splitter.through
        self.out += frames
        offered = self.splitter.incomplete_head(BIG, HEAD)
        if offered is not None and self.take_over:
            self.out += self.splitter.pass_through()
        self.splitter.settle()
        self.splitter.through = []
        del frames, offered
        if any(view.obj is buffer for view in self.out):
            return  # still on its way: left alone
        assert not buffer_in_use(buffer)  # the splitter kept nothing of it
        buffer[:] = b"\xee" * len(buffer)


def test_deferred_copies_pass_a_large_frames_start_on_as_a_view_of_the_read_buffer() -> None:
    big = frame(bytes(range(100)))
    reader = ProxyLikeReader()
    reader.feed(frame(b"abcd") + big[:60])  # the big frame starts in this read, and is taken over
    started_in = reader.out[-1]
    assert bytes(started_in) == big[:60]
    assert started_in.obj is reader.buffer  # not a copy
    reader.feed(big[60:])
    assert reader.fresh_buffers == 1  # the first buffer was still held by what was passed on
    assert b"".join(bytes(piece) for piece in reader.out) == frame(b"abcd") + big


def test_settle_copies_what_a_read_left_pending_so_the_buffer_is_free_again() -> None:
    small = frame(b"0123456789" * 3)  # too small to be taken over: it waits whole in the splitter
    buffer = bytearray(small[:20])
    splitter = FrameSplitter()
    splitter.defer_copies = True
    assert splitter.feed(memoryview(buffer).toreadonly()) == []
    assert buffer_in_use(buffer)  # until settled, the splitter holds a view of it
    splitter.settle()
    assert not buffer_in_use(buffer)  # free: the pending bytes were copied
    buffer[:] = b"\xee" * len(buffer)
    assert [bytes(f) for f in splitter.feed(small[20:])] == [small]


def test_settle_finds_a_lent_piece_after_the_head_was_joined_from_small_reads() -> None:
    # Two one-byte reads, then one that completes the head: the head is joined from the small pieces
    # and the start of the lent one, which moves to a lower place in the splitter's list.
    big = frame(bytes(range(100)))
    reader = ProxyLikeReader(take_over=False)
    reader.feed(big[:1])
    reader.feed(big[1:2])
    reader.feed(big[2:50])  # ProxyLikeReader asserts its buffer is free after settle
    reader.feed(big[50:])
    assert [bytes(piece) for piece in reader.out] == [big]


def test_a_buffer_is_in_use_exactly_while_a_view_of_it_lives() -> None:
    buffer = bytearray(b"abcdef")
    assert not buffer_in_use(buffer)
    view = memoryview(buffer).toreadonly()[2:4]
    assert buffer_in_use(buffer)
    del view
    assert not buffer_in_use(buffer) and buffer == b"abcdef"  # the probe left it as it was


def test_without_deferred_copies_a_loaned_buffer_is_never_held_after_feed() -> None:
    big = frame(bytes(100))
    buffer = bytearray(frame(b"abcd") + big[:60])
    splitter = FrameSplitter()
    frames = splitter.feed(memoryview(buffer).toreadonly())
    assert [bytes(f) for f in frames] == [frame(b"abcd")]
    del frames
    assert not buffer_in_use(buffer)  # the big frame's start was copied at once


@settings(max_examples=300, deadline=None)
@any_frames_any_cuts
def test_deferred_copies_leave_nothing_of_a_read_buffer_pending_and_bytes_out_equal_bytes_in(
    payloads: list[bytes], cuts: list[int], take_over: bool
) -> None:
    data = b"".join(frame(p) for p in payloads)
    reader = ProxyLikeReader(take_over)
    _feed(reader, data, cuts)
    assert b"".join(bytes(piece) for piece in reader.out) == data
    reader.splitter.eof()
