"""The one walk of a Produce request's structure, fed its body whole or in pieces, with the request's walk
kept for the filters that read it.

    v3+  transactional_id   nullable string (compact from v9)
         acks int16, timeout_ms int32
         topics [ name string (v0-12) | topic_id uuid (v13+),
                  partitions [ index int32, records nullable bytes, tagged fields (v9+) ],
                  tagged fields (v9+) ]
         tagged fields (v9+)

`ProduceWalk` is a resumable state machine, not a generator: it walks whatever bytes it has with struct
offsets, the way a walk over one buffer does, skipping each partition's record set by its length. A read
that runs past the bytes it has stops the walk at the start of that field (its few bytes are kept, never
a record set: those are skipped by count, across pieces), and the next piece resumes it there. Given a
whole body at once it never stops, so its inner loops are the one-buffer walk's, with no call per field:
it serves both the filters, which see a whole frame (`produce_body`, walked once per request however
many filters ask), and the usage records of a request streamed through the proxy in pieces
(`ProduceTopicStream`, which copies nothing but those few field bytes, whatever the request's size).

It gives everything its readers want: `acks`, `timeout_ms`, each topic's record bytes and its
partitions with their indexes and record bytes. The walk must end exactly at the end of the body, so a
walk that went wrong cannot report wrong sizes unnoticed. Anything malformed raises
ProtocolError('bad_produce_request'), a version beyond the API table's ProtocolError('unsupported_version').

Why this module is long: the walk has a loop for the non-flexible versions most clients speak and one for
the flexible ones, each with no helper call per partition (it runs on every Produce that usage records or
a topic quota read), and each able to stop and resume anywhere.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import NamedTuple

from sluice.protocol import compiled
from sluice.protocol.api_keys import ApiKey
from sluice.protocol.apis import API_SPECS, FLEXIBLE_FROM
from sluice.protocol.errors import ProtocolError
from sluice.protocol.headers import RequestHeader
from sluice.protocol.primitives import Buffer, read_uvarint, skip_tagged_fields
from sluice.protocol.produce import FIRST_TRANSACTIONAL
from sluice.protocol.record_sets import LAST_WITH_TOPIC_NAMES, Topic, TopicBytes

__all__ = [
    "Partitions",
    "ProduceBody",
    "ProduceTopicStream",
    "ProduceWalk",
    "produce_body",
    "produce_topic_bytes",
    "produce_topics",
    "walk_produce_body",
    "walk_produce_body_in_python",
]

PRODUCE_MAX = API_SPECS[ApiKey.PRODUCE].max_version
PRODUCE_FLEXIBLE_FROM = FLEXIBLE_FROM[ApiKey.PRODUCE]
_UUID = 16
# The most bytes a stopped walk keeps: one field it reads rather than skips (a topic name, which Kafka
# caps at 249 characters, a transactional id, a varint, a tagged-field block). A streamed request holding
# a longer one gets no breakdown rather than a copy of it.
_MAX_KEPT = 1 << 16
_FEW = 512  # enough for any field but an overlong name or tagged field
# The most topics and partitions one request may name. The walk keeps a tuple per partition and a list per
# topic, 10 to 40 times the bytes they take on the wire; a request naming more than any broker leads (a
# cluster's partitions, not one broker's) is refused as malformed rather than let take gigabytes.
MAX_ENTRIES = 200_000

_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from
_ACKS_TIMEOUT = struct.Struct(">hi").unpack_from
_ACKS_TIMEOUT_COUNT = struct.Struct(">hii").unpack_from
_INDEX_SIZE = struct.Struct(">ii").unpack_from

# A topic's partitions in a Produce request: (index, record bytes; 0 when null) each.
Partitions = list[tuple[int, int]]


class ProduceBody(NamedTuple):
    """What a Produce request's body holds, short of its records."""

    acks: int
    timeout_ms: int
    topics: TopicBytes  # each topic in request order, with its record bytes
    partitions: list[Partitions]  # the partitions of each of `topics`, in the same order


# A NamedTuple's own constructor is Python code; the walk builds one per request.
_new_body = tuple.__new__
_bare_walk = object.__new__

# Where the walk stands: the field it reads next.
_HEAD = 0  # the transactional_id (v3+), or acks
_ACKS = 1  # acks, timeout_ms and the topics' count
_TOPIC = 2  # a topic's name (or id) and its partitions' count, or the end of the topics
_PARTITION = 3  # a partition of the current topic, or the end of its partitions
_PARTITION_TAGS = 4  # the tagged fields after a partition's record set (v9+)
_BODY_TAGS = 5  # the body's tagged fields (v9+)
_DONE = 6


