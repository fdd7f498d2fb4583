"""Per-topic record bytes of a Produce request that passes through in pieces, never held whole.

A large Produce is forwarded as it arrives (the proxy's pass-through), so no one buffer ever holds it. The
usage records still want its bytes per topic: this reads the same structure as
`record_sets.produce_topic_bytes`, from the pieces in order, keeping only the few bytes of each field it
reads (a topic name, a length) and skipping the record sets by their length. Nothing is copied but those
fields, whatever the request's size.

The walk is a generator that asks for the next `n` bytes (`n` > 0, sent back as bytes) or to skip `n`
bytes (asked as `-n`), so the structure reads top to bottom like the one-buffer walk, and `feed` cuts the
pieces to what it asks. `result()` is the [(topic, record bytes)] once the request has ended exactly where
its structure does, else None (malformed, cut short, or longer than its structure): the caller loses the
topic breakdown of that one request, nothing else.
"""

from __future__ import annotations

import struct
from collections.abc import Generator

from sluice.protocol.apis import API_SPECS
from sluice.protocol.record_sets import TopicBytes

_PRODUCE_MAX = API_SPECS[0].max_version
_FLEXIBLE_FROM = 9
_TOPIC_ID_FROM = 13
_UUID = 16
_I16 = struct.Struct(">h").unpack
_I32 = struct.Struct(">i").unpack

# What the walk asks for: +n read n bytes, -n skip n bytes.
_Walk = Generator[int, bytes | None, TopicBytes]


class ProduceTopicStream:
    """Fed a framed Produce request's bytes in order (length prefix first), in pieces of any size."""

    __slots__ = ("_buffer", "_end", "_need", "_result", "_seen", "_size", "_walk")

    def __init__(self, api_version: int, header_size: int, frame_size: int) -> None:
        """`header_size`: the request header's size; `frame_size`: the whole frame's, length prefix
        included (what `len()` of the frame gives)."""
        self._size = frame_size
        self._seen = 0
        self._buffer = bytearray()
        self._result: TopicBytes | None = None
        self._end = -1  # where the structure ended, once it has
        self._walk: _Walk | None = None
        if 0 <= api_version <= _PRODUCE_MAX:
            self._walk = _produce(api_version, 4 + header_size)
            self._need = self._walk.send(None)
        else:
            self._need = 0

    def feed(self, piece: memoryview | bytes) -> None:
        """The next bytes of the request."""
        at, size = 0, len(piece)
        self._seen += size
        while at < size and self._walk is not None:
            need = self._need
            if need < 0:  # skip
                take = min(-need, size - at)
                at += take
                self._need = need + take
                if self._need == 0:
                    self._step(None, self._seen - size + at)
            else:
                take = min(need - len(self._buffer), size - at)
                self._buffer += piece[at : at + take]
                at += take
                if len(self._buffer) == need:
                    read, self._buffer = bytes(self._buffer), bytearray()
                    self._step(read, self._seen - size + at)

    def result(self) -> TopicBytes | None:
        """The topics and their record bytes, when the whole request was fed and its structure ended
        exactly at its end; None otherwise."""
        if self._result is None or self._seen != self._size or self._end != self._size:
            return None
        return self._result

    def _step(self, value: bytes | None, position: int) -> None:
        walk = self._walk
        assert walk is not None
        try:
            need = walk.send(value)
            while (
                need == 0
            ):  # an empty field (a zero-length name, an empty tagged field): nothing to wait for
                need = walk.send(b"")
        except StopIteration as done:
            self._result, self._end, self._walk = done.value, position, None
            return
        except (ValueError, UnicodeDecodeError, struct.error):
            self._walk = None  # malformed: no breakdown for this request
            return
        self._need = need


def _produce(api_version: int, body_offset: int) -> _Walk:
    flexible = api_version >= _FLEXIBLE_FROM
    yield -body_offset  # the length prefix and the request header
    if api_version >= 3:  # transactional_id
        length = (yield from _uvarint()) - 1 if flexible else _I16((yield 2))[0]  # type: ignore[arg-type]  # a read is sent bytes
        if length < -1:
            raise ValueError(f"transactional_id length {length}")
        if length > 0:
            yield -length
    yield -6  # acks, timeout_ms
    found: TopicBytes = []
    for _ in range((yield from _count(flexible))):
        if api_version >= _TOPIC_ID_FROM:
            topic: str | bytes = bytes((yield _UUID))  # type: ignore[arg-type]  # a read is sent bytes
        else:
            length = (yield from _uvarint()) - 1 if flexible else _I16((yield 2))[0]  # type: ignore[arg-type]  # a read is sent bytes
            if length < 0:
                raise ValueError(f"topic name length {length}")
            topic = bytes((yield length)).decode()  # type: ignore[arg-type]  # a read is sent bytes
        total = 0
        for _ in range((yield from _count(flexible))):
            yield -4  # the partition index
            size = (yield from _uvarint()) - 1 if flexible else _I32((yield 4))[0]  # type: ignore[arg-type]  # a read is sent bytes
            if size < -1:
                raise ValueError(f"records length {size}")
            if size > 0:
                total += size
                yield -size
            if flexible:
                yield from _skip_tagged()
        if flexible:
            yield from _skip_tagged()
        found.append((topic, total))
    if flexible:
        yield from _skip_tagged()
    return found


def _uvarint() -> Generator[int, bytes | None, int]:
    result = shift = 0
    while True:
        byte = (yield 1)[0]  # type: ignore[index]  # a read is sent bytes, a skip None: one send type
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result
        shift += 7
        if shift > 28:
            raise ValueError("varint longer than 5 bytes")


def _count(flexible: bool) -> Generator[int, bytes | None, int]:
    count = (yield from _uvarint()) - 1 if flexible else _I32((yield 4))[0]  # type: ignore[arg-type]  # as in _uvarint
    if count < -1:
        raise ValueError(f"array length {count}")
    return max(count, 0)


def _skip_tagged() -> Generator[int, bytes | None, None]:
    for _ in range((yield from _uvarint())):
        yield from _uvarint()  # the tag
        size = yield from _uvarint()
        if size:
            yield -size
