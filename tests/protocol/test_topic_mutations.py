"""protocol/topic_mutations.py: reading, splitting and answering CreateTopics, DeleteTopics and
CreatePartitions bodies in every version kafka-python knows (spec section 4)."""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.errors import ProtocolError
from sluice.protocol.message_codec import (
    decode_request_body,
    decode_response_body,
    encode_request_body,
    encode_response_body,
)
from sluice.protocol.throttle_field import read_throttle_ms
from sluice.protocol.topic_mutations import (
    MISSING_RESULT_MESSAGE,
    QUOTA_EXCEEDED_MESSAGE,
    THROTTLING_QUOTA_EXCEEDED,
    UNKNOWN_SERVER_ERROR,
    MutationRequest,
    TopicMutation,
    decode_mutation_request,
    merge_mutation_response,
    mutation_request_subset,
    result_errors,
)

MAX_VERSION = {ApiKey.CREATE_TOPICS: 7, ApiKey.DELETE_TOPICS: 6, ApiKey.CREATE_PARTITIONS: 3}
ALL_VERSIONS = [(key, version) for key, top in MAX_VERSION.items() for version in range(top + 1)]
RESULTS_FIELD = {
    ApiKey.CREATE_TOPICS: "topics",
    ApiKey.DELETE_TOPICS: "responses",
    ApiKey.CREATE_PARTITIONS: "results",
}
# First response version with an error message / a throttle field (spec section 4 and 5).
MESSAGE_FROM = {ApiKey.CREATE_TOPICS: 1, ApiKey.DELETE_TOPICS: 5, ApiKey.CREATE_PARTITIONS: 0}
THROTTLE_FROM = {ApiKey.CREATE_TOPICS: 2, ApiKey.DELETE_TOPICS: 1, ApiKey.CREATE_PARTITIONS: 0}
ID_B = uuid.UUID("6f1c9a52-7e0a-4c53-9d5e-1b2c3d4e5f60")


def create_topic(name: str, partitions: int, assignments: int = 0, configs: int = 0) -> dict[str, Any]:
    return {
        "name": name,
        "num_partitions": partitions,
        "replication_factor": -1 if assignments else 1,
        "assignments": [{"partition_index": i, "broker_ids": [1, 2]} for i in range(assignments)],
        "configs": [{"name": f"key.{i}", "value": f"value-{i}"} for i in range(configs)],
    }


def request_fields(api_key: int, version: int, order: tuple[int, ...] = (0, 1, 2)) -> dict[str, Any]:
    """Three topics per API, exercising every shape each version can carry."""
    if api_key == ApiKey.CREATE_TOPICS:
        topics = [
            create_topic("a", 3, configs=2),
            create_topic("b", -1, assignments=2),
            create_topic("c", -1),
        ]
        fields: dict[str, Any] = {"topics": [topics[i] for i in order], "timeout_ms": 30000}
        if version >= 1:
            fields["validate_only"] = True
        return fields
    if api_key == ApiKey.DELETE_TOPICS:
        if version < 6:
            return {"topic_names": [["a", "b", "c"][i] for i in order], "timeout_ms": 25000}
        entries = [{"name": "a"}, {"name": None, "topic_id": ID_B}, {"name": "c"}]
        return {"topics": [entries[i] for i in order], "timeout_ms": 25000}
    topics = [
        {"name": "a", "count": 4, "assignments": None},
        {"name": "b", "count": 6, "assignments": [{"broker_ids": [1]}, {"broker_ids": [2]}]},
        {"name": "c", "count": 2, "assignments": []},
    ]
    return {"topics": [topics[i] for i in order], "timeout_ms": 20000, "validate_only": True}