# Where a walk stands before its first topic (`ProduceWalk._where`); its partitions are never appended to.
_FRESH: tuple[int, Topic, int, Partitions, int] = (0, "", 0, [], 0)


class _Overrun(Exception):
    """A record set runs past the bytes the walk has: the rest is skipped as it arrives."""


class ProduceWalk:
    """The walk of one Produce body of `api_version`: `stop(buf, pos)` walks `buf` from `pos` (the walk's
    next byte) as far as it goes and says where it stopped; called again with the bytes from there on
    (and after passing `skip` bytes), it resumes. `body()` is the result once the structure has ended."""

    __slots__ = (
        "_acks",
        "_by_topic",
        "_count",
        "_entries",
        "_partitions",
        "_parts",
        "_phase",
        "_timeout_ms",
        "_topic",
        "_topics",
        "_total",
        "_version",
        "skip",
    )

    def __init__(self, api_version: int) -> None:
        if not 0 <= api_version <= PRODUCE_MAX:
            raise ProtocolError("unsupported_version", f"Produce v{api_version}")
        self._version = api_version
        self._phase = _HEAD
        self.skip = 0  # record-set bytes to pass before the walk's next byte
        self._topics: TopicBytes = []
        self._by_topic: list[Partitions] = []
        self._entries = 0  # topics and partitions named so far
        # The rest, acks and timeout_ms and where a stopped walk stood (how many topics, the current topic
        # and its partitions), are set as the walk reads them: a walk over one buffer never stops.

    @property
    def done(self) -> bool:
        """Whether the structure has ended."""
        return self._phase == _DONE

    def body(self) -> ProduceBody:
        """The walk's result. ProtocolError('bad_produce_request') unless the structure has ended."""
        if self._phase != _DONE:
            raise ProtocolError("bad_produce_request", "truncated")
        return _new_body(ProduceBody, (self._acks, self._timeout_ms, self._topics, self._by_topic))

    def stop(self, buf: Buffer, pos: int) -> int:
        """Walk `buf` from `pos` to its end or to the structure's; where it stopped: at the start of a
        field `buf` cuts, at its end when a record set runs past it (`skip` says by how much), or where
        the structure ended. ProtocolError('bad_produce_request') when the bytes cannot be a Produce."""
        if self._version >= PRODUCE_FLEXIBLE_FROM:
            return self._flexible_stop(buf, pos)
        return self._classic_stop(buf, pos)

    def _pause(self, count: int, topic: Topic, parts: int, partitions: Partitions, total: int) -> None:
        """Keep where the walk stopped, to resume there."""
        self._count, self._topic = count, topic
        self._parts, self._partitions, self._total = parts, partitions, total

    def _overran(self, partitions: Partitions, index: int, size: int, total: int, beyond: int) -> int:
        """A partition whose record set runs `beyond` the bytes the walk has: counted now, its bytes
        skipped as they arrive. The topic's record bytes with it."""
        partitions.append((index, size))
        self.skip = beyond
        return total + size

    def _where(self) -> tuple[int, Topic, int, Partitions, int]:
        """Where a stopped walk stood: how many topics, the current one, its partitions' count, those
        read and their record bytes."""
        return self._count, self._topic, self._parts, self._partitions, self._total

    def _classic_stop(self, buf: Buffer, pos: int) -> int:
        """The versions most clients speak: no helper call per partition."""
        end = len(buf)
        phase = self._phase
        count, topic, parts, partitions, total = _FRESH if phase == _HEAD else self._where()
        topics, by_topic = self._topics, self._by_topic
        index = size = 0
        try:
            if phase == _HEAD:
                if self._version >= FIRST_TRANSACTIONAL:
                    length = _I16(buf, pos)[0]
                    if length < -1:
                        raise ValueError(f"transactional_id length {length}")
                    stop = pos + 2 + (length if length > 0 else 0)
                    if stop > end:
                        raise IndexError("transactional_id")
                    pos = stop
                phase = _ACKS
            if phase == _ACKS:
                acks, timeout_ms, count = _ACKS_TIMEOUT_COUNT(buf, pos)
                if count < -1:
                    raise ValueError(f"array length {count}")
                self._acks, self._timeout_ms = acks, timeout_ms
                pos += 10
                phase = _TOPIC
            for _ in range(count - len(topics)):
                if phase == _TOPIC:
                    length = _I16(buf, pos)[0]
                    stop = pos + 2 + length
                    if length < 0:
                        raise ValueError(f"topic name length {length}")
                    parts = _I32(buf, stop)[0]
                    if parts < -1:
                        raise ValueError(f"array length {parts}")
                    topic = str(buf[pos + 2 : stop], "utf-8")
                    pos = stop + 4
                    partitions = []
                    total = 0
                    entries = self._entries + 1 + parts  # a null array (-1) names no partition
                    if entries > MAX_ENTRIES:
                        raise ValueError(f"more than {MAX_ENTRIES} topics and partitions in one request")
                    self._entries = entries
                    phase = _PARTITION
                for _ in range(parts - len(partitions)):
                    index, size = _INDEX_SIZE(buf, pos)
                    pos += 8
                    if size > 0:
                        pos += size
                        if pos > end:
                            raise _Overrun  # a new one each time: a raised instance keeps its traceback
                        total += size
                    elif size < 0:
                        if size < -1:
                            raise ValueError(f"records length {size}")
                        size = 0
                    partitions.append((index, size))
                topics.append((topic, total))
                by_topic.append(partitions)
                phase = _TOPIC
            phase = _DONE
        except (struct.error, IndexError):  # cut: resume at the start of the field
            pass
        except _Overrun:
            total = self._overran(partitions, index, size, total, pos - end)
            pos = end
        except (ValueError, UnicodeDecodeError) as exc:
            raise ProtocolError("bad_produce_request", str(exc)) from None
        self._phase = phase
        if phase != _DONE:
            self._pause(count, topic, parts, partitions, total)
        return pos

    def _flexible_stop(self, buf: Buffer, pos: int) -> int:
        end = len(buf)
        phase = self._phase
        count, topic, parts, partitions, total = _FRESH if phase == _HEAD else self._where()
        topics, by_topic = self._topics, self._by_topic
        by_id = self._version > LAST_WITH_TOPIC_NAMES
        index = size = 0
        try:
            if phase == _HEAD:
                if self._version >= FIRST_TRANSACTIONAL:
                    length = buf[pos]  # one byte but for an id of 127 bytes or more
                    stop = pos + 1
                    if length >= 0x80:
                        length, stop = read_uvarint(buf, pos)
                    stop += length - 1 if length > 1 else 0
                    if stop > end:
                        raise IndexError("transactional_id")
                    pos = stop
                phase = _ACKS
            if phase == _ACKS:
                acks, timeout_ms = _ACKS_TIMEOUT(buf, pos)
                count, stop = buf[pos + 6], pos + 7
                if count >= 0x80:
                    count, stop = read_uvarint(buf, pos + 6)
                count -= 1
                self._acks, self._timeout_ms = acks, timeout_ms
                pos = stop
                phase = _TOPIC
            elif phase == _PARTITION_TAGS:  # after a record set that ran past the last piece
                pos = skip_tagged_fields(buf, pos)
                phase = _PARTITION
            for _ in range(count - len(topics)):
                if phase == _TOPIC:
                    if by_id:
                        stop = pos + _UUID
                        if stop > end:
                            raise IndexError("topic id")
                        name: Topic = bytes(buf[pos:stop])
                    else:
                        length, start = buf[pos], pos + 1
                        if length >= 0x80:
                            length, start = read_uvarint(buf, pos)
                        stop = start + length - 1
                        if length < 1:
                            raise ValueError(f"topic name length {length - 1}")
                        if stop > end:
                            raise IndexError("topic name")
                        name = str(buf[start:stop], "utf-8")
                    parts = buf[stop]
                    if parts < 0x80:
                        stop += 1
                    else:
                        parts, stop = read_uvarint(buf, stop)
                    topic, pos, parts = name, stop, parts - 1
                    partitions = []
                    total = 0
                    entries = self._entries + 1 + parts  # a null array (-1) names no partition
                    if entries > MAX_ENTRIES:
                        raise ValueError(f"more than {MAX_ENTRIES} topics and partitions in one request")
                    self._entries = entries
                    phase = _PARTITION
                for _ in range(parts - len(partitions)):
                    index = _I32(buf, pos)[0]
                    stop = pos + 4
                    size = buf[stop] - 1
                    if size < 0x7F:
                        stop += 1
                    elif buf[stop + 1] < 0x80:  # two bytes: a record set of up to 16 KiB
                        size = ((size + 1) & 0x7F | buf[stop + 1] << 7) - 1
                        stop += 2
                    else:
                        size, stop = read_uvarint(buf, stop)
                        size -= 1
                    if size > 0:
                        stop += size
                        if stop >= end:  # the record set reaches the end of what the walk has
                            pos = stop
                            raise _Overrun  # a new one each time: a raised instance keeps its traceback
                    elif size < 0:
                        if size < -1:
                            raise ValueError(f"records length {size}")
                        size = 0
                    tags = buf[stop]  # a cut before the tags: the partition is read again
                    partitions.append((index, size))
                    total += size
                    if tags == 0:
                        pos = stop + 1
                    else:  # tags: the partition is counted, so a cut in them resumes past its records
                        pos, phase = stop, _PARTITION_TAGS
                        pos = skip_tagged_fields(buf, stop)
                        phase = _PARTITION
                pos = pos + 1 if buf[pos] == 0 else skip_tagged_fields(buf, pos)
                topics.append((topic, total))
                by_topic.append(partitions)
                phase = _TOPIC
            phase = _BODY_TAGS
            pos = pos + 1 if buf[pos] == 0 else skip_tagged_fields(buf, pos)
            phase = _DONE
        except (struct.error, IndexError):  # cut: resume at the start of the field
            pass
        except _Overrun:
            total = self._overran(partitions, index, size, total, pos - end)
            pos = end
            phase = _PARTITION_TAGS
        except ProtocolError as exc:
            if exc.reason != "truncated":
                raise ProtocolError("bad_produce_request", exc.detail or exc.reason) from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise ProtocolError("bad_produce_request", str(exc)) from None
        self._phase = phase
        if phase != _DONE:
            self._pause(count, topic, parts, partitions, total)
        return pos


