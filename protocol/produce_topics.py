"""What a Produce request writes where: (topic, record bytes) per partition, read without decoding records.

Topic quotas charge a Produce per partition batch to the topic it writes (quota/topic_quotas.py), so the
proxy needs each partition's topic and the size of its record set, on the hot path. This walks the
request's structure with bounds-checked readers and skips over the record sets; nothing is copied.

Versions 0-12 carry topic names. Version 13 names topics by id (KIP-516): `produce_partition_sizes`
refuses it with ProtocolError('unsupported_version') (the filter that needs topic names keeps clients
below it through the ApiVersions clamp); `produce_partitions`, which only answers the request, gives the
16-byte topic id instead.
"""

from __future__ import annotations

from sluice.protocol.errors import ProtocolError
from sluice.protocol.headers import RequestHeader
from sluice.protocol.primitives import (
    Buffer,
    read_array_count,
    read_int16,
    read_int32,
    read_uvarint,
    skip_compact_nullable_string,
    skip_nullable_string,
    skip_tagged_fields,
)

PRODUCE = 0
FIRST_FLEXIBLE = 9
FIRST_TRANSACTIONAL = 3
LAST_WITH_TOPIC_NAMES = 12
_TOPIC_ID_BYTES = 16

# A topic's name (v0-12) or its 16-byte id (v13+).
Topic = str | bytes


def produce_partition_sizes(frame: Buffer, header: RequestHeader) -> list[tuple[str, int]]:
    """(topic, size of the partition's record set) for every partition of a framed Produce request.

    `frame` includes the 4-byte length; the body starts after the request header. A null record set
    counts as 0 bytes. ProtocolError('bad_produce_request') for a malformed body.
    """
    version = header.api_version
    if version > LAST_WITH_TOPIC_NAMES:
        raise ProtocolError("unsupported_version", f"Produce v{version} names topics by id")
    try:
        # Names only below v13 (checked above): the walker's type says str | bytes for every version.
        return [(topic, size) for topic, _index, size in _walk(frame, 4 + header.size, version)]  # type: ignore[misc]  # names: see above
    except ProtocolError as exc:
        raise ProtocolError("bad_produce_request", exc.detail or exc.reason) from None


def produce_partitions(frame: Buffer, header: RequestHeader) -> list[tuple[Topic, list[int]]]:
    """Each topic of a framed Produce request (its name, or its id from v13 on) with its partition indexes,
    in request order: what an answer to the request must list. ProtocolError('bad_produce_request') for a
    malformed body."""
    found: dict[Topic, list[int]] = {}
    try:
        for topic, index, _size in _walk(frame, 4 + header.size, header.api_version):
            found.setdefault(topic, []).append(index)
    except ProtocolError as exc:
        raise ProtocolError("bad_produce_request", exc.detail or exc.reason) from None
    return list(found.items())


def produce_topic_sizes(frame: Buffer, header: RequestHeader) -> dict[str, int] | None:
    """Record-set bytes per topic of a framed Produce request (`topic_sizes` of `produce_partition_sizes`), or
    None for a version that names topics by id (what charges by topic name cannot use: the filters that do
    keep clients below it). ProtocolError('bad_produce_request') for a malformed body."""
    if header.api_version > LAST_WITH_TOPIC_NAMES:
        return None
    return topic_sizes(produce_partition_sizes(frame, header))


def topic_sizes(partition_sizes: list[tuple[str, int]]) -> dict[str, int]:
    """The same, summed per topic (in first-seen order)."""
    totals: dict[str, int] = {}
    for topic, size in partition_sizes:
        totals[topic] = totals.get(topic, 0) + size
    return totals


def _walk(buf: Buffer, pos: int, version: int) -> list[tuple[Topic, int, int]]:
    """(topic, partition index, record-set size) for every partition."""
    flexible = version >= FIRST_FLEXIBLE
    by_id = version > LAST_WITH_TOPIC_NAMES
    if version >= FIRST_TRANSACTIONAL:
        pos = skip_compact_nullable_string(buf, pos) if flexible else skip_nullable_string(buf, pos)
    pos += 6  # acks (int16), timeout_ms (int32)
    topics, pos = read_array_count(buf, pos, flexible, "topics")
    found: list[tuple[Topic, int, int]] = []
    for _ in range(topics):
        name, pos = _topic_id(buf, pos) if by_id else _name(buf, pos, flexible)
        partitions, pos = read_array_count(buf, pos, flexible, "partitions")
        for _ in range(partitions):
            index, pos = read_int32(buf, pos)
            size, pos = _records_size(buf, pos, flexible)
            found.append((name, index, size))
            pos += size
            if pos > len(buf):
                raise ProtocolError("truncated", "records")
            if flexible:
                pos = skip_tagged_fields(buf, pos)
        if flexible:
            pos = skip_tagged_fields(buf, pos)
    if flexible:
        pos = skip_tagged_fields(buf, pos)
    if pos != len(buf):
        raise ProtocolError("trailing_bytes", f"{len(buf) - pos} bytes after the request")
    return found


def _topic_id(buf: Buffer, pos: int) -> tuple[bytes, int]:
    end = pos + _TOPIC_ID_BYTES
    if end > len(buf):
        raise ProtocolError("truncated", "topic id")
    return bytes(buf[pos:end]), end


def _name(buf: Buffer, pos: int, flexible: bool) -> tuple[str, int]:
    if flexible:
        length_plus_one, pos = read_uvarint(buf, pos)
        length = length_plus_one - 1
    else:
        length, pos = read_int16(buf, pos)
    end = pos + length
    if length < 0 or end > len(buf):
        raise ProtocolError("bad_topic_name", "null or truncated")
    try:
        return bytes(buf[pos:end]).decode(), end
    except UnicodeDecodeError:
        raise ProtocolError("bad_topic_name", "not UTF-8") from None


def _records_size(buf: Buffer, pos: int, flexible: bool) -> tuple[int, int]:
    if flexible:
        size_plus_one, pos = read_uvarint(buf, pos)
        return max(size_plus_one - 1, 0), pos
    size, pos = read_int32(buf, pos)
    if size < -1:
        raise ProtocolError("bad_records_length", str(size))
    return max(size, 0), pos
