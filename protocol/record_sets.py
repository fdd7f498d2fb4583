"""The topic/partition structure of a Fetch response, walked without decoding a record, and the names the
Produce walk (protocol/produce_stream.py) shares with it.

Usage records report each entity's traffic per topic, on the hot path. The data path never decodes Fetch
bodies, so only their structure is walked, with struct offsets over one buffer, skipping each partition's
record set by its length (the `records` field: its byte length, 0 when null). Every version Kafka knows is
covered:

Fetch response body (after the response header)
    v1+  throttle_time_ms int32;  v7+ error_code int16, session_id int32
         topics [ topic string (v0-12) | topic_id uuid (v13+),
                  partitions [ index int32, error_code int16, high_watermark int64,
                               last_stable_offset int64 (v4+), log_start_offset int64 (v5+),
                               aborted_transactions nullable [ producer_id int64, first_offset int64,
                                                               tagged fields (v12+) ] (v4+),
                               preferred_read_replica int32 (v11+), records nullable bytes,
                               tagged fields (v12+) ],
                  tagged fields (v12+) ]
         tagged fields (v12+)

The walk must end exactly at the end of the body, so a walk that went wrong cannot report wrong sizes
unnoticed. Anything malformed raises ProtocolError('bad_fetch_response'), a version beyond the API table's
ProtocolError('unsupported_version'); nothing else escapes. Topics are returned as names, or (v13+, which
name topics by id) as the 16-byte topic id. The Produce request's one walk is protocol/produce_stream.py,
which shares this module's names for topics (`Topic`, `TopicBytes`, `LAST_WITH_TOPIC_NAMES`).

The non-flexible versions most clients speak have a loop of their own with no helper call per partition
(the walk runs on every Fetch that usage records read); the flexible ones (v12+) are walked by
protocol/response_walks.py's `fetch_answer_topics` (`fetch_responses`, the walk the NodeEndpoints rewrite
of a v16+ answer makes, and the tagged fields after it): one walk serves both.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TypeVar

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.apis import API_SPECS, FLEXIBLE_FROM
from sluice.protocol.errors import ProtocolError
from sluice.protocol.primitives import Buffer
from sluice.protocol.response_walks import LAST_WITH_TOPIC_NAMES, fetch_answer_topics

__all__ = ["LAST_WITH_TOPIC_NAMES", "Topic", "TopicBytes", "fetch_topic_bytes"]

_FETCH_MAX = API_SPECS[ApiKey.FETCH].max_version
_FETCH_FLEXIBLE_FROM = FLEXIBLE_FROM[ApiKey.FETCH]

_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from
_T = TypeVar("_T")

# A topic's name (v0-12) or its 16-byte id (v13+).
Topic = str | bytes
# [(topic, record bytes)], one entry per topic.
TopicBytes = list[tuple[Topic, int]]


def _finish(reason: str, walk: Callable[..., tuple[_T, int]], buf: Buffer, *args: object) -> _T:
    """Run `walk(buf, end, *args)`; its result, when it ended at the end of `buf`."""
    end = len(buf)
    try:
        found, pos = walk(buf, end, *args)
    except ProtocolError as exc:  # from a primitive reader
        raise ProtocolError(reason, exc.detail or exc.reason) from None
    except (IndexError, struct.error) as exc:
        raise ProtocolError(reason, f"truncated: {exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(reason, str(exc)) from None
    if pos != end:
        raise ProtocolError(reason, f"{end - pos} bytes after the topics")
    return found


def _classic_name(buf: Buffer, pos: int) -> tuple[str, int]:
    length = _I16(buf, pos)[0]
    pos += 2
    stop = pos + length
    if length < 0 or stop > len(buf):
        raise ValueError(f"topic name length {length}")
    return str(buf[pos:stop], "utf-8"), stop


def _classic_partitions(
    buf: Buffer, pos: int, end: int, fixed: int, aborted: bool, replica: int = 0
) -> tuple[int, int]:
    """(record bytes, position after) of a classic partitions array: `fixed` bytes, then (Fetch v4+) the
    aborted transactions and `replica` bytes (Fetch v11+), then a nullable int32-sized record set. Reads
    past the end raise struct.error."""
    count = _I32(buf, pos)[0]
    pos += 4
    if count < -1:
        raise ValueError(f"array length {count}")
    total = 0
    for _ in range(count):
        pos += fixed
        if aborted:
            transactions = _I32(buf, pos)[0]
            pos += 4
            if transactions > 0:
                pos += 16 * transactions
            elif transactions < -1:
                raise ValueError(f"array length {transactions}")
            pos += replica
        size = _I32(buf, pos)[0]
        pos += 4
        if size > 0:
            pos += size
            if pos > end:
                raise IndexError("records")
            total += size
        elif size < -1:
            raise ValueError(f"records length {size}")
    return total, pos


def _classic_topics(
    buf: Buffer, pos: int, end: int, fixed: int, aborted: bool, replica: int = 0
) -> tuple[TopicBytes, int]:
    """The hot path for the non-flexible versions most clients speak: no helper call per field."""
    count = _I32(buf, pos)[0]
    pos += 4
    if count < -1:
        raise ValueError(f"array length {count}")
    found: TopicBytes = []
    for _ in range(count):
        topic, pos = _classic_name(buf, pos)
        total, pos = _classic_partitions(buf, pos, end, fixed, aborted, replica)
        found.append((topic, total))
    return found, pos


def _fetch_partition_fixed(api_version: int) -> int:
    """Bytes from a partition's index to its aborted transactions (or records, before v4)."""
    size = 4 + 2 + 8  # index, error_code, high_watermark
    if api_version >= 4:
        size += 8  # last_stable_offset
    if api_version >= 5:
        size += 8  # log_start_offset
    return size


def fetch_topic_bytes(api_version: int, body: Buffer, start: int = 0) -> TopicBytes:
    """[(topic, record bytes)] of a Fetch response body (from `start` in `body`, to its end), one entry per
    topic in the response."""
    if not 0 <= api_version <= _FETCH_MAX:
        raise ProtocolError("unsupported_version", f"Fetch v{api_version}")
    if api_version >= _FETCH_FLEXIBLE_FROM:
        # The one walk of a flexible answer's responses (which the NodeEndpoints rewrite of a v16+ answer
        # makes too), then the top-level tagged fields: one call (compiled where the install has it), not
        # through _finish.
        try:
            found, pos = fetch_answer_topics(api_version, body, start)
        except ProtocolError as exc:
            raise ProtocolError("bad_fetch_response", exc.detail or exc.reason) from None
        if pos != len(body):
            raise ProtocolError("bad_fetch_response", f"{len(body) - pos} bytes after the topics")
        return found
    if start:
        body = memoryview(body)[start:]
    fixed = _fetch_partition_fixed(api_version)
    has_aborted = api_version >= 4
    replica = 4 if api_version >= 11 else 0
    head = (4 if api_version >= 1 else 0) + (6 if api_version >= 7 else 0)

    def classic(buf: Buffer, end: int) -> tuple[TopicBytes, int]:
        return _classic_topics(buf, head, end, fixed, has_aborted, replica)

    return _finish("bad_fetch_response", classic, body)
