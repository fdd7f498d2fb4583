"""A frame of a mebibyte or more is assembled in a mapping of its own: each byte copied once as it arrives,
none of the caller's read buffer kept, and its memory given back to the operating system as soon as
nothing holds the frame (a connection closed halfway through it included)."""

from __future__ import annotations

import ctypes
import os
import weakref

from sluice.protocol.frame_memory import FrameMapping, buffer_in_use, frame_mapping, stays_valid
from sluice.protocol.frames import OWN_MAPPING_MIN_FRAME_BYTES, FrameSplitter
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


def head_owner(splitter: FrameSplitter) -> type:
    offered = splitter.incomplete_head(OWN_MAPPING_MIN_FRAME_BYTES, 4)
    assert offered is not None
    return type(offered[0].obj)


def test_no_mapping_until_the_frame_is_read_beyond_the_read_that_gave_its_size() -> None:
    # The proxy makes room for a frame (its request memory) after the read that gave its size, and reads
    # on only then: a frame announced and not yet read on takes no mapping, however large it says it is.
    size = 64 * MIB
    big = frame(bytes(size - 4))
    for cuts in ([READ - 100, 2 * READ], [2, READ, 2 * READ]):  # the size prefix in one read, or in two
        splitter = FrameSplitter(max_frame_bytes=size)
        splitter.defer_copies = True
        start = 0
        for cut in cuts[:-1]:
            read_in(splitter, bytearray(READ), big[start:cut])
            start = cut
        assert head_owner(splitter) is bytes  # the reads so far, copied out of the read buffer
        read_in(splitter, bytearray(READ), big[start : cuts[-1]])
        assert head_owner(splitter) is FrameMapping


def test_a_large_request_whose_head_spans_two_reads_is_passed_on_without_a_mapping() -> None:
    big = frame(bytes(range(256)) * (2 * MIB // 256))
    splitter = FrameSplitter()
    splitter.defer_copies = True
    buffer = bytearray(READ)
    assert read_in(splitter, buffer, frame(b"abcd") + big[:100]) == [frame(b"abcd")]  # 100 bytes of it
    buffer[:READ] = big[100 : 100 + READ]
    assert splitter.feed(memoryview(buffer).toreadonly()) == []
    offered = splitter.incomplete_head(64 * 1024, 1024)  # as the proxy's streaming asks, before settle
    assert offered is not None
    pieces = splitter.pass_through()
    assert b"".join(bytes(piece) for piece in pieces) == big[: 100 + READ]
    assert all(type(piece.obj) is not FrameMapping for piece in pieces)
    assert pieces[-1].obj is buffer  # this read's bytes passed on as they are, not copied


def test_a_frames_mapping_is_private_and_takes_no_huge_pages() -> None:
    mapping = frame_mapping(4 * MIB)
    assert mapping is not None
    pointer = ctypes.c_char.from_buffer(mapping)
    address = ctypes.addressof(pointer)
    del pointer
    with open("/proc/self/smaps") as smaps:
        lines = smaps.read().splitlines()
    at = next(i for i, line in enumerate(lines) if _maps_range_holds(line, address))
    assert lines[at].split()[1] == "rw-p"  # private: not shared memory (a shmem file per frame)
    flags = next(line for line in lines[at + 1 :] if line.startswith("VmFlags:")).split()[1:]
    if os.path.isdir("/sys/kernel/mm/transparent_hugepage"):  # a kernel with them (this machine's has)
        assert "nh" in flags  # no huge pages: the first byte of 2 MiB does not take 2 MiB


def _maps_range_holds(line: str, address: int) -> bool:
    """Whether `line` of /proc/self/smaps starts the entry ("low-high perms ...") of a range with it."""
    first = line.split(" ", 1)[0]
    low, dash, high = first.partition("-")
    if not dash or first.endswith(":"):
        return False
    try:
        return int(low, 16) <= address < int(high, 16)
    except ValueError:
        return False
