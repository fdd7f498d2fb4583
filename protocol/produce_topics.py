"""What a Produce request writes where, read from the one walk of its structure (protocol/produce_stream.py,
kept per request):
(topic, record bytes) per partition for the quotas that charge by topic, each topic's partition indexes for
an answer that must list them.

Versions 0-12 carry topic names. Version 13 names topics by id (KIP-516): `produce_partition_sizes`
refuses it with ProtocolError('unsupported_version') (the filter that needs topic names keeps clients
below it through the ApiVersions clamp); `produce_partitions`, which only answers the request, gives the
16-byte topic id instead.
"""

from __future__ import annotations

from sluice.protocol.errors import ProtocolError
from sluice.protocol.headers import RequestHeader
from sluice.protocol.primitives import Buffer
from sluice.protocol.produce_stream import produce_body
from sluice.protocol.record_sets import LAST_WITH_TOPIC_NAMES, Topic

__all__ = [
    "LAST_WITH_TOPIC_NAMES",
    "Topic",
    "produce_partition_sizes",
    "produce_partitions",
    "produce_topic_sizes",
    "topic_sizes",
]


def produce_partition_sizes(frame: Buffer, header: RequestHeader) -> list[tuple[str, int]]:
    """(topic, size of the partition's record set) for every partition of a framed Produce request.

    `frame` includes the 4-byte length; the body starts after the request header. A null record set
    counts as 0 bytes. ProtocolError('bad_produce_request') for a malformed body.
    """
    version = header.api_version
    if version > LAST_WITH_TOPIC_NAMES:
        raise ProtocolError("unsupported_version", f"Produce v{version} names topics by id")
    body = produce_body(frame, header)
    return [
        (topic, size)
        for (topic, _total), partitions in zip(body.topics, body.partitions, strict=True)
        if isinstance(topic, str)  # always, below v13
        for _index, size in partitions
    ]


def produce_partitions(frame: Buffer, header: RequestHeader) -> list[tuple[Topic, list[int]]]:
    """Each topic of a framed Produce request (its name, or its id from v13 on) with its partition indexes,
    in request order: what an answer to the request must list. ProtocolError('bad_produce_request') for a
    malformed body."""
    found: dict[Topic, list[int]] = {}
    body = produce_body(frame, header)
    for (topic, _total), partitions in zip(body.topics, body.partitions, strict=True):
        found.setdefault(topic, []).extend(index for index, _size in partitions)
    return list(found.items())


def produce_topic_sizes(frame: Buffer, header: RequestHeader) -> dict[str, int] | None:
    """Record-set bytes per topic of a framed Produce request (`topic_sizes` of `produce_partition_sizes`), or
    None for a version that names topics by id (what charges by topic name cannot use: the filters that do
    keep clients below it). ProtocolError('bad_produce_request') for a malformed body."""
    if header.api_version > LAST_WITH_TOPIC_NAMES:
        return None
    totals: dict[str, int] = {}
    for topic, size in produce_body(frame, header).topics:
        if isinstance(topic, str):  # always, below v13
            totals[topic] = totals.get(topic, 0) + size
    return totals


def topic_sizes(partition_sizes: list[tuple[str, int]]) -> dict[str, int]:
    """The same, summed per topic (in first-seen order)."""
    totals: dict[str, int] = {}
    for topic, size in partition_sizes:
        totals[topic] = totals.get(topic, 0) + size
    return totals
