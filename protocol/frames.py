"""Incremental splitting of a Kafka byte stream into 4-byte big-endian length-prefixed frames.

Sans-IO in the h11 style: bytes in (`feed`), complete frames out. Each frame is returned as a
`memoryview` covering the length prefix and the payload, so a proxy can forward it unchanged.
"""

from __future__ import annotations

from sluice.protocol.errors import ProtocolError
from sluice.protocol.primitives import INT32_UNPACK

__all__ = ["DEFAULT_MAX_FRAME_BYTES", "MIN_FRAME_PAYLOAD_BYTES", "BadFramePrefix", "FrameSplitter"]

DEFAULT_MAX_FRAME_BYTES = 104857600
# A response needs at least its 4-byte correlation id; a request needs more, but that is the
# request-header parser's business.
MIN_FRAME_PAYLOAD_BYTES = 4
_PREFIX = 4


class BadFramePrefix(ProtocolError):
    """A length prefix out of bounds. `frames` holds the complete frames read before it (from the same
    `feed`): they are valid and are owed an answer, so the caller forwards them before closing."""

    __slots__ = ("frames",)

    def __init__(self, reason: str, detail: str, frames: list[memoryview]) -> None:
        super().__init__(reason, detail)
        self.frames = frames


class FrameSplitter:
    """Incremental splitter over a receive stream of 4-byte big-endian length-prefixed frames.

    Returned views stay valid forever: they are only ever sliced from immutable `bytes` objects (the
    chunk passed to `feed`, or one bytes object joined from several chunks when a frame spans
    chunks). A frame inside one chunk costs no copy; a frame spanning chunks costs exactly one join,
    because pending chunks are kept in a list rather than re-concatenated on every feed.

    A bad length prefix raises BadFramePrefix carrying the frames completed before it. After it the
    stream is unusable; the caller is expected to close the connection (after answering those frames).
    `max_frame_bytes` may change between feeds (lower before authentication, say).
    """

    __slots__ = ("_max_frame_bytes", "_pending", "_pending_len", "_pending_need", "min_payload_bytes")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._max_frame_bytes = max_frame_bytes
        self._pending: list[bytes | memoryview] = []
        self._pending_len = 0
        # Total size (prefix included) of the frame being assembled, or -1 while fewer than 4 bytes
        # of it are known.
        self._pending_need = -1
        # Kafka frames carry at least a correlation id; bare SASL tokens (SaslHandshake v0's legacy
        # framing) may be empty, so the connection lowers this to 0 while such an exchange runs.
        self.min_payload_bytes = MIN_FRAME_PAYLOAD_BYTES

    @property
    def buffered_bytes(self) -> int:
        return self._pending_len

    @property
    def pending_frame_bytes(self) -> int:
        """The whole size (prefix included) of the frame being assembled; 0 if none or its size is not
        known yet (fewer than 4 bytes of it read). What a memory budget must hold for it."""
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
        self._pending_len = 0
        self._pending_need = -1

    def feed(self, data: bytes) -> list[memoryview]:
        if type(data) is not bytes:
            # Views over a mutable buffer could change under the caller's feet; pay one copy instead.
            data = bytes(data)
        frames: list[memoryview] = []
        view = memoryview(data)
        pos = 0
        if self._pending_len:
            pos = self._continue_pending(data, view, frames)
            if pos < 0:
                return frames
        size = len(data)
        max_frame = self._max_frame_bytes
        min_payload = self.min_payload_bytes
        while size - pos >= _PREFIX:
            length = INT32_UNPACK(data, pos)[0]
            if length < min_payload or length > max_frame:
                self._raise_bad_length(length, frames)
            end = pos + _PREFIX + length
            if end > size:
                self._pending.append(view[pos:])
                self._pending_len = size - pos
                self._pending_need = end - pos
                return frames
            frames.append(view[pos:end])
            pos = end
        if pos < size:
            self._pending.append(view[pos:])
            self._pending_len = size - pos
            self._pending_need = -1
        return frames

    def eof(self) -> None:
        if self._pending_len:
            raise ProtocolError(
                "truncated_frame", f"stream ended with {self._pending_len} bytes of an incomplete frame"
            )

    def _continue_pending(self, data: bytes, view: memoryview, frames: list[memoryview]) -> int:
        """Extend the pending frame with `data`. Return the offset in `data` where parsing resumes, or
        -1 when all of `data` was absorbed into a still-incomplete frame."""
        if self._pending_need < 0:
            have = self._pending_len
            if have + len(data) < _PREFIX:
                self._pending.append(view)
                self._pending_len += len(data)
                return -1
            # At most 3 bytes are pending here, so this join is negligible.
            prefix = b"".join(self._pending) + data[: _PREFIX - have]
            length = INT32_UNPACK(prefix, 0)[0]
            if length < self.min_payload_bytes or length > self._max_frame_bytes:
                self._raise_bad_length(length, frames)
            self._pending_need = _PREFIX + length
        missing = self._pending_need - self._pending_len
        if len(data) < missing:
            self._pending.append(view)
            self._pending_len += len(data)
            return -1
        self._pending.append(view[:missing])
        joined = b"".join(self._pending)
        frames.append(memoryview(joined))
        self._pending = []
        self._pending_len = 0
        self._pending_need = -1
        return missing

    def _raise_bad_length(self, length: int, frames: list[memoryview]) -> None:
        if length < 0:
            raise BadFramePrefix("negative_frame_length", f"length prefix {length}", frames)
        if length < self.min_payload_bytes:
            raise BadFramePrefix(
                "frame_too_small", f"length prefix {length} < {self.min_payload_bytes}", frames
            )
        raise BadFramePrefix(
            "frame_too_large", f"length prefix {length} > max_frame_bytes {self._max_frame_bytes}", frames
        )