def walk_produce_body(api_version: int, body: Buffer, start: int = 0) -> ProduceBody:
    """The walk of a whole Produce request body (from `start` in `body`, after the request header, to its
    end). ProtocolError('bad_produce_request') when malformed, ('unsupported_version') beyond the API
    table."""
    if not 0 <= api_version <= PRODUCE_MAX:
        raise ProtocolError("unsupported_version", f"Produce v{api_version}")
    return _new_body(ProduceBody, _walk_whole(api_version, body, start))


_WalkedBody = tuple[int, int, TopicBytes, list[Partitions]]


def walk_produce_body_in_python(api_version: int, body: Buffer, start: int = 0) -> _WalkedBody:
    """`walk_produce_body`'s walk (of a version it accepts), in Python, as a plain tuple: the reference for
    the compiled one, and what runs without it."""
    # __init__'s state, set here: the Python call costs a few percent of a small request's walk.
    walk = _bare_walk(ProduceWalk)
    walk._version, walk._phase, walk.skip, walk._topics, walk._by_topic = api_version, _HEAD, 0, [], []
    walk._entries = 0
    if api_version >= PRODUCE_FLEXIBLE_FROM:
        stopped = walk._flexible_stop(body, start)
    else:
        stopped = walk._classic_stop(body, start)
    if walk._phase == _DONE and stopped == len(body):
        return walk._acks, walk._timeout_ms, walk._topics, walk._by_topic
    if walk._phase == _DONE:
        raise ProtocolError("bad_produce_request", f"{len(body) - stopped} bytes after the topics")
    raise ProtocolError("bad_produce_request", "truncated")