def expected_mutations(api_key: int, version: int) -> list[TopicMutation]:
    if api_key == ApiKey.CREATE_TOPICS:
        return [
            TopicMutation("a", None, 3, None),
            TopicMutation("b", None, -1, 2),
            TopicMutation("c", None, -1, None),
        ]
    if api_key == ApiKey.DELETE_TOPICS:
        b = TopicMutation(None, ID_B.bytes, 0, None) if version >= 6 else TopicMutation("b", None, 0, None)
        return [TopicMutation("a", None, 0, None), b, TopicMutation("c", None, 0, None)]
    return [TopicMutation("a", None, 4, None), TopicMutation("b", None, 6, 2), TopicMutation("c", None, 2, 0)]


def result(api_key: int, version: int, name: str | None, error_code: int, **extra: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {"name": name, "error_code": error_code, **extra}
    if api_key == ApiKey.CREATE_TOPICS and version >= 5 and error_code == 0:
        fields.update(num_partitions=3, replication_factor=1, configs=[])
    return fields


def broker_body(api_key: int, version: int, results: list[dict[str, Any]], throttle_ms: int = 0) -> bytes:
    return encode_response_body(
        api_key, version, throttle_time_ms=throttle_ms, **{RESULTS_FIELD[api_key]: results}
    )


def results_of(api_key: int, version: int, body: bytes) -> list[Any]:
    return getattr(decode_response_body(api_key, version, body), RESULTS_FIELD[api_key])


# -- decode_mutation_request -----------------------------------------------------------------------


@pytest.mark.parametrize(("api_key", "version"), ALL_VERSIONS)
def test_decode_reads_every_topic_in_request_order(api_key: int, version: int) -> None:
    body = encode_request_body(api_key, version, **request_fields(api_key, version))

    decoded = decode_mutation_request(api_key, version, body)

    validate_only = api_key != ApiKey.DELETE_TOPICS and not (api_key == ApiKey.CREATE_TOPICS and version == 0)
    assert decoded == MutationRequest(api_key, version, validate_only, expected_mutations(api_key, version))


@pytest.mark.parametrize(("api_key", "version"), [(ApiKey.CREATE_TOPICS, 5), (ApiKey.CREATE_PARTITIONS, 3)])
def test_decode_reads_validate_only_false(api_key: int, version: int) -> None:
    fields = request_fields(api_key, version) | {"validate_only": False}

    decoded = decode_mutation_request(api_key, version, encode_request_body(api_key, version, **fields))

    assert decoded.validate_only is False


def test_decode_reads_a_delete_by_name_in_v6_as_having_no_topic_id() -> None:
    body = encode_request_body(
        ApiKey.DELETE_TOPICS, 6, topics=[{"name": "a", "topic_id": None}], timeout_ms=1
    )

    assert decode_mutation_request(ApiKey.DELETE_TOPICS, 6, body).topics == [
        TopicMutation("a", None, 0, None)
    ]


@pytest.mark.parametrize(("api_key", "version"), ALL_VERSIONS)
def test_decode_rejects_truncated_and_padded_bodies(api_key: int, version: int) -> None:
    body = encode_request_body(api_key, version, **request_fields(api_key, version))

    with pytest.raises(ProtocolError):
        decode_mutation_request(api_key, version, body[:-3])
    with pytest.raises(ProtocolError):
        decode_mutation_request(api_key, version, body + b"\x00")


@pytest.mark.parametrize(
    ("api_key", "version", "fields"),
    [
        (ApiKey.CREATE_TOPICS, 4, {"topics": [create_topic("a", 1) | {"name": None}], "timeout_ms": 1}),
        (ApiKey.DELETE_TOPICS, 5, {"topic_names": ["a", None], "timeout_ms": 1}),
        (
            ApiKey.CREATE_PARTITIONS,
            0,
            {"topics": [{"name": None, "count": 2, "assignments": None}], "timeout_ms": 1},
        ),
    ],
)
def test_decode_rejects_a_null_topic_name_where_the_schema_forbids_it(
    api_key: int, version: int, fields: dict[str, Any]
) -> None:
    body = encode_request_body(api_key, version, **fields)

    with pytest.raises(ProtocolError, match=r"null (name|entry in topic_names)") as raised:
        decode_mutation_request(api_key, version, body)

    assert raised.value.reason.startswith("bad_") and raised.value.reason.endswith("_request")


def test_decode_keeps_a_v6_delete_entry_with_neither_name_nor_id_for_the_broker_to_refuse() -> None:
    body = encode_request_body(
        ApiKey.DELETE_TOPICS, 6, topics=[{"name": None, "topic_id": None}], timeout_ms=1
    )

    assert decode_mutation_request(ApiKey.DELETE_TOPICS, 6, body).topics == [
        TopicMutation(None, None, 0, None)
    ]


def test_decode_rejects_other_apis_and_unknown_versions() -> None:
    body = encode_request_body(ApiKey.CREATE_TOPICS, 7, **request_fields(ApiKey.CREATE_TOPICS, 7))

    with pytest.raises(ProtocolError) as other_api:
        decode_mutation_request(0, 7, body)
    with pytest.raises(ProtocolError) as unknown_version:
        decode_mutation_request(ApiKey.CREATE_TOPICS, 8, body)

    assert other_api.value.reason == "unsupported_api"
    assert unknown_version.value.reason == "unsupported_version"


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(ALL_VERSIONS),
    st.binary(max_size=96),
)
def test_parsing_arbitrary_bytes_raises_only_protocol_error(
    api_version: tuple[int, int], data: bytes
) -> None:
    api_key, version = api_version
    for parse in (decode_mutation_request, result_errors):
        with contextlib.suppress(ProtocolError):
            parse(api_key, version, data)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(ALL_VERSIONS), st.integers(min_value=0), st.integers(min_value=0, max_value=255))
