"""A Produce request's structure, walked once per request: over its frame for the filters, and over its
pieces when it passes through as it arrives.

`produce_body` is the walk of protocol/record_sets.py (`walk_produce_body`: acks, timeout, each topic's
partitions and record bytes) kept for the request being filtered. Topic quotas, the broker shield, the
entity gate's answers and the usage records each read a part of the same request: its body is walked once
for them all, not once each.

A large Produce is forwarded as it arrives (the proxy's pass-through), so no one buffer ever holds it. The
usage records still want its bytes per topic: `ProduceTopicStream` walks the same structure from the
pieces in order, keeping only the few bytes of each field it reads (a topic name, a length) and skipping
the record sets by their length. Nothing is copied but those fields, whatever the request's size. Its walk
is a generator of steps (protocol/primitives.py: ask for the next `n` bytes, or to skip `n`), so the
structure reads top to bottom as the one-buffer walk does. It does not serve the one-buffer case: driven
over a whole frame, a generator round trip per field costs several times what `walk_produce_body`'s
offsets do, on every Produce the usage records or a topic quota read.
"""

from __future__ import annotations

import struct
from collections.abc import Generator

from sluice.protocol.errors import ProtocolError
from sluice.protocol.headers import RequestHeader
from sluice.protocol.primitives import INT32_UNPACK, Buffer, length_steps, tagged_fields_steps
from sluice.protocol.record_sets import (
    FIRST_TRANSACTIONAL,
    LAST_WITH_TOPIC_NAMES,
    PRODUCE_FLEXIBLE_FROM,
    PRODUCE_MAX,
    Partitions,
    ProduceBody,
    Topic,
    TopicBytes,
    walk_produce_body,
)

__all__ = ["ProduceTopicStream", "produce_body"]

_UUID = 16
_ACKS_TIMEOUT = struct.Struct(">hi").unpack
_INDEX_SIZE = struct.Struct(">ii").unpack

_Walk = Generator[int, Buffer | None, ProduceBody]


def _walk(api_version: int) -> _Walk:
    """The steps of one Produce body of `api_version`, from its first byte to its last."""
    flexible = api_version >= PRODUCE_FLEXIBLE_FROM
    if api_version >= FIRST_TRANSACTIONAL:  # transactional_id
        length = yield from length_steps(flexible, False)
        if length < -1:
            raise ProtocolError("bad_produce_request", f"transactional_id length {length}")
        if length > 0:
            yield -length
    piece = yield 6
    assert piece is not None
    acks, timeout_ms = _ACKS_TIMEOUT(piece)
    topics: TopicBytes = []
    by_topic: list[Partitions] = []
    for _ in range((yield from _count(flexible))):
        if api_version > LAST_WITH_TOPIC_NAMES:
            piece = yield _UUID
            assert piece is not None
            topic: Topic = bytes(piece)
        else:
            length = yield from length_steps(flexible, False)
            if length < 0:
                raise ProtocolError("bad_produce_request", f"topic name length {length}")
            piece = yield length
            assert piece is not None
            try:
                topic = str(piece, "utf-8")
            except UnicodeDecodeError:
                raise ProtocolError("bad_produce_request", "topic name not UTF-8") from None
        partitions: list[tuple[int, int]] = []
        total = 0
        for _ in range((yield from _count(flexible))):
            if flexible:
                piece = yield 4
                assert piece is not None
                index = INT32_UNPACK(piece)[0]
                size = yield from length_steps(True, True)
            else:  # index and records length in one step: the versions most clients speak
                piece = yield 8
                assert piece is not None
                index, size = _INDEX_SIZE(piece)
            if size > 0:
                yield -size
                total += size
            elif size < -1:
                raise ProtocolError("bad_produce_request", f"records length {size}")
            partitions.append((index, max(size, 0)))
            if flexible:
                yield from tagged_fields_steps()
        if flexible:
            yield from tagged_fields_steps()
        topics.append((topic, total))
        by_topic.append(partitions)
    if flexible:
        yield from tagged_fields_steps()
    return ProduceBody(acks, timeout_ms, topics, by_topic)


def _count(flexible: bool) -> Generator[int, Buffer | None, int]:
    count = yield from length_steps(flexible, True)
    if count < -1:
        raise ProtocolError("bad_produce_request", f"array length {count}")
    return max(count, 0)  # null: none


# The walk of the last request asked about: the filters of one request ask in turn, with the same header.
# The header is a new object per request and kept alive here, so `is` cannot mistake another for it; only
# the walk's result is kept, never a view of the frame.
_last: tuple[RequestHeader, int, ProduceBody] | None = None


def produce_body(frame: Buffer, header: RequestHeader) -> ProduceBody:
    """The walk of a framed Produce request (`frame` from its length prefix on), walked once however many
    filters of the request ask for it. Raises as `walk_produce_body`."""
    global _last
    last = _last
    size = len(frame)
    if last is not None and last[0] is header and last[1] == size:
        return last[2]
    found = walk_produce_body(header.api_version, memoryview(frame)[4 + header.size :])
    _last = (header, size, found)
    return found


class ProduceTopicStream:
    """The walk fed a framed Produce request's bytes in order (length prefix first), in pieces of any size;
    `result()` is its topic bytes once the request has ended exactly where its structure does, else None
    (malformed, cut short, or longer than its structure): the caller loses the topic breakdown of that one
    request, nothing else."""

    __slots__ = ("_buffer", "_end", "_need", "_result", "_seen", "_size", "_walk")

    def __init__(self, api_version: int, header_size: int, frame_size: int) -> None:
        """`header_size`: the request header's size; `frame_size`: the whole frame's, length prefix
        included (what `len()` of the frame gives)."""
        self._size = frame_size
        self._seen = 0
        self._buffer = bytearray()
        self._result: ProduceBody | None = None
        self._end = -1  # where the structure ended, once it has
        self._walk: _Walk | None = None
        self._need = 0
        if 0 <= api_version <= PRODUCE_MAX:
            self._walk = _walk(api_version)
            self._need = -(4 + header_size)  # the length prefix and the request header come first

    def feed(self, piece: Buffer) -> None:
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
        return self._result.topics

    def _step(self, value: bytes | None, position: int) -> None:
        walk = self._walk
        assert walk is not None
        try:
            # (The first step, after the request header, starts the walk: a fresh generator takes None.)
            need = walk.send(value)
            while need == 0:  # an empty field (a zero-length name or tagged field): nothing to wait for
                need = walk.send(b"")
        except StopIteration as done:
            self._result, self._end, self._walk = done.value, position, None
            return
        except ProtocolError:
            self._walk = None  # malformed: no breakdown for this request
            return
        self._need = need