def produce_topic_bytes_in_python(api_version: int, body: Buffer, start: int = 0) -> TopicBytes:
    """`produce_topic_bytes`'s walk in Python: the whole walk's topics (the reference for the compiled one,
    which keeps no partition on the way)."""
    return walk_produce_body_in_python(api_version, body, start)[2]


# The compiled walks where this install has them (protocol/compiled.py), else the Python ones.
_walk_whole = compiled.walk_produce_body or walk_produce_body_in_python
_topics_whole = compiled.produce_topic_bytes or produce_topic_bytes_in_python


def produce_topic_bytes(api_version: int, body: Buffer, start: int = 0) -> TopicBytes:
    """[(topic, record bytes)] of a Produce request body (from `start`), one entry per topic in the request:
    the walk and the checks of `walk_produce_body`, without keeping its partitions. Raises as it does."""
    if not 0 <= api_version <= PRODUCE_MAX:
        raise ProtocolError("unsupported_version", f"Produce v{api_version}")
    return _topics_whole(api_version, body, start)


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
    found = walk_produce_body(header.api_version, frame, 4 + header.size)
    _last = (header, size, found)
    return found


def produce_topics_in_python(frame: Buffer, header: RequestHeader) -> TopicBytes:
    """The topics of a framed Produce request with their record bytes: from the walk another filter of this
    request made (`produce_body`) if one did, else from a walk of the topics alone (the usage records ask
    last, and for nothing more). Raises as `walk_produce_body`.

    The reference for the compiled one (protocol/_compiled.c), which walks the topics itself where no
    walk of this request was kept, and calls this for every other case."""
    last = _last
    if last is not None and last[0] is header and last[1] == len(frame):
        return last[2].topics
    return produce_topic_bytes(header.api_version, frame, 4 + header.size)


