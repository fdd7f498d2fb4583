"""Bodies the proxy's own Kafka client sends and reads: ApiVersions, Metadata, Produce, Fetch, ListOffsets
and CreateTopics. Sans-IO, over kafka-python's generated codecs (`protocol.message_codec`).

Versions: the client speaks `CLIENT_VERSIONS` and picks, per broker, the newest version both sides know
(`choose_version`). The floors are what Kafka 4.0 kept (KIP-896). The ceilings are the last versions
before the flexible (tagged-field) encodings: this client needs no field added since, every broker from
Kafka 2.1 to 4.x speaks them, and librdkafka's mock cluster appends a stray byte to its flexible Metadata
answers, which the strict decoder (codec_quirks Q6) rightly refuses. ApiVersions goes out at v2 for the
same reason (the mock answers v3+ with a body nobody can decode).

Answers are returned as small NamedTuples; a malformed body raises ProtocolError.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any, NamedTuple

from kafka.errors import NoError

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.errors import ProtocolError
from sluice.protocol.message_codec import decode_response_body, encode_request_body
from sluice.protocol.primitives import INT32_PACK

# The APIs this client speaks, by the names its callers import.
PRODUCE = ApiKey.PRODUCE
FETCH = ApiKey.FETCH
LIST_OFFSETS = ApiKey.LIST_OFFSETS
METADATA = ApiKey.METADATA
SASL_HANDSHAKE = ApiKey.SASL_HANDSHAKE
API_VERSIONS = ApiKey.API_VERSIONS
CREATE_TOPICS = ApiKey.CREATE_TOPICS
SASL_AUTHENTICATE = ApiKey.SASL_AUTHENTICATE
DESCRIBE_CONFIGS = ApiKey.DESCRIBE_CONFIGS

API_VERSIONS_VERSION = 2
CLIENT_VERSIONS: Mapping[int, tuple[int, int]] = {
    PRODUCE: (3, 8),
    FETCH: (4, 11),
    LIST_OFFSETS: (1, 5),
    METADATA: (4, 8),  # v4: the first with allow_auto_topic_creation
    CREATE_TOPICS: (2, 4),
    SASL_HANDSHAKE: (1, 1),
    SASL_AUTHENTICATE: (0, 1),
    DESCRIBE_CONFIGS: (1, 3),  # bodies in protocol/topic_metadata.py
}

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
ACKS_ALL = -1
NO_ERROR = NoError.errno


def choose_version(api_key: int, broker: Mapping[int, tuple[int, int]]) -> int | None:
    """The newest version of `api_key` both this client and the broker speak, or None."""
    ours = CLIENT_VERSIONS.get(api_key)
    theirs = broker.get(api_key)
    if ours is None or theirs is None:
        return None
    low, high = max(ours[0], theirs[0]), min(ours[1], theirs[1])
    return high if low <= high else None


# ---- ApiVersions ------------------------------------------------------------------------------


def encode_api_versions_request() -> bytes:
    return encode_request_body(API_VERSIONS, API_VERSIONS_VERSION)


def decode_api_versions(body: bytes | memoryview) -> tuple[int, dict[int, tuple[int, int]]]:
    """(error code, {api key: (min, max)})."""
    message = decode_response_body(API_VERSIONS, API_VERSIONS_VERSION, body)
    versions = {entry.api_key: (entry.min_version, entry.max_version) for entry in message.api_keys or []}
    return message.error_code, versions


# ---- Metadata ---------------------------------------------------------------------------------


class BrokerInfo(NamedTuple):
    node_id: int
    host: str
    port: int
    rack: str | None


class PartitionInfo(NamedTuple):
    partition: int
    error_code: int
    leader_id: int
    leader_epoch: int


class TopicInfo(NamedTuple):
    name: str
    error_code: int
    partitions: dict[int, PartitionInfo]


class MetadataAnswer(NamedTuple):
    brokers: dict[int, BrokerInfo]
    controller_id: int
    topics: dict[str, TopicInfo]


def encode_metadata_request(version: int, topics: Sequence[str] | None, allow_auto_create: bool) -> bytes:
    entries = None if topics is None else [{"name": name} for name in topics]
    return encode_request_body(METADATA, version, topics=entries, allow_auto_topic_creation=allow_auto_create)


def decode_metadata(version: int, body: bytes | memoryview) -> MetadataAnswer:
    message = decode_response_body(METADATA, version, body)
    brokers = {b.node_id: BrokerInfo(b.node_id, b.host, b.port, b.rack) for b in message.brokers or []}
    topics: dict[str, TopicInfo] = {}
    for topic in message.topics or []:
        if topic.name is None:
            continue
        partitions = {
            p.partition_index: PartitionInfo(
                p.partition_index, p.error_code, p.leader_id, _or(p, "leader_epoch", -1)
            )
            for p in topic.partitions or []
        }
        topics[topic.name] = TopicInfo(topic.name, topic.error_code, partitions)
    return MetadataAnswer(brokers, _or(message, "controller_id", -1), topics)


# ---- Produce ----------------------------------------------------------------------------------


class Produced(NamedTuple):
    error_code: int
    base_offset: int
    log_start_offset: int
    error_message: str | None


def encode_produce_request(
    version: int, topic: str, partition: int, records: bytes, *, acks: int, timeout_ms: int
) -> bytes:
    return encode_request_body(
        PRODUCE,
        version,
        transactional_id=None,
        acks=acks,
        timeout_ms=timeout_ms,
        topic_data=[{"name": topic, "partition_data": [{"index": partition, "records": records}]}],
    )


def decode_produce(version: int, body: bytes | memoryview, topic: str, partition: int) -> Produced:
    message = decode_response_body(PRODUCE, version, body)
    for entry in message.responses or []:
        if entry.name != topic:
            continue
        for p in entry.partition_responses or []:
            if p.index == partition:
                return Produced(
                    p.error_code, p.base_offset, _or(p, "log_start_offset", -1), _or(p, "error_message", None)
                )
    raise _missing(PRODUCE, topic, partition)


# ---- Fetch ------------------------------------------------------------------------------------


class Fetched(NamedTuple):
    error_code: int
    high_watermark: int
    log_start_offset: int
    records: bytes | None


# Fetch's max_wait_ms: the first field from v15 on (its replica_id became a tagged field), after replica_id
# before.
_FIRST_WITHOUT_REPLICA_ID = 15


def encode_fetch_request(
    version: int,
    topic: str,
    partition: int,
    offset: int,
    *,
    max_bytes: int,
    max_wait_ms: int,
    min_bytes: int = 1,
) -> bytes:
    """A follower's long poll asks for the same offset until a record comes (several times a second on an
    idle proxy), each with its own wait (ending on the background's grid, proxy/wake_grid.py): the request
    is encoded once per offset and its wait written in, not encoded per poll."""
    body = _encoded_fetch_request(version, topic, partition, offset, max_bytes, min_bytes)
    at = 0 if version >= _FIRST_WITHOUT_REPLICA_ID else 4
    return b"".join((body[:at], INT32_PACK(max_wait_ms), body[at + 4 :]))


@lru_cache(maxsize=64)
def _encoded_fetch_request(
    version: int, topic: str, partition: int, offset: int, max_bytes: int, min_bytes: int
) -> bytes:
    """The request with a wait of 0 (bytes, so a cached one cannot be changed)."""
    max_wait_ms = 0
    return encode_request_body(
        FETCH,
        version,
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,  # no fetch session: every request names its partition in full
        topics=[
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": partition,
                        "current_leader_epoch": -1,
                        "fetch_offset": offset,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": max_bytes,
                    }
                ],
            }
        ],
        forgotten_topics_data=[],
        rack_id="",
    )


# An idle follower's long poll is answered with the same few bytes poll after poll (nothing new at its
# offset): such an answer is decoded once, not by kafka-python's generic decoder each time (~0.15 ms on the
# cold caches of an idle proxy, several times a second). Only small answers: the key holds the bytes.
_REPEATED_ANSWER_MAX_BYTES = 512


def decode_fetch(version: int, body: bytes | memoryview, topic: str, partition: int) -> Fetched:
    if len(body) <= _REPEATED_ANSWER_MAX_BYTES:
        return _decode_small_fetch(version, bytes(body), topic, partition)
    return _decode_fetch(version, body, topic, partition)


@lru_cache(maxsize=64)
def _decode_small_fetch(version: int, body: bytes, topic: str, partition: int) -> Fetched:
    return _decode_fetch(version, body, topic, partition)  # the same bytes decode the same (a tuple)


def _decode_fetch(version: int, body: bytes | memoryview, topic: str, partition: int) -> Fetched:
    message = decode_response_body(FETCH, version, body)
    top_error = _or(message, "error_code", NO_ERROR)
    for entry in message.responses or []:
        if entry.topic != topic:
            continue
        for p in entry.partitions or []:
            if p.partition_index == partition:
                error = p.error_code or top_error
                return Fetched(error, p.high_watermark, _or(p, "log_start_offset", -1), p.records)
    if top_error:
        return Fetched(top_error, -1, -1, None)
    raise _missing(FETCH, topic, partition)


# ---- ListOffsets ------------------------------------------------------------------------------


def encode_list_offsets_request(version: int, topic: str, partitions: Sequence[int], timestamp: int) -> bytes:
    return encode_request_body(
        LIST_OFFSETS,
        version,
        replica_id=-1,
        isolation_level=0,
        topics=[
            {
                "name": topic,
                "partitions": [
                    {"partition_index": p, "current_leader_epoch": -1, "timestamp": timestamp}
                    for p in partitions
                ],
            }
        ],
        timeout_ms=30_000,
    )


def decode_list_offsets(version: int, body: bytes | memoryview, topic: str) -> dict[int, tuple[int, int]]:
    """{partition: (error code, offset)}."""
    message = decode_response_body(LIST_OFFSETS, version, body)
    out: dict[int, tuple[int, int]] = {}
    for entry in message.topics or []:
        if entry.name == topic:
            for p in entry.partitions or []:
                out[p.partition_index] = (p.error_code, p.offset)
    return out


# ---- CreateTopics -----------------------------------------------------------------------------


class NewTopic(NamedTuple):
    name: str
    partitions: int  # -1: the broker's num.partitions
    replication_factor: int  # -1: the broker's default.replication.factor
    configs: Mapping[str, str]


def encode_create_topics_request(version: int, topics: Sequence[NewTopic], timeout_ms: int) -> bytes:
    return encode_request_body(
        CREATE_TOPICS,
        version,
        topics=[
            {
                "name": t.name,
                "num_partitions": t.partitions,
                "replication_factor": t.replication_factor,
                "assignments": [],
                "configs": [{"name": k, "value": v} for k, v in t.configs.items()],
            }
            for t in topics
        ],
        timeout_ms=timeout_ms,
        validate_only=False,
    )


def decode_create_topics(version: int, body: bytes | memoryview) -> dict[str, tuple[int, str | None]]:
    """{topic: (error code, error message)}."""
    message = decode_response_body(CREATE_TOPICS, version, body)
    return {t.name: (t.error_code, _or(t, "error_message", None)) for t in message.topics or []}


def _or(message: Any, name: str, default: Any) -> Any:
    # A field the version lacks decodes as its schema default, or is absent on the object.
    value = getattr(message, name, default)
    return default if value is None and default is not None else value


def _missing(api_key: int, topic: str, partition: int) -> ProtocolError:
    return ProtocolError("missing_partition", f"api {api_key}: no answer for {topic}-{partition}")
