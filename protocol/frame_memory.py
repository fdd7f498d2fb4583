"""Where a frame's bytes live: a buffer the reader lends and reuses, bytes, or a mapping of the frame's own.

A frame of a mebibyte or more that the splitter assembles goes into an anonymous private mapping of its
size (`frame_mapping`), each byte copied into it once as it arrives: when the frame's last view goes, its
memory goes back to the operating system at once (munmap). Kept as the copies of its reads (256 KiB each,
from glibc's heap), a large frame's memory went back only when no object made while it arrived lay above
it in the heap: a connection closed in the middle of 184 MiB of frames left the proxy at 160-214 MB
instead of 46 on a loaded machine (docs/architecture.md); and the join at the frame's end cost a second
copy, and twice the frame's size at that moment.

The mapping is private (Python's default, shared, is backed by shmem: a kernel file per mapping, counted
as shared memory, and ~0.3 ms more per MiB to fill) and asks for no huge pages (with transparent huge
pages always on, the first byte of each 2 MiB would take 2 MiB): pages are taken as bytes arrive.
"""

from __future__ import annotations

import contextlib
import mmap
from collections.abc import Callable

from sluice.protocol import compiled

__all__ = ["FrameMapping", "buffer_in_use", "buffer_in_use_in_python", "frame_mapping", "stays_valid"]


class FrameMapping(mmap.mmap):
    """An anonymous mapping holding one frame being assembled: its own type, so that a view of it is known
    for one that stays valid (`stays_valid`), unlike a view of a buffer a reader reuses."""

    __slots__ = ()


def frame_mapping(size: int) -> FrameMapping | None:
    """A private anonymous mapping of `size` bytes (taking memory only as they are written), or None when
    the system refuses one (no address space or mappings left): the caller then keeps the frame as
    pieces, as below the mapping's size."""
    try:
        mapping = FrameMapping(-1, size, flags=mmap.MAP_PRIVATE)
    except OSError:
        return None
    if hasattr(mmap, "MADV_NOHUGEPAGE"):  # Linux; a kernel without transparent huge pages refuses it
        with contextlib.suppress(OSError):
            mapping.madvise(mmap.MADV_NOHUGEPAGE)
    return mapping


def stays_valid(view: memoryview) -> bool:
    """Whether a frame or piece the splitter returned stays as it is whatever its reader does with the
    buffer it read into: a view of bytes, or of a frame's own mapping (whose bytes, once handed out, are
    never written again), not a view of a lent buffer."""
    owner = type(view.obj)
    return owner is bytes or owner is FrameMapping


def buffer_in_use_in_python(buffer: bytearray) -> bool:
    """Whether anything still holds a view of `buffer`, a buffer lent to `FrameSplitter.feed` that its
    owner wants to read into again: it may be reused only when not. A bytearray cannot grow while it is
    exported, which is how the views are told apart from nothing. The reference of the compiled one
    (protocol/_compiled.c), which reads the export count itself and is `buffer_in_use` where the install
    has it: a connection asks before every read from its client."""
    try:
        buffer.append(0)
    except BufferError:
        return True
    del buffer[-1]
    return False


buffer_in_use: Callable[[bytearray], bool] = compiled.buffer_in_use or buffer_in_use_in_python
