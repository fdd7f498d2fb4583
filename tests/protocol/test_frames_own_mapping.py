"""A frame of a mebibyte or more is assembled in a mapping of its own: each byte copied once as it arrives,
none of the caller's read buffer kept, and its memory given back to the operating system as soon as
nothing holds the frame (a connection closed halfway through it included)."""

from __future__ import annotations

import os
import weakref

from sluice.protocol.frames import OWN_MAPPING_MIN_FRAME_BYTES, FrameSplitter, buffer_in_use, stays_valid
from sluice.protocol.headers import frame

MIB = 1 << 20
READ = 256 * 1024  # the proxy's read buffer
_PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE


def read_in(splitter: FrameSplitter, buffer: bytearray, data: bytes) -> list[memoryview | bytes]:
    """The frames of `data` read through one reused buffer, READ bytes a read, settled after each as the
    proxy does (the buffer must be free again after every read): those views that stay valid as they
    came, the others copied."""
    out: list[memoryview | bytes] = []
    for at in range(0, len(data), READ):
        piece = data[at : at + READ]
        buffer[: len(piece)] = piece
        frames = splitter.feed(memoryview(buffer).toreadonly()[: len(piece)])
        out += [view if stays_valid(view) else bytes(view) for view in frames]
        del frames
        splitter.settle()
        assert not buffer_in_use(buffer), "the splitter kept a view of the read buffer"
        buffer[:] = b"\xee" * len(buffer)  # the next read overwrites it
    return out


def test_a_large_frame_in_many_reads_comes_whole_from_its_own_mapping() -> None:
    big = frame(os.urandom(2 * MIB))
    splitter = FrameSplitter()
    splitter.defer_copies = True
    out = read_in(splitter, bytearray(READ), frame(b"abcd") + big + frame(b"next"))
    assert [bytes(each) for each in out] == [frame(b"abcd"), big, frame(b"next")]
    view = out[1]
    assert type(view) is memoryview and view.readonly
    assert type(view.obj) is not bytes and len(view.obj) == len(big)  # not joined: a mapping of its size


def test_a_frame_just_below_the_size_is_assembled_from_its_pieces() -> None:
    small = frame(bytes(OWN_MAPPING_MIN_FRAME_BYTES - 5))  # one byte short with its prefix
    splitter = FrameSplitter()
    (view,) = [v for at in range(0, len(small), READ) for v in splitter.feed(small[at : at + READ])]
    assert type(view.obj) is bytes and bytes(view) == small


def test_a_frame_dropped_halfway_gives_its_memory_back_at_once() -> None:
    size = 64 * MIB
    splitter = FrameSplitter(max_frame_bytes=size)
    splitter.defer_copies = True
    buffer = bytearray(READ)
    half = frame(bytes(size - 4))[: size // 2]
    before = resident_bytes()
    read_in(splitter, buffer, half)
    head, _ = splitter.incomplete_head(OWN_MAPPING_MIN_FRAME_BYTES, 1)  # type: ignore[misc]
    mapping = weakref.ref(head.obj)
    del head
    # The pages the frame's bytes were written to, and no more: half of it (the rest is not touched).
    assert size // 2 - 4 * MIB <= resident_bytes() - before <= size // 2 + 8 * MIB
    splitter.clear()  # the connection closed
    assert mapping() is None  # no collection needed: nothing else held it
    assert resident_bytes() - before < 8 * MIB  # unmapped, whatever the heap holds around it