produce_topics: Callable[[Buffer, RequestHeader], TopicBytes] = produce_topics_in_python
if compiled.produce_topics is not None and compiled.bind_produce_topics is not None:
    # It reads the walk `produce_body` keeps (`_last`) as the Python does, from this module's globals.
    compiled.bind_produce_topics(globals(), PRODUCE_MAX, produce_topics_in_python)
    produce_topics = compiled.produce_topics


class ProduceTopicStream:
    """The walk fed a framed Produce request's bytes in order (length prefix first), in pieces of any size;
    `result()` is its topic bytes once the request has ended exactly where its structure does, else None
    (malformed, cut short, or longer than its structure): the caller loses the topic breakdown of that one
    request, nothing else."""

    __slots__ = ("_before", "_kept", "_seen", "_size", "_trailing", "_walk")

    def __init__(self, api_version: int, header_size: int, frame_size: int) -> None:
        """`header_size`: the request header's size; `frame_size`: the whole frame's, length prefix
        included (what `len()` of the frame gives)."""
        self._size = frame_size
        self._seen = 0
        self._before = 4 + header_size  # the length prefix and the request header come first
        self._kept = b""  # the start of a field the last piece cut
        self._trailing = 0  # bytes fed after the structure ended
        self._walk: ProduceWalk | None = None
        if 0 <= api_version <= PRODUCE_MAX:
            self._walk = ProduceWalk(api_version)

    def feed(self, piece: Buffer) -> None:
        """The next bytes of the request."""
        size = len(piece)
        self._seen += size
        walk = self._walk
        if walk is not None and walk.skip > size:  # inside a record set: most pieces of a large request
            walk.skip -= size
            return
        at = 0
        if self._before:
            at = min(self._before, size)
            self._before -= at
        if walk is not None and at < size:
            try:
                self._walk_through(walk, piece, at)
            except ProtocolError:
                self._walk = None  # malformed: no breakdown for this request

    def _walk_through(self, walk: ProduceWalk, piece: Buffer, at: int) -> None:
        size = len(piece)
        while True:  # (a walk at the piece's end still steps: a record set may have been the last field)
            if walk.done:
                self._trailing += size - at
                return
            if walk.skip:
                take = min(walk.skip, size - at)
                walk.skip -= take
                at += take
                if walk.skip:
                    return
            kept = self._kept
            if not kept:
                at = walk.stop(piece, at)
                if walk.skip or walk.done:
                    continue
                if at < size:
                    self._keep(piece[at:])
                return
            # The cut field lies in what was kept and the next few bytes (a length, an index, a topic
            # name), or at most the next _MAX_KEPT: the piece is not copied whole for it.
            for more in (_FEW, _MAX_KEPT):
                head = kept + bytes(piece[at : at + more])
                stopped = walk.stop(head, 0)
                if stopped >= len(kept):
                    self._kept = b""
                    at += stopped - len(kept)
                    break
                if at + more >= size:  # still cut, and the whole piece was in `head`
                    self._keep(head[stopped:])
                    return
                kept = head[stopped : len(kept)]  # where the walk stands now
            else:
                raise ProtocolError("bad_produce_request", "a field longer than the walk keeps")

    def _keep(self, part: Buffer) -> None:
        if len(part) > _MAX_KEPT:
            raise ProtocolError("bad_produce_request", "a field longer than the walk keeps")
        self._kept = bytes(part)

    def walked(self) -> ProduceBody | None:
        """The walk's result (what `walk_produce_body` gives for the whole body), when the whole request
        was fed and its structure ended exactly at its end; None otherwise."""
        walk = self._walk
        if walk is None or self._seen != self._size or self._trailing or walk.skip or not walk.done:
            return None
        return walk.body()

    def result(self) -> TopicBytes | None:
        """The topics and their record bytes, as `walked()`."""
        found = self.walked()
        return None if found is None else found.topics