def test_a_corrupted_byte_raises_only_protocol_error(
    api_version: tuple[int, int], position: int, value: int
) -> None:
    api_key, version = api_version
    request = bytearray(encode_request_body(api_key, version, **request_fields(api_key, version)))
    request[position % len(request)] = value
    answer = bytearray(broker_body(api_key, version, [result(api_key, version, "a", 0)]))
    answer[position % len(answer)] = value

    with contextlib.suppress(ProtocolError):
        decode_mutation_request(api_key, version, bytes(request))
    with contextlib.suppress(ProtocolError):
        result_errors(api_key, version, bytes(answer))
    with contextlib.suppress(ProtocolError):
        merge_mutation_response(
            api_key, version, decoded_request(api_key, version), bytes(answer), [0], [1, 2], 0
        )


# -- mutation_request_subset -----------------------------------------------------------------------


@pytest.mark.parametrize(("api_key", "version"), ALL_VERSIONS)
def test_subset_of_every_topic_is_the_same_bytes(api_key: int, version: int) -> None:
    body = encode_request_body(api_key, version, **request_fields(api_key, version))

    assert mutation_request_subset(api_key, version, body, [0, 1, 2]) == body


@pytest.mark.parametrize(("api_key", "version"), ALL_VERSIONS)
def test_subset_keeps_the_chosen_topics_in_the_given_order_and_every_other_field(
    api_key: int, version: int
) -> None:
    body = encode_request_body(api_key, version, **request_fields(api_key, version))

    subset = mutation_request_subset(api_key, version, body, [2, 0])

    assert subset == encode_request_body(api_key, version, **request_fields(api_key, version, order=(2, 0)))


def test_subset_keeps_tagged_fields_of_a_flexible_request() -> None:
    fields = request_fields(ApiKey.CREATE_TOPICS, 7)
    fields["topics"][1]["_5"] = b"per-topic"
    body = encode_request_body(ApiKey.CREATE_TOPICS, 7, _3=b"top-level", **fields)

    subset = decode_request_body(
        ApiKey.CREATE_TOPICS, 7, mutation_request_subset(ApiKey.CREATE_TOPICS, 7, body, [1])
    )

    assert subset.unknown_tags == {"_3": b"top-level"}
    assert subset.topics[0].unknown_tags == {"_5": b"per-topic"}
    assert (subset.timeout_ms, subset.validate_only) == (30000, True)


