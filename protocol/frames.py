"""Incremental splitting of a Kafka byte stream into 4-byte big-endian length-prefixed frames.

Sans-IO in the h11 style: bytes in (`feed`), complete frames out. Each frame is returned as a
`memoryview` covering the length prefix and the payload, so a proxy can forward it unchanged.

A large frame need not be assembled at all: once its start is in (`incomplete_head`), the caller may
take it over (`pass_through`), get the bytes received so far, and from then on receive its remaining
bytes from `feed` as `through` pieces, as they arrive, until the frame ends and framing resumes. A proxy
that needs only a request's header and size forwards such a frame the way a plain relay forwards bytes:
no join, no buffer as large as the frame.

A frame of a mebibyte or more that is assembled, once it is read beyond the read that gave its size, goes
into a mapping of its own (protocol/frame_memory.py says why): not before, so that a frame passed on as
it arrives, or one its reader has not made room for yet, takes none.

Why this module is long: it is one class, the splitter, whose ways with a frame (whole in a read, joined
from reads, passed on as it arrives, assembled in its own mapping) share its few fields and hand a frame
from one to the next mid-stream; apart, each would reach into the others' state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, final

from sluice.protocol import compiled
from sluice.protocol.errors import ProtocolError
from sluice.protocol.frame_memory import FrameMapping, frame_mapping, stays_valid
from sluice.protocol.primitives import INT32_UNPACK

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "MIN_FRAME_PAYLOAD_BYTES",
    "BadFramePrefix",
    "FrameHead",
    "FrameSplitter",
    "whole_frames_in_python",
]

DEFAULT_MAX_FRAME_BYTES = 104857600
# A response needs at least its 4-byte correlation id; a request needs more, but that is the
# request-header parser's business.
MIN_FRAME_PAYLOAD_BYTES = 4
_PREFIX = 4
# From this size on a frame being assembled gets a mapping of its own (glibc's own mmap threshold, as
# `sluice run` fixes it, proxy/process/process_memory.py): below it, the heap's reuse is cheaper than a
# mapping's system calls and page faults.
OWN_MAPPING_MIN_FRAME_BYTES = 1 << 20


class BadFramePrefix(ProtocolError):
    """A length prefix out of bounds. `frames` holds the complete frames read before it (from the same
    `feed`): they are valid and are owed an answer, so the caller forwards them before closing. Like any
    frame `feed` returns, they may be views of the caller's read buffer."""

    __slots__ = ("frames", "length")

    def __init__(self, reason: str, detail: str, frames: list[memoryview], length: int = 0) -> None:
        super().__init__(reason, detail)
        self.length = length  # what the prefix said
        self.frames = frames


class FrameObserver(Protocol):
    """Sees a passed-through frame's bytes as they go by (see FrameHead.observe)."""

    def feed(self, piece: memoryview) -> None: ...

    def end(self) -> None:
        """The frame is complete (not called when the connection closed first)."""
        ...


@final  # never subclassed: `type(frame) is FrameHead` is how the hot path tells it from a whole frame
class FrameHead:
    """Stands for a frame being passed through: its first bytes (`head`, length prefix included) and its
    whole size, which `len()` gives, as for a complete frame. A filter that wants more than the head may
    `observe` the frame: its observer is then fed every byte of it, from the length prefix on, in pieces
    as they pass (never the whole at once), and told when it ends."""

    __slots__ = ("head", "observers", "size")

    def __init__(self, head: memoryview, size: int) -> None:
        self.head = head
        self.size = size
        self.observers: list[FrameObserver] | None = None

    def __len__(self) -> int:
        return self.size

    def observe(self, observer: FrameObserver) -> None:
        if self.observers is None:
            self.observers = []
        self.observers.append(observer)


def whole_frames_in_python(
    view: memoryview, pos: int, min_payload: int, max_frame: int, frames: list[memoryview]
) -> tuple[int, int | None]:
    """Append to `frames` the frames of `view` from `pos` on that are whole in it, each of a length within
    [`min_payload`, `max_frame`] (views of `view`); return where they end, and the length field of the
    frame that starts there (out of range, or not all of it in `view`), or None when fewer than 4 bytes
    are left. `FrameSplitter.feed`'s loop over a read's frames; the reference for the compiled one
    (protocol/_compiled.c), which the splitter runs where the install has it."""
    size = len(view)
    while size - pos >= _PREFIX:
        length: int = INT32_UNPACK(view, pos)[0]
        end = pos + _PREFIX + length
        if length < min_payload or length > max_frame or end > size:
            return pos, length
        frames.append(view[pos:end])
        pos = end
    return pos, None


