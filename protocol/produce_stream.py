"""The one walk of a Produce request's structure, whether the request is in one buffer or passes in pieces.

Produce request body (after the request header)
    v3+  transactional_id   nullable string (compact from v9)
         acks int16, timeout_ms int32
         topics [ name string (v0-12) | topic_id uuid (v13+),
                  partitions [ index int32, records nullable bytes, tagged fields (v9+) ],
                  tagged fields (v9+) ]
         tagged fields (v9+)

The walk reads only the few bytes of each field it needs (a topic name, a length) and skips the record
sets by their length, so nothing is copied but those fields, whatever the request's size. It is a
generator of steps (protocol/primitives.py: ask for the next `n` bytes, or to skip `n`), so one walk
serves both drivers: `produce_body` runs it over a whole frame, and `ProduceTopicStream` over the pieces
of a request forwarded as it arrives (the proxy's pass-through), which no one buffer ever holds.

What it yields serves every reader of a Produce: `acks` and `timeout_ms`, and each topic (its name, or
from v13 its 16-byte id) with its partitions' indexes and record-set sizes. Topic quotas, the broker
shield, the entity gate's answers and the usage records each want a part of that for the same request:
`produce_body` keeps the walk of the request being filtered, so its body is walked once, not once each.
"""

from __future__ import annotations

import struct
from collections.abc import Generator
from typing import NamedTuple

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.apis import API_SPECS, FLEXIBLE_FROM
from sluice.protocol.errors import ProtocolError
from sluice.protocol.headers import RequestHeader
from sluice.protocol.primitives import (
    INT32_UNPACK,
    Buffer,
    length_steps,
    tagged_fields_steps,
)

__all__ = ["ProduceBody", "ProduceTopicStream", "Topic", "TopicBytes", "produce_body", "walk_produce_body"]

_PRODUCE_MAX = API_SPECS[ApiKey.PRODUCE].max_version
_FLEXIBLE_FROM = FLEXIBLE_FROM[ApiKey.PRODUCE]
FIRST_TRANSACTIONAL = 3
# The newest version naming topics by name; later ones name them by id (KIP-516).
LAST_WITH_TOPIC_NAMES = 12
_UUID = 16
_ACKS_TIMEOUT = struct.Struct(">hi").unpack
_INDEX_SIZE = struct.Struct(">ii").unpack

# A topic's name (v0-12) or its 16-byte id (v13+).
Topic = str | bytes
# [(topic, record bytes)], one entry per topic of the request.
TopicBytes = list[tuple[Topic, int]]


class ProduceBody(NamedTuple):
    """What a Produce request's body holds, short of its records."""

    acks: int
    timeout_ms: int
    # Each topic in request order, with its partitions' (index, record-set bytes; 0 when null).
    topics: list[tuple[Topic, list[tuple[int, int]]]]

    def topic_bytes(self) -> TopicBytes:
        return [(topic, sum(size for _index, size in partitions)) for topic, partitions in self.topics]


_Walk = Generator[int, Buffer | None, ProduceBody]


def _walk(api_version: int) -> _Walk:
    """The steps of one Produce body of `api_version`, from its first byte to its last."""
    flexible = api_version >= _FLEXIBLE_FROM
    if api_version >= FIRST_TRANSACTIONAL:  # transactional_id
        length = yield from length_steps(flexible, False)
        if length < -1:
            raise ProtocolError("bad_produce_request", f"transactional_id length {length}")
        if length > 0:
            yield -length
    piece = yield 6
    assert piece is not None
    acks, timeout_ms = _ACKS_TIMEOUT(piece)
    topics: list[tuple[Topic, list[tuple[int, int]]]] = []
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
            elif size < -1:
                raise ProtocolError("bad_produce_request", f"records length {size}")
            partitions.append((index, max(size, 0)))
            if flexible:
                yield from tagged_fields_steps()
        if flexible:
            yield from tagged_fields_steps()
        topics.append((topic, partitions))
    if flexible:
        yield from tagged_fields_steps()
    return ProduceBody(acks, timeout_ms, topics)


def _count(flexible: bool) -> Generator[int, Buffer | None, int]:
    count = yield from length_steps(flexible, True)
    if count < 0:
        raise ProtocolError("bad_produce_request", f"array length {count}")
    return count


def _check_version(api_version: int) -> None:
    if not 0 <= api_version <= _PRODUCE_MAX:
        raise ProtocolError("unsupported_version", f"Produce v{api_version}")


def walk_produce_body(api_version: int, body: Buffer) -> ProduceBody:
    """The walk over a whole Produce body (`body`: after the request header, to the frame's end), which it
    must end exactly at. ProtocolError('bad_produce_request') when malformed, ('unsupported_version')
    beyond the API table."""
    _check_version(api_version)
    view = memoryview(body)
    end = len(view)
    pos = 0
    walk = _walk(api_version)
    try:
        need = next(walk)
        while True:
            if need < 0:
                pos -= need
                if pos > end:
                    raise ProtocolError("bad_produce_request", "truncated: a record set or field")
                need = walk.send(None)
            else:
                stop = pos + need
                if stop > end:
                    raise ProtocolError("bad_produce_request", f"truncated: {need} bytes at {pos}")
                piece, pos = view[pos:stop], stop
                need = walk.send(piece)
    except StopIteration as done:
        found: ProduceBody = done.value
    except ProtocolError as exc:
        raise ProtocolError("bad_produce_request", exc.detail or exc.reason) from None
    if pos != end:
        raise ProtocolError("bad_produce_request", f"{end - pos} bytes after the topics")
    return found


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
        if 0 <= api_version <= _PRODUCE_MAX:
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
        return self._result.topic_bytes()

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