def test_subset_of_no_topics_is_an_empty_request() -> None:
    body = encode_request_body(ApiKey.DELETE_TOPICS, 6, **request_fields(ApiKey.DELETE_TOPICS, 6))

    assert (
        decode_mutation_request(
            ApiKey.DELETE_TOPICS, 6, mutation_request_subset(ApiKey.DELETE_TOPICS, 6, body, [])
        ).topics
        == []
    )


def test_subset_with_an_index_outside_the_request_is_a_value_error() -> None:
    body = encode_request_body(ApiKey.CREATE_PARTITIONS, 3, **request_fields(ApiKey.CREATE_PARTITIONS, 3))

    with pytest.raises(ValueError, match="do not fit"):
        mutation_request_subset(ApiKey.CREATE_PARTITIONS, 3, body, [0, 3])


# -- merge_mutation_response -----------------------------------------------------------------------


def decoded_request(api_key: int, version: int) -> MutationRequest:
    return decode_mutation_request(
        api_key, version, encode_request_body(api_key, version, **request_fields(api_key, version))
    )


@pytest.mark.parametrize(("api_key", "version"), ALL_VERSIONS)
def test_merge_of_a_fully_forwarded_request_is_the_brokers_answer(api_key: int, version: int) -> None:
    request = decoded_request(api_key, version)
    results = [result(api_key, version, name, 0) for name in "abc"]
    if (api_key, version) == (ApiKey.DELETE_TOPICS, 6):
        results[1]["topic_id"] = ID_B  # Kafka answers an id-only delete with the name and the id
    answer = broker_body(api_key, version, results, throttle_ms=250)

    merged = merge_mutation_response(api_key, version, request, answer, [0, 1, 2], [], 0)

    assert merged == answer


@pytest.mark.parametrize(("api_key", "version"), ALL_VERSIONS)
def test_merge_puts_refusals_in_the_middle_back_in_client_order(api_key: int, version: int) -> None:
    request = decoded_request(api_key, version)
    broker_results = [result(api_key, version, "c", 36), result(api_key, version, "a", 0)]  # not in order

    merged = merge_mutation_response(
        api_key, version, request, broker_body(api_key, version, broker_results), [0, 2], [1], 0
    )

    results = results_of(api_key, version, merged)
    refused_name = None if (api_key, version) == (ApiKey.DELETE_TOPICS, 6) else "b"
    assert [(r.name, r.error_code) for r in results] == [
        ("a", 0),
        (refused_name, THROTTLING_QUOTA_EXCEEDED),
        ("c", 36),
    ]


@pytest.mark.parametrize(("api_key", "version"), ALL_VERSIONS)
def test_refusals_carry_89_and_the_message_where_the_version_has_one(api_key: int, version: int) -> None:
    request = decoded_request(api_key, version)

    merged = merge_mutation_response(api_key, version, request, None, [], [0, 1, 2], 0)

    refusal = {"error_code": THROTTLING_QUOTA_EXCEEDED, "error_message": QUOTA_EXCEEDED_MESSAGE}
    names = ["a", None, "c"] if (api_key, version) == (ApiKey.DELETE_TOPICS, 6) else ["a", "b", "c"]
    expected = [{"name": name} | refusal for name in names]
    if (api_key, version) == (ApiKey.DELETE_TOPICS, 6):
        expected[1]["topic_id"] = ID_B
    assert merged == broker_body(api_key, version, expected)  # a field the version lacks is not encoded
    if version >= MESSAGE_FROM[api_key]:
        messages = [r.error_message for r in results_of(api_key, version, merged)]
        assert messages == [QUOTA_EXCEEDED_MESSAGE] * 3