_WholeFrames = Callable[[memoryview, int, int, int, list[memoryview]], tuple[int, int | None]]
_whole_frames: _WholeFrames = whole_frames_in_python
if compiled.whole_frames is not None and compiled.bind_whole_frames is not None:
    compiled.bind_whole_frames(whole_frames_in_python)
    _whole_frames = compiled.whole_frames


class FrameSplitter:
    """Incremental splitter over a receive stream of 4-byte big-endian length-prefixed frames.

    Returned views of bytes fed stay valid forever: they are only ever sliced from immutable `bytes`
    objects (the chunk passed to `feed`, or one bytes object joined from several chunks when a frame
    spans chunks) or from a frame's own mapping, which nothing writes once the frame is whole; for a
    read-only memoryview fed, see `feed`. A frame inside one chunk costs no copy; a frame spanning chunks
    costs one copy of each byte: one join, because pending chunks are kept in a list rather than
    re-concatenated on every feed, or, from `own_mapping_bytes` on, a copy into its own mapping as each
    chunk after the one that gave its size arrives (that one's bytes are moved into it then, a second copy
    of at most one read when it came in a lent buffer).

    A bad length prefix raises BadFramePrefix carrying the frames completed before it. After it the
    stream is unusable; the caller is expected to close the connection (after answering those frames).
    `max_frame_bytes` may change between feeds (lower before authentication, say).
    """

    __slots__ = (
        "_assembly",
        "_lent_from",
        "_max_frame_bytes",
        "_pending",
        "_pending_need",
        "_read_on",
        "_through_left",
        "buffered_bytes",
        "defer_copies",
        "min_payload_bytes",
        "own_mapping_bytes",
        "through",
    )

    def __init__(
        self,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        own_mapping_bytes: int | None = None,
    ) -> None:
        self._max_frame_bytes = max_frame_bytes
        # None: OWN_MAPPING_MIN_FRAME_BYTES as it is when the splitter is made (a test may lower it).
        if own_mapping_bytes is None:
            own_mapping_bytes = OWN_MAPPING_MIN_FRAME_BYTES
        self.own_mapping_bytes = own_mapping_bytes
        self._pending: list[bytes | memoryview] = []
        # The mapping a frame of `own_mapping_bytes` or more is assembled in (its first `buffered_bytes`
        # bytes in), or None: while it is there, `_pending` is empty.
        self._assembly: FrameMapping | None = None
        # Bytes of the frame being assembled came in a feed after the one that gave its size: a reader that
        # makes room for a frame once its size is known (the proxy's request memory) has made it, and the
        # frame was not passed on when its start came: from then on a large one goes into its own mapping.
        self._read_on = False
        # Bytes of an incomplete frame held (read by others, written only here: a plain attribute, as the
        # connection reads it after every read, where a property would be a Python call).
        self.buffered_bytes = 0
        # Total size (prefix included) of the frame being assembled, or -1 while fewer than 4 bytes
        # of it are known.
        self._pending_need = -1
        # Kafka frames carry at least a correlation id; bare SASL tokens (SaslHandshake v0's legacy
        # framing) may be empty, so the connection lowers this to 0 while such an exchange runs.
        self.min_payload_bytes = MIN_FRAME_PAYLOAD_BYTES
        # Bytes of a frame the caller took over (`pass_through`) still to come, and those the last
        # `feed` received: they precede every frame that `feed` returned.
        self._through_left = 0
        self.through: list[memoryview] = []
        # What a loaned buffer leaves pending is copied at once, or, when this is set, kept as views of that
        # buffer until `settle` copies them: a caller that calls `settle` before it reuses the buffer saves
        # the copy of a large frame's start that `pass_through` hands over in the meantime.
        self.defer_copies = False
        # The index in `_pending` from which pieces may be views of a loaned buffer, or -1: `settle` looks
        # at those only, so a frame arriving in many small reads is not walked again on every read.
        self._lent_from = -1

    @property
    def pending_frame_bytes(self) -> int:
        """The whole size (prefix included) of the frame being assembled; 0 if none or its size is not
        known yet (fewer than 4 bytes of it read). What a memory budget must hold for it (a frame passed
        through is never assembled, so it holds nothing)."""
        return self._pending_need if self._pending_need > 0 else 0

    @property
    def max_frame_bytes(self) -> int:
        return self._max_frame_bytes

    @max_frame_bytes.setter
    def max_frame_bytes(self, value: int) -> None:
        self._max_frame_bytes = value

    def clear(self) -> None:
        """Drop whatever is buffered (the connection closed): its memory goes back at once."""
        self._pending = []
        self._assembly = None
        self._read_on = False
        self.buffered_bytes = 0
        self._pending_need = -1
        self._lent_from = -1
        self._through_left = 0
        self.through = []

    @property
    def passing_through(self) -> bool:
        """A frame taken over with `pass_through` has not ended yet."""
        return self._through_left > 0

    def feed(self, data: bytes | memoryview) -> list[memoryview]:
        """The frames `data` completes, in stream order. While a frame is passed through, its bytes in
        `data` (which come before any of those frames) are put in `self.through` instead.

        `data` is bytes, or a read-only memoryview over a buffer the caller reuses (a connection reading
        into one buffer): the frames and `through` pieces returned are then views of that buffer, valid
        until the caller changes it (which it must not do while any of them is alive), and what the
        splitter keeps past this call is copied (with `defer_copies`, by `settle`). Anything else is
        copied first."""
        if type(data) is memoryview and data.readonly:
            view = data
            loaned = True
        else:
            if type(data) is not bytes:
                # Views over a mutable buffer could change under the caller's feet; pay one copy instead.
                data = bytes(data)
            view = memoryview(data)
            loaned = False
        frames: list[memoryview] = []
        pos = 0
        size = len(view)
        if self._through_left:
            pos = min(self._through_left, size)
            self._through_left -= pos
            self.through = [view[:pos]]
            if pos == size:
                return frames
        elif self.through:
            self.through = []
        if self.buffered_bytes:
            pos = self._continue_pending(view, pos, frames, loaned)
            if pos < 0:
                return frames
        pos, length = _whole_frames(view, pos, self.min_payload_bytes, self._max_frame_bytes, frames)
        if length is not None or pos < size:
            self.keep_rest(view, pos, length, loaned, frames)
        return frames

    def keep_rest(
        self, view: memoryview, pos: int, length: int | None, loaned: bool, frames: list[memoryview]
    ) -> None:
        """What `feed` does with `view[pos:]`, which follows the whole frames it found (`frames`): the start
        of a frame, kept for the next feed; `length` is its length when its prefix was read, which must be in
        range. Public for the compiled pass over a broker's read (proxy/data_path/_connection_passes.c),
        which finds the whole frames itself and leaves the rest to this."""
        if length is not None and (length < self.min_payload_bytes or length > self._max_frame_bytes):
            self._raise_bad_length(length, frames)
        self._pending.append(self._kept(view[pos:], loaned))
        self.buffered_bytes = len(view) - pos
        self._pending_need = -1 if length is None else _PREFIX + length

    def eof(self) -> None:
        if self._through_left:
            raise ProtocolError(
                "truncated_frame", f"stream ended {self._through_left} bytes before the end of a frame"
            )
        if self.buffered_bytes:
            raise ProtocolError(
                "truncated_frame", f"stream ended with {self.buffered_bytes} bytes of an incomplete frame"
            )

    def incomplete_head(self, min_frame_bytes: int, head_bytes: int) -> tuple[memoryview, int] | None:
        """The incomplete frame the stream ends with, if its size (prefix included) is at least
        `min_frame_bytes` and `head_bytes` of it have arrived: its first bytes, contiguous (at least
        `head_bytes` of them, prefix included), and its size. None otherwise."""
        need = self._pending_need
        if need < min_frame_bytes or need < 0 or self.buffered_bytes < head_bytes:
            return None
        if self._assembly is not None:
            return memoryview(self._assembly).toreadonly()[: self.buffered_bytes], need
        pending = self._pending
        if len(pending[0]) < head_bytes:
            # The start came in small reads: join its first `head_bytes` (a bounded copy, once).
            parts: list[bytes | memoryview] = []
            have = i = 0
            while have < head_bytes:
                piece = pending[i]
                take = min(len(piece), head_bytes - have)
                parts.append(piece[:take])
                have += take
                if take < len(piece):
                    pending[i] = memoryview(piece)[take:]
                else:
                    i += 1
            self._pending = [b"".join(parts), *pending[i:]]
            if self._lent_from >= 0:
                self._lent_from = 0  # the pieces moved: `settle` looks at them all (once a frame)
        return memoryview(self._pending[0]), need

    def pass_through(self) -> list[memoryview]:
        """Take over the incomplete frame `incomplete_head` offered: its bytes received so far, in order.
        Its remaining bytes will come out of `feed` in `through`, never as a frame."""
        if self._pending_need < 0:
            raise ValueError("no incomplete frame of known size to pass through")
        if self._assembly is not None:
            pieces = [memoryview(self._assembly).toreadonly()[: self.buffered_bytes]]
            self._assembly = None
        else:
            pieces = [memoryview(piece) for piece in self._pending]
        self._through_left = self._pending_need - self.buffered_bytes
        self._lent_from = -1
        self._read_on = False
        self._pending = []
        self.buffered_bytes = 0
        self._pending_need = -1
        return pieces

    def _kept(self, rest: memoryview, loaned: bool) -> bytes | memoryview:
        """What is kept of `rest` past this feed: a copy if it is a loaned buffer's (or, with
        `defer_copies`, the view until `settle`)."""
        if not loaned:
            return rest
        if self.defer_copies:
            if self._lent_from < 0:
                self._lent_from = len(self._pending)  # where `rest` is about to be appended
            return rest
        return bytes(rest)

    def settle(self) -> None:
        """Copy what is pending from a loaned buffer (`defer_copies`): the caller may then reuse it. A large
        frame read on beyond the read that gave its size is copied into its own mapping."""
        start = self._lent_from
        if start >= 0:
            if self._read_on and self._pending_need >= self.own_mapping_bytes and self._assemble():
                return  # the lent pieces copied once, into the frame's own mapping
            self._lent_from = -1
            pending = self._pending
            for i in range(start, len(pending)):
                piece = pending[i]
                # A view of bytes may stay (they cannot change); a view of the loaned buffer is copied.
                if type(piece) is memoryview and not stays_valid(piece):
                    pending[i] = bytes(piece)

    def _continue_pending(self, view: memoryview, start: int, frames: list[memoryview], loaned: bool) -> int:
        """Extend the pending frame with `view[start:]`. Return the offset in `view` where parsing resumes,
        or -1 when all of it was absorbed into a still-incomplete frame."""
        rest = view[start:] if start else view
        need = self._pending_need
        if need < 0:
            have = self.buffered_bytes
            if have + len(rest) < _PREFIX:
                self._pending.append(self._kept(rest, loaned))
                self.buffered_bytes += len(rest)
                return -1
            # At most 3 bytes are pending here, so this join is negligible.
            prefix = b"".join(self._pending) + bytes(rest[: _PREFIX - have])
            length = INT32_UNPACK(prefix, 0)[0]
            if length < self.min_payload_bytes or length > self._max_frame_bytes:
                self._raise_bad_length(length, frames)
            need = self._pending_need = _PREFIX + length
        else:
            self._read_on = True
        have = self.buffered_bytes
        missing = need - have
        assembly = self._assembly
        # (A lent piece is moved by `settle` instead: the reader may still pass the frame on in this read.)
        lends = loaned and self.defer_copies
        if assembly is None and self._read_on and need >= self.own_mapping_bytes and not lends:
            assembly = self._assemble()
        if assembly is not None:
            if len(rest) < missing:
                assembly[have : have + len(rest)] = rest
                self.buffered_bytes += len(rest)
                return -1
            assembly[have:] = rest[:missing]
            frames.append(memoryview(assembly).toreadonly())
            self._assembly = None
        else:
            if len(rest) < missing:
                self._pending.append(self._kept(rest, loaned))
                self.buffered_bytes += len(rest)
                return -1
            self._pending.append(rest[:missing])
            frames.append(memoryview(b"".join(self._pending)))
            self._lent_from = -1
            self._pending = []
        self.buffered_bytes = 0
        self._pending_need = -1
        self._read_on = False
        return start + missing

    def _assemble(self) -> FrameMapping | None:
        """Move what is pending of a frame of known size into a mapping of the frame's size, where the rest
        of it will be copied as it arrives; None (and nothing moved) when the system refuses a mapping."""
        assembly = frame_mapping(self._pending_need)
        if assembly is None:
            return None
        at = 0
        for piece in self._pending:
            assembly[at : at + len(piece)] = piece
            at += len(piece)
        self._assembly = assembly
        self._pending = []
        self._lent_from = -1
        return assembly

    def _raise_bad_length(self, length: int, frames: list[memoryview]) -> None:
        if length < 0:
            raise BadFramePrefix("negative_frame_length", f"length prefix {length}", frames)
        if length < self.min_payload_bytes:
            raise BadFramePrefix(
                "frame_too_small", f"length prefix {length} < {self.min_payload_bytes}", frames
            )
        raise BadFramePrefix(
            "frame_too_large", f"length prefix {length} > limit {self._max_frame_bytes}", frames, length
        )
