"""Walks past the per-partition responses of flexible Produce (v9+), Fetch (v16+), ShareFetch and
ShareAcknowledge answers.

What follows those responses is what the proxy must find: in a Produce answer, `throttle_time_ms` and then
the top-level tagged fields (NodeEndpoints, v10+); in a Fetch answer, the tagged fields (NodeEndpoints,
v16+); in the share answers, the NodeEndpoints array. Nothing before them is read: offsets are computed
from lengths, records are skipped by theirs.

Two filters may need the same Produce answer's walk: the NodeEndpoints rewrite (every v10+ answer) and,
after it, the throttle patch (an answer to a throttled client). The rewrite's walk is remembered in one
slot, keyed by the very object walked and where its body starts (the slot holds that object, so no other
can take its identity meanwhile), so the second asks for free (`walked_produce_responses_end`). Remembering
costs the walk one tuple; the walk itself is the price of every flexible Produce answer (~0.5 us for one
partition: docs/benchmarks.md).

Every answer of every producer and consumer comes here, and a Python call costs about as much as the rest
of a partition's work, so the common cases are inlined: one-byte varints, an empty record_errors or
aborted-transactions array, an empty tagged-field block. A compact string whose one-byte length+1 is b
takes b bytes in all (b - 1 characters and the length byte), and a null one (b = 0) takes 1. Reading past
the end raises IndexError, turned into ProtocolError once, outside the loops.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from sluice.protocol import compiled
from sluice.protocol.api_keys import ApiKey
from sluice.protocol.errors import ProtocolError
from sluice.protocol.primitives import Buffer, read_uvarint, skip_compact_nullable_string, skip_tagged_fields
from sluice.protocol.schema_table import RESPONSE_FIELDS

__all__ = [
    "LAST_WITH_TOPIC_NAMES",
    "WALKED_FIELDS",
    "fetch_responses",
    "fetch_responses_in_python",
    "produce_responses_end",
    "produce_responses_end_in_python",
    "share_responses_end",
    "walked_fetch_topics",
    "walked_produce_responses_end",
]

_PRODUCE, _FETCH = ApiKey.PRODUCE, ApiKey.FETCH
_SHARE_FETCH, _SHARE_ACKNOWLEDGE = ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE
_PRODUCE_FIRST_WITH_TOPIC_ID = 13
_UUID = 16
# The newest version of Produce and Fetch naming topics by name; later ones name them by id (KIP-516).
LAST_WITH_TOPIC_NAMES = 12
# [(topic name, or topic id from Fetch v13, record bytes)]: protocol/record_sets.py's TopicBytes, which
# imports this module.
_TopicBytes = list[tuple[str | bytes, int]]
# v9+ partition: index int32, error_code int16, base_offset, log_append_time_ms, log_start_offset int64s.
_PRODUCE_PARTITION_FIXED = 4 + 2 + 8 + 8 + 8
# Fetch v16+ partition: index int32, error_code int16, high_watermark, last_stable_offset, log_start_offset.
_FETCH_PARTITION_FIXED = 4 + 2 + 8 + 8 + 8
assert _FETCH_PARTITION_FIXED == 30  # written out in fetch_responses
_ABORTED_TRANSACTION = 8 + 8  # producer_id, first_offset
_ACQUIRED_RECORDS = 8 + 8 + 2  # first_offset, last_offset, delivery_count
_LEADER_ID_AND_EPOCH = 4 + 4

# range(n) for the counts answers usually hold, made once: making one per loop costs as much as a
# partition's walk (the counts read inline are never negative: a null array goes through _count).
_SMALL = 64
_RANGES = tuple(range(n) for n in range(_SMALL))

# The last Produce answer walked: (the object, where its body starts, its version, where its responses end).
_last: tuple[object, int, int, int] = (None, -1, -1, -1)
# The last Fetch answer walked with `remember`: (the object, where its body starts, its version, its topics).
# Kept until the usage records take it (walked_fetch_topics) or the next walk replaces it.
_last_fetch: tuple[object, int, int, _TopicBytes] = (None, -1, -1, [])


def produce_responses_end(api_version: int, body: Buffer, start: int = 0, remember: bool = False) -> int:
    """Offset in `body` after the Responses array of a Produce v9+ answer whose body begins at `start` (a
    caller holding the whole frame passes it and the body's offset, saving a view). With `remember`, for
    `walked_produce_responses_end`: only for a frame that never changes and holds no buffer another wants
    to resize (the proxy's answers are views of the bytes read), as the slot keeps it until the next walk.
    """
    global _last
    pos = _produce_end(api_version, body, start)
    if remember:
        _last = (body, start, api_version, pos)
    return pos


def produce_responses_end_in_python(api_version: int, body: Buffer, start: int) -> int:
    """The walk of `produce_responses_end`, in Python: the reference for the compiled one, and what runs
    without it.

    Per topic: name (compact string; a 16-byte uuid from v13), partitions, tagged fields. Per partition: the
    fixed fields, record_errors (batch_index int32, message compact nullable string, tagged fields),
    error_message (compact nullable string), tagged fields (current_leader, v10+).
    """
    topic_id = api_version >= _PRODUCE_FIRST_WITH_TOPIC_ID
    try:
        b = body[start]
        topics, pos = (b - 1, start + 1) if 0 < b < 0x80 else _count(body, start)
        for _ in _RANGES[topics] if topics < _SMALL else range(topics):
            if topic_id:
                pos += _UUID
            else:
                b = body[pos]
                pos = pos + (b or 1) if b < 0x80 else skip_compact_nullable_string(body, pos)
            b = body[pos]
            partitions, pos = (b - 1, pos + 1) if 0 < b < 0x80 else _count(body, pos)
            for _ in _RANGES[partitions] if partitions < _SMALL else range(partitions):
                pos += _PRODUCE_PARTITION_FIXED
                if body[pos] == 1:  # no record errors
                    pos += 1
                else:
                    record_errors, pos = _count(body, pos)
                    for _ in range(record_errors):
                        pos = _skip_tags(body, skip_compact_nullable_string(body, pos + 4))
                b = body[pos]  # error_message
                pos = pos + (b or 1) if b < 0x80 else skip_compact_nullable_string(body, pos)
                pos = pos + 1 if body[pos] == 0 else skip_tagged_fields(body, pos)
            pos = pos + 1 if body[pos] == 0 else skip_tagged_fields(body, pos)
    except IndexError:
        raise ProtocolError("truncated", "Produce responses") from None
    return pos


def walked_produce_responses_end(api_version: int, body: Buffer, start: int = 0) -> int:
    """produce_responses_end, without walking again the answer remembered last."""
    walked, walked_start, walked_version, end = _last
    if walked is body and walked_start == start and walked_version == api_version:
        return end
    return produce_responses_end(api_version, body, start)


def fetch_responses(
    api_version: int, body: Buffer, start: int = 0, remember: bool = False, topics_wanted: bool = True
) -> tuple[_TopicBytes, int]:
    """The topics of a flexible Fetch answer (v12+) whose body begins at `start`, each with its record bytes,
    and the offset in `body` after its responses (where the top-level tagged fields begin):
    throttle_time_ms, error_code, session_id, then per topic a name (v12) or a topic id (v13+) and
    partitions (the fixed fields, aborted transactions, preferred read replica, records, tagged fields),
    tagged fields. One walk serves both readers of a Fetch v16+ answer: the NodeEndpoints rewrite (the end)
    and, after it, the usage records (the topics), which ask `walked_fetch_topics` for the walk
    `remember` kept (as `produce_responses_end` keeps a Produce answer's, for the same frames).
    `topics_wanted=False` (the rewrite, when no usage records read the topics) lists none: only the end is
    found, at the cost of the walk before the topics were kept (no copy of a topic id, no list)."""
    global _last_fetch
    found, pos = _fetch_walk(api_version, body, start, topics_wanted)
    if remember:
        _last_fetch = (body, start, api_version, found)
    return found, pos


def fetch_responses_in_python(
    api_version: int, body: Buffer, start: int, topics_wanted: bool
) -> tuple[_TopicBytes, int]:
    """The walk of `fetch_responses`, in Python: the reference for the compiled one, and what runs without
    it."""
    by_id = api_version > LAST_WITH_TOPIC_NAMES
    end = len(body)
    found: _TopicBytes = []
    try:
        pos = start + 4 + 2 + 4
        b = body[pos]
        topics, pos = (b - 1, pos + 1) if 0 < b < 0x80 else _count(body, pos)
        for _ in _RANGES[topics] if topics < _SMALL else range(topics):
            if by_id:
                stop = pos + _UUID
                if stop > end:
                    raise IndexError("topic id")
            else:
                b = body[pos]  # a compact string, length + 1: 0 is null, which a topic name never is
                length, pos = (b - 1, pos + 1) if 0 < b < 0x80 else _count(body, pos)
                stop = pos + length
                if b == 0 or length < 0 or stop > end:
                    raise ProtocolError("bad_topic_name", f"topic name length {length}")
            named_at = pos
            b = body[stop]
            partitions, pos = (b - 1, stop + 1) if 0 < b < 0x80 else _count(body, stop)
            total = 0
            for _ in _RANGES[partitions] if partitions < _SMALL else range(partitions):
                pos += 30  # _FETCH_PARTITION_FIXED, written out: a global lookup per partition shows
                if body[pos] <= 1:  # aborted transactions: null or empty
                    pos += 5  # and the preferred read replica
                else:
                    aborted, pos = _count(body, pos)
                    for _ in range(aborted):
                        pos = _skip_tags(body, pos + _ABORTED_TRANSACTION)
                    pos += 4
                # records: compact nullable bytes, length + 1 as a varint (past the end of the body, the
                # tagged fields' read after them fails)
                b = body[pos]
                if b < 0x80:
                    if b > 1:
                        pos += b
                        total += b - 1
                    else:
                        pos += 1
                else:
                    c = body[pos + 1]
                    if c < 0x80:  # up to 16 KiB
                        size = ((b & 0x7F) | c << 7) - 1
                        pos += 2
                    else:
                        size, pos = read_uvarint(body, pos)
                        size -= 1
                    if size > 0:
                        pos += size
                        total += size
                pos = pos + 1 if body[pos] == 0 else skip_tagged_fields(body, pos)
            pos = pos + 1 if body[pos] == 0 else skip_tagged_fields(body, pos)
            if topics_wanted:
                named = body[named_at:stop]
                found.append((bytes(named) if by_id else str(named, "utf-8"), total))
    except IndexError:
        raise ProtocolError("truncated", "Fetch responses") from None
    except UnicodeDecodeError as exc:
        raise ProtocolError("bad_topic_name", str(exc)) from None
    if pos > end:
        raise ProtocolError("truncated", "Fetch responses")
    return found, pos


def fetch_answer_topics_in_python(api_version: int, body: Buffer, start: int, /) -> tuple[_TopicBytes, int]:
    """The topics of a flexible Fetch answer whose body begins at `start` (`fetch_responses`, with its
    topics), and the offset after the answer's top-level tagged fields: the walk the usage records make of
    every such answer (record_sets.fetch_topic_bytes). The reference of the compiled one, which makes it in
    one call."""
    found, pos = fetch_responses_in_python(api_version, body, start, True)
    return found, skip_tagged_fields(body, pos)


# The compiled walks where this install has them (protocol/compiled.py), else the Python ones.
_produce_end = compiled.produce_responses_end or produce_responses_end_in_python
_fetch_walk = compiled.fetch_responses or fetch_responses_in_python
fetch_answer_topics = compiled.fetch_answer_topics or fetch_answer_topics_in_python


_NO_FETCH_WALK: tuple[object, int, int, _TopicBytes] = (None, -1, -1, [])


def walked_fetch_topics_in_python(api_version: int, body: Buffer, start: int, /) -> _TopicBytes | None:
    """The topics `fetch_responses` found in this very answer when it remembered its walk, else None.
    Taken once: the walk kept is let go, and with it the answer it holds (a Fetch answer may be megabytes;
    the identity check needs the object alive while it is kept, so it cannot be kept by address alone).
    The reference of the compiled one (`walked_fetch_topics` below where the install has it), which the
    usage records call for every Fetch answer."""
    global _last_fetch
    walked, walked_start, walked_version, found = _last_fetch
    _last_fetch = _NO_FETCH_WALK
    if walked is body and walked_start == start and walked_version == api_version:
        return found
    return None


walked_fetch_topics: Callable[[int, Buffer, int], _TopicBytes | None] = walked_fetch_topics_in_python
if compiled.walked_fetch_topics is not None and compiled.bind_walked_fetch_topics is not None:
    compiled.bind_walked_fetch_topics(globals(), walked_fetch_topics_in_python)
    walked_fetch_topics = compiled.walked_fetch_topics


def _share_fetch_partition_end(body: Buffer, pos: int) -> int:
    """index, error_code, error_message, acknowledge_error_code, acknowledge_error_message, current_leader
    (leader id, epoch, tagged fields), records, acquired_records (first and last offset, delivery count,
    tagged fields), tagged fields."""
    pos = skip_compact_nullable_string(body, pos + 4 + 2)
    pos = skip_compact_nullable_string(body, pos + 2)
    pos = _skip_tags(body, pos + _LEADER_ID_AND_EPOCH)
    pos = skip_compact_nullable_string(body, pos)  # records: compact bytes share the encoding
    acquired, pos = _count(body, pos)
    for _ in range(acquired):
        pos = _skip_tags(body, pos + _ACQUIRED_RECORDS)
    return _skip_tags(body, pos)


def _share_acknowledge_partition_end(body: Buffer, pos: int) -> int:
    """index, error_code, error_message, current_leader (leader id, epoch, tagged fields), tagged fields."""
    pos = skip_compact_nullable_string(body, pos + 4 + 2)
    return _skip_tags(body, _skip_tags(body, pos + _LEADER_ID_AND_EPOCH))


def _first_version(api_key: int, field: str) -> int:
    """The first version whose answers have the top-level `field`, as Kafka's schemas say."""
    return next(first for name, first, _last, _tag in RESPONSE_FIELDS[api_key] if name == field)


# The top-level fields each walk goes past, in order, up to and including the array it ends after
# (tests/protocol/test_response_walks.py checks them against the schemas' RESPONSE_FIELDS).
WALKED_FIELDS: Mapping[int, tuple[str, ...]] = {
    _PRODUCE: ("Responses",),
    _FETCH: ("ThrottleTimeMs", "ErrorCode", "SessionId", "Responses"),
    _SHARE_FETCH: ("ThrottleTimeMs", "ErrorCode", "ErrorMessage", "AcquisitionLockTimeoutMs", "Responses"),
    _SHARE_ACKNOWLEDGE: (
        "ThrottleTimeMs",
        "ErrorCode",
        "ErrorMessage",
        "AcquisitionLockTimeoutMs",
        "Responses",
    ),
}
# api key -> (first version with acquisition_lock_timeout_ms, the walk past one partition)
_SHARE_LAYOUTS: Mapping[int, tuple[int, Callable[[Buffer, int], int]]] = {
    _SHARE_FETCH: (_first_version(_SHARE_FETCH, "AcquisitionLockTimeoutMs"), _share_fetch_partition_end),
    _SHARE_ACKNOWLEDGE: (
        _first_version(_SHARE_ACKNOWLEDGE, "AcquisitionLockTimeoutMs"),
        _share_acknowledge_partition_end,
    ),
}


def share_responses_end(api_key: int, api_version: int, body: Buffer, start: int = 0) -> int:
    """Offset in `body` after the responses of a ShareFetch or ShareAcknowledge answer (every version)
    whose body begins at `start`: throttle_time_ms, error_code, error_message, acquisition_lock_timeout_ms
    (from the version the schemas add it in), then per topic a topic id, its partitions and tagged
    fields."""
    lock_timeout_from, partition_end = _SHARE_LAYOUTS[api_key]
    try:
        pos = skip_compact_nullable_string(body, start + 4 + 2)
        if api_version >= lock_timeout_from:
            pos += 4
        topics, pos = _count(body, pos)
        for _ in range(topics):
            partitions, pos = _count(body, pos + _UUID)
            for _ in range(partitions):
                pos = partition_end(body, pos)
            pos = _skip_tags(body, pos)
    except IndexError:
        raise ProtocolError("truncated", "share responses") from None
    return pos


def _count(body: Buffer, pos: int) -> tuple[int, int]:
    """A compact array's element count (null counts as empty); a count beyond the bytes left is malformed."""
    count_plus_one, pos = read_uvarint(body, pos)
    count = count_plus_one - 1
    if count > len(body) - pos:
        raise ProtocolError("bad_array_length", f"{count} elements in {len(body) - pos} bytes")
    return max(count, 0), pos


def _skip_tags(body: Buffer, pos: int) -> int:
    return pos + 1 if body[pos] == 0 else skip_tagged_fields(body, pos)