@pytest.mark.parametrize("version", [5, 6, 7])
def test_a_refused_create_topic_has_the_fields_kafka_leaves_on_an_errored_topic(version: int) -> None:
    request = decoded_request(ApiKey.CREATE_TOPICS, version)

    merged = merge_mutation_response(ApiKey.CREATE_TOPICS, version, request, None, [], [0, 1, 2], 0)

    refused = results_of(ApiKey.CREATE_TOPICS, version, merged)[0]
    assert (refused.num_partitions, refused.replication_factor, refused.configs) == (-1, -1, [])
    assert refused.topic_id is None  # all zeros on the wire (v7)
    assert refused.topic_config_error_code == 0


def test_a_refused_id_only_delete_answers_with_its_topic_id_and_no_name() -> None:
    request = decoded_request(ApiKey.DELETE_TOPICS, 6)

    merged = merge_mutation_response(ApiKey.DELETE_TOPICS, 6, request, None, [], [0, 1, 2], 0)

    refused = results_of(ApiKey.DELETE_TOPICS, 6, merged)[1]
    assert (refused.name, refused.topic_id, refused.error_code) == (None, ID_B, THROTTLING_QUOTA_EXCEEDED)


def test_an_id_only_delete_takes_the_brokers_result_for_that_id() -> None:
    request = decoded_request(ApiKey.DELETE_TOPICS, 6)
    other_id = uuid.UUID(int=7)
    answer = broker_body(
        ApiKey.DELETE_TOPICS,
        6,
        [
            {"name": "b", "topic_id": ID_B, "error_code": 41, "error_message": "not the controller"},
            {"name": "a", "topic_id": other_id, "error_code": 0},
        ],
    )

    merged = merge_mutation_response(ApiKey.DELETE_TOPICS, 6, request, answer, [1, 0], [2], 0)

    results = results_of(ApiKey.DELETE_TOPICS, 6, merged)
    assert [(r.name, r.topic_id, r.error_code) for r in results] == [
        ("a", other_id, 0),
        ("b", ID_B, 41),
        ("c", None, THROTTLING_QUOTA_EXCEEDED),
    ]


@pytest.mark.parametrize(("api_key", "version"), ALL_VERSIONS)
def test_a_forwarded_topic_the_broker_did_not_answer_gets_unknown_server_error(
    api_key: int, version: int
) -> None:
    request = decoded_request(api_key, version)
    answer = broker_body(api_key, version, [result(api_key, version, "a", 0)])

    merged = merge_mutation_response(api_key, version, request, answer, [0, 2], [1], 0)

    missing = results_of(api_key, version, merged)[2]
    assert (missing.name, missing.error_code) == ("c", UNKNOWN_SERVER_ERROR)
    if version >= MESSAGE_FROM[api_key]:
        assert missing.error_message == MISSING_RESULT_MESSAGE


@pytest.mark.parametrize(("api_key", "version"), ALL_VERSIONS)
@pytest.mark.parametrize(("brokers", "ours", "expected"), [(300, 100, 300), (300, 5000, 5000), (0, 0, 0)])
def test_throttle_time_is_the_larger_of_the_brokers_and_ours(
    api_key: int, version: int, brokers: int, ours: int, expected: int
) -> None:
    request = decoded_request(api_key, version)
    answer = broker_body(api_key, version, [result(api_key, version, "a", 0)], throttle_ms=brokers)

    merged = merge_mutation_response(api_key, version, request, answer, [0], [1, 2], ours)

    has_field = version >= THROTTLE_FROM[api_key]
    assert read_throttle_ms(api_key, version, merged) == (expected if has_field else None)


