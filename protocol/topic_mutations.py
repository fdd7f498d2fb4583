"""CreateTopics (19), DeleteTopics (20) and CreatePartitions (37): the partition-mutation requests that
KIP-599 quotas (spec section 4), read, split and answered sans-IO.

Every function takes a body: the bytes after the Kafka request or response header. Versions are the
ones kafka-python 3.0.12 knows: CreateTopics v0-7, DeleteTopics v0-6, CreatePartitions v0-3.
Malformed bodies and unknown versions raise ProtocolError; misuse by the caller (indexes that do not
describe the request) raises ValueError.

The filter's flow for a strict version: `decode_mutation_request`, decide per topic, forward
`mutation_request_subset(..., admitted)` (or nothing), then `merge_mutation_response` rebuilds the
answer the client expects, one result per topic in its original order, refusals carrying
THROTTLING_QUOTA_EXCEEDED. `result_errors` tells which forwarded topics the broker refused, so their
permits can be given back.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from kafka.errors import ThrottlingQuotaExceededError, UnknownError
from kafka.protocol.admin.topics import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from kafka.protocol.api_message import ApiMessage

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.codec_quirks import decode_body, encode_body
from sluice.protocol.errors import ProtocolError
from sluice.protocol.primitives import INT32_MAX

THROTTLING_QUOTA_EXCEEDED = ThrottlingQuotaExceededError.errno
QUOTA_EXCEEDED_MESSAGE = "The throttling quota has been exceeded."
UNKNOWN_SERVER_ERROR = UnknownError.errno
MISSING_RESULT_MESSAGE = "The broker's answer held no result for this topic."

_DELETE_TOPICS_BY_ID_FROM = 6  # DeleteTopics v6 lists {name, topic_id} entries instead of names


class TopicMutation(NamedTuple):
    # None only in DeleteTopics v6: an entry given by topic id alone (or a malformed entry with neither,
    # which the broker answers INVALID_REQUEST).
    name: str | None
    topic_id: bytes | None  # 16 bytes (DeleteTopics v6 entries given by id), else None
    partitions: int  # CreateTopics: num_partitions (-1 = broker default); CreatePartitions: new total; else 0
    assignments: int | None  # CreateTopics: len(assignments) if any; CreatePartitions: len or None if null


class MutationRequest(NamedTuple):
    api_key: int
    version: int
    validate_only: bool  # always False for DeleteTopics, which has no such flag
    topics: list[TopicMutation]  # in request order


# A topic's identity in a request or an answer: ("id", 16 bytes) when it has a topic id, else
# ("name", name). Ids win because an id-only delete has no name, and Kafka resolves ids first.
_Key = tuple[str, Any]


class _Api(NamedTuple):
    request: type[ApiMessage]
    response: type[ApiMessage]
    results_field: str  # the response's array of per-topic results
    throttle_from: int  # first response version with throttle_time_ms
    message_from: int  # first response version whose results carry error_message
    topics_field: Callable[[int], str]  # the request's array of topics, by version
    mutation: Callable[[int, Any], TopicMutation]  # one request entry, read
    validate_only: Callable[[int, Any], bool]


def _create_topic(version: int, topic: Any) -> TopicMutation:
    assignments = topic.assignments
    return TopicMutation(topic.name, None, topic.num_partitions, len(assignments) if assignments else None)


def _create_partitions_topic(version: int, topic: Any) -> TopicMutation:
    assignments = topic.assignments
    return TopicMutation(topic.name, None, topic.count, None if assignments is None else len(assignments))


def _delete_topic(version: int, topic: Any) -> TopicMutation:
    if version < _DELETE_TOPICS_BY_ID_FROM:
        return TopicMutation(topic, None, 0, None)  # v0-5 entries are plain names
    topic_id = topic.topic_id  # an all-zero id decodes to None (codec quirk Q8)
    return TopicMutation(topic.name, None if topic_id is None else topic_id.bytes, 0, None)


_APIS: dict[int, _Api] = {
    ApiKey.CREATE_TOPICS: _Api(
        CreateTopicsRequest,
        CreateTopicsResponse,
        "topics",
        throttle_from=2,
        message_from=1,
        topics_field=lambda version: "topics",
        mutation=_create_topic,
        validate_only=lambda version, request: version >= 1 and bool(request.validate_only),
    ),
    ApiKey.DELETE_TOPICS: _Api(
        DeleteTopicsRequest,
        DeleteTopicsResponse,
        "responses",
        throttle_from=1,
        message_from=5,
        topics_field=lambda version: "topics" if version >= _DELETE_TOPICS_BY_ID_FROM else "topic_names",
        mutation=_delete_topic,
        validate_only=lambda version, request: False,
    ),
    ApiKey.CREATE_PARTITIONS: _Api(
        CreatePartitionsRequest,
        CreatePartitionsResponse,
        "results",
        throttle_from=0,
        message_from=0,
        topics_field=lambda version: "topics",
        mutation=_create_partitions_topic,
        validate_only=lambda version, request: bool(request.validate_only),
    ),
}


def _api(api_key: int) -> _Api:
    try:
        return _APIS[api_key]
    except KeyError:
        raise ProtocolError("unsupported_api", f"api key {api_key} is not a partition mutation") from None


def _request_topics(api: _Api, version: int, request: Any) -> list[Any]:
    return getattr(request, api.topics_field(version)) or []


def decode_mutation_request(api_key: int, version: int, body: bytes | memoryview) -> MutationRequest:
    """The topics of a mutation request body, in request order, with what each one asks for."""
    api = _api(api_key)
    request = decode_body(api.request, version, body)
    # A null name where the schema forbids one was refused by decode_body (codec_quirks Q9).
    topics = [api.mutation(version, topic) for topic in _request_topics(api, version, request)]
    return MutationRequest(api_key, version, api.validate_only(version, request), topics)


def mutation_request_subset(
    api_key: int, version: int, body: bytes | memoryview, keep: Sequence[int]
) -> bytes:
    """The same request body holding only the topics at `keep` (in that order).

    Every other field, tagged fields included, keeps its value.
    """
    api = _api(api_key)
    request = decode_body(api.request, version, body)
    topics = _request_topics(api, version, request)
    try:
        kept = [topics[index] for index in _checked_indexes(keep, len(topics))]
    except IndexError:
        raise ValueError(f"indexes {list(keep)} do not fit a request of {len(topics)} topics") from None
    setattr(request, api.topics_field(version), kept)
    return encode_body(request, version)


def _checked_indexes(indexes: Iterable[int], size: int) -> list[int]:
    checked = list(indexes)
    for index in checked:
        if not 0 <= index < size:
            raise IndexError(index)
    return checked


def merge_mutation_response(
    api_key: int,
    version: int,
    request: MutationRequest,
    broker_body: bytes | memoryview | None,
    forwarded: Sequence[int],
    refused: Sequence[int],
    throttle_ms: int,
) -> bytes:
    """The response body for the client: one result per topic of `request`, in its original order.

    Topics at `forwarded` take the broker's result for them (matched by topic id when the request
    entry has one, else by name); one the broker did not answer gets UNKNOWN_SERVER_ERROR (-1).
    Topics at `refused` get THROTTLING_QUOTA_EXCEEDED (89) with QUOTA_EXCEEDED_MESSAGE where the
    version has an error message, and every other field as a Kafka controller leaves it for an errored
    topic (the schema defaults: CreateTopics v5+ num_partitions -1, replication_factor -1, configs
    empty, topic_id zero). `throttle_time_ms`, where the version has it, becomes
    max(broker's, throttle_ms), capped at int32. `broker_body` None means nothing was forwarded;
    the top-level fields then take their defaults.

    Every index of `request.topics` must be in exactly one of `forwarded` and `refused` (ValueError
    otherwise). A malformed `broker_body` raises ProtocolError.
    """
    api = _api(api_key)
    if (request.api_key, request.version) != (api_key, version):
        raise ValueError(f"request is api {request.api_key} v{request.version}, not api {api_key} v{version}")
    size = len(request.topics)
    _check_partition(forwarded, refused, size)
    if broker_body is None:
        response = api.response(version=version)
        broker_results: dict[_Key, Any] = {}
        broker_throttle = 0
    else:
        response = decode_body(api.response, version, broker_body)
        broker_results = _results_by_key(getattr(response, api.results_field) or [])
        broker_throttle = response.throttle_time_ms if version >= api.throttle_from else 0
    results: list[Any] = [None] * size
    for index in forwarded:
        topic = request.topics[index]
        found = broker_results.get(_topic_key(topic))
        if found is None and topic.topic_id is not None and topic.name is not None:
            found = broker_results.get(("name", topic.name))
        if found is None:
            found = _error_result(api, version, topic, UNKNOWN_SERVER_ERROR, MISSING_RESULT_MESSAGE)
        results[index] = found
    for index in refused:
        results[index] = _error_result(
            api, version, request.topics[index], THROTTLING_QUOTA_EXCEEDED, QUOTA_EXCEEDED_MESSAGE
        )
    setattr(response, api.results_field, results)
    if version >= api.throttle_from:
        response.throttle_time_ms = min(max(broker_throttle, throttle_ms, 0), INT32_MAX)
    return encode_body(response, version)


def _check_partition(forwarded: Sequence[int], refused: Sequence[int], size: int) -> None:
    seen = sorted([*forwarded, *refused])
    if seen != list(range(size)):
        raise ValueError(
            f"forwarded {list(forwarded)} and refused {list(refused)} must split 0..{size - 1} exactly"
        )


def _topic_key(topic: TopicMutation) -> _Key:
    return ("id", topic.topic_id) if topic.topic_id is not None else ("name", topic.name)


def _results_by_key(results: Iterable[Any]) -> dict[_Key, Any]:
    by_key: dict[_Key, Any] = {}
    for result in results:
        topic_id = getattr(result, "topic_id", None)
        if topic_id is not None:
            by_key.setdefault(("id", topic_id.bytes), result)
        # An unknown id comes back nameless; only a result without any id may answer a nameless entry.
        if result.name is not None or topic_id is None:
            by_key.setdefault(("name", result.name), result)
    return by_key


def _error_result(api: _Api, version: int, topic: TopicMutation, error_code: int, message: str) -> Any:
    result_class = api.response.fields[api.results_field].data_class
    fields: dict[str, Any] = {"name": topic.name, "error_code": error_code}
    if version >= api.message_from:
        fields["error_message"] = message
    if api.request is DeleteTopicsRequest and version >= _DELETE_TOPICS_BY_ID_FROM:
        fields["topic_id"] = _as_uuid(topic.topic_id)
    return result_class(version=version, **fields)


def _as_uuid(raw: bytes | None) -> uuid.UUID | None:
    return None if raw is None else uuid.UUID(bytes=raw)


def result_errors(api_key: int, version: int, body: bytes | memoryview) -> dict[str | bytes, int]:
    """Per-topic error codes of a broker's answer.

    Each result appears under its name and, when it carries a (non-zero) topic id, also under the
    id's 16 bytes, so a topic can be looked up the way the request named it.
    """
    api = _api(api_key)
    response = decode_body(api.response, version, body)
    errors: dict[str | bytes, int] = {}
    for result in getattr(response, api.results_field) or []:
        if result.name is not None:
            errors[result.name] = result.error_code
        topic_id = getattr(result, "topic_id", None)
        if topic_id is not None:
            errors[topic_id.bytes] = result.error_code
    return errors


# The newest version of each API these codecs read; the proxy clamps ApiVersions answers to them.
MUTATION_MAX_VERSIONS: dict[int, int] = {
    key: min(api.request.max_version, api.response.max_version) for key, api in _APIS.items()
}