@pytest.mark.parametrize(
    ("api_key", "version"),
    [(ApiKey.CREATE_TOPICS, 7), (ApiKey.DELETE_TOPICS, 6), (ApiKey.CREATE_PARTITIONS, 3)],
)
def test_an_answer_sluice_gives_alone_carries_our_throttle(api_key: int, version: int) -> None:
    request = decoded_request(api_key, version)

    merged = merge_mutation_response(api_key, version, request, None, [], [0, 1, 2], 12000)

    assert read_throttle_ms(api_key, version, merged) == 12000


def test_throttle_beyond_int32_saturates() -> None:
    request = decoded_request(ApiKey.CREATE_PARTITIONS, 3)

    merged = merge_mutation_response(ApiKey.CREATE_PARTITIONS, 3, request, None, [], [0, 1, 2], 1 << 40)

    assert read_throttle_ms(ApiKey.CREATE_PARTITIONS, 3, merged) == 2**31 - 1


def test_merge_keeps_the_brokers_tagged_fields() -> None:
    request = decoded_request(ApiKey.CREATE_TOPICS, 7)
    answer = encode_response_body(
        ApiKey.CREATE_TOPICS,
        7,
        throttle_time_ms=0,
        topics=[result(ApiKey.CREATE_TOPICS, 7, "a", 0) | {"_9": b"t"}],
        _4=b"top",
    )

    merged = decode_response_body(
        ApiKey.CREATE_TOPICS,
        7,
        merge_mutation_response(ApiKey.CREATE_TOPICS, 7, request, answer, [0], [1, 2], 0),
    )

    assert merged.unknown_tags == {"_4": b"top"}
    assert merged.topics[0].unknown_tags == {"_9": b"t"}


@pytest.mark.parametrize(
    ("forwarded", "refused"), [([0, 1], [1, 2]), ([0], [1]), ([0, 1, 2, 3], []), ([0, 0, 1], [2])]
)
def test_merge_needs_every_topic_exactly_once(forwarded: list[int], refused: list[int]) -> None:
    request = decoded_request(ApiKey.CREATE_TOPICS, 7)

    with pytest.raises(ValueError, match="must split"):
        merge_mutation_response(ApiKey.CREATE_TOPICS, 7, request, None, forwarded, refused, 0)


def test_merge_refuses_a_request_of_another_api_or_version() -> None:
    request = decoded_request(ApiKey.CREATE_TOPICS, 6)

    with pytest.raises(ValueError, match="not api 19 v7"):
        merge_mutation_response(ApiKey.CREATE_TOPICS, 7, request, None, [], [0, 1, 2], 0)


def test_merge_of_a_malformed_broker_answer_is_a_protocol_error() -> None:
    request = decoded_request(ApiKey.DELETE_TOPICS, 5)
    answer = broker_body(ApiKey.DELETE_TOPICS, 5, [result(ApiKey.DELETE_TOPICS, 5, "a", 0)])

    with pytest.raises(ProtocolError):
        merge_mutation_response(ApiKey.DELETE_TOPICS, 5, request, answer[:-2], [0], [1, 2], 0)


# -- result_errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("api_key", "version"), ALL_VERSIONS)
def test_result_errors_by_name(api_key: int, version: int) -> None:
    answer = broker_body(
        api_key, version, [result(api_key, version, "a", 0), result(api_key, version, "c", 37)]
    )

    assert result_errors(api_key, version, answer) == {"a": 0, "c": 37}


def test_result_errors_lists_delete_results_under_name_and_topic_id() -> None:
    unknown = uuid.UUID(int=99)
    answer = broker_body(
        ApiKey.DELETE_TOPICS,
        6,
        [
            {"name": "b", "topic_id": ID_B, "error_code": 0},
            {"name": None, "topic_id": unknown, "error_code": 100},
        ],
    )

    assert result_errors(ApiKey.DELETE_TOPICS, 6, answer) == {"b": 0, ID_B.bytes: 0, unknown.bytes: 100}


def test_result_errors_of_a_malformed_answer_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        result_errors(ApiKey.CREATE_TOPICS, 7, b"\x00\x00\x00\x00\x05")
