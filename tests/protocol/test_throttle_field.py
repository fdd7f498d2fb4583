"""throttle_time_ms is found, read and patched in place for every API and version (spec section 5).

Bodies are built by kafka-python's codec (through protocol.codec_quirks.encode_body, which also writes
unknown tagged fields). kafka-python has no delegation-token schemas, so those four responses get
schemas written here from Kafka's message definitions and are encoded by kafka-python's generic
StructField; the walker in protocol/ is independent of them.
"""

from __future__ import annotations

import functools
import io
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.api_header import ResponseHeader as KafkaResponseHeader
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import ApiVersionsResponse
from kafka.protocol.producer import ProduceResponse
from kafka.protocol.schemas.fields.struct import StructField
from kafka_schemas import SHARED_MISSING
from schema_codec import encode, message_schema, sample

from sluice.protocol.apis import API_SPECS, ThrottlePosition
from sluice.protocol.codec_quirks import decode_body, encode_body
from sluice.protocol.errors import ProtocolError
from sluice.protocol.headers import frame, response_header_size
from sluice.protocol.primitives import INT32_MAX, INT32_PACK, INT32_UNPACK
from sluice.protocol.throttle_field import (
    THROTTLE_PATCHABLE_MAX_VERSIONS,
    patch_frame_throttle_ms,
    patch_throttle_ms,
    raise_frame_throttle_ms,
    raise_throttle_ms,
    read_throttle_ms,
    throttle_field_offset,
)

BROKER_THROTTLE = 12345
PATCHED = 777


def _import_all_codecs() -> None:
    import kafka.protocol.admin
    import kafka.protocol.consumer
    import kafka.protocol.metadata
    import kafka.protocol.producer
    import kafka.protocol.sasl  # noqa: F401


def _response_classes() -> dict[int, type[ApiMessage]]:
    _import_all_codecs()
    classes: dict[int, type[ApiMessage]] = {}
    pending = list(ApiMessage.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        schema = getattr(cls, "_json", None)
        if getattr(cls, "_class_version", None) is not None or schema is None:
            continue
        if schema["type"] == "response" and schema["apiKey"] in API_SPECS:
            classes[schema["apiKey"]] = cls
    return classes


RESPONSES = _response_classes()
CODEC_CASES = [(key, v) for key, cls in sorted(RESPONSES.items()) for v in range(cls.max_version + 1)]


# --- realistic messages ---------------------------------------------------------------------------

Topic = ProduceResponse.TopicProduceResponse
Partition = Topic.PartitionProduceResponse
RecordError = Partition.BatchIndexAndErrorMessage


def _produce(version: int, throttle_ms: int = BROKER_THROTTLE, unknown_tags: bool = True) -> Any:
    flexible = version >= 9
    extra = {"_7": b"future"} if flexible and unknown_tags else {}
    topics = []
    for t, name in enumerate(("orders", "payments-éü", "x" * 130)):  # a >127-byte name: 2-byte varint
        partitions = []
        for p in range(4):
            fields: dict[str, Any] = {
                "index": p,
                "error_code": 0 if p % 2 == 0 else 6,
                "base_offset": 1_000_000 * t + p,
                "log_append_time_ms": 1_700_000_000_000 + p,
                "log_start_offset": 17 + p,
                "record_errors": [
                    RecordError(
                        batch_index=i, batch_index_error_message=None if i == 0 else f"bad record {i}"
                    )
                    for i in range(p)
                ],
                "error_message": None if p % 2 == 0 else "NOT_LEADER_OR_FOLLOWER",
            }
            if version >= 10 and p % 2 == 1:
                fields["current_leader"] = Partition.LeaderIdAndEpoch(leader_id=2, leader_epoch=9)
            partitions.append(Partition(**fields, **extra))
        identity = {"topic_id": uuid.UUID(int=t + 1)} if version >= 13 else {"name": name}
        topics.append(Topic(**identity, partition_responses=partitions, **extra))
    message = ProduceResponse(version=version, responses=topics, throttle_time_ms=throttle_ms, **extra)
    if version >= 10:
        message.node_endpoints = [
            ProduceResponse.NodeEndpoint(node_id=2, host="kafka-2.internal", port=9092, rack="eu-1b")
        ]
        message.tags = {"node_endpoints"}
    return message


def _api_versions(version: int, throttle_ms: int = BROKER_THROTTLE, error_code: int = 0) -> Any:
    entry = ApiVersionsResponse.ApiVersion
    extra = {"_9": b"\x01\x02\x03"} if version >= 3 else {}
    keys = [
        entry(api_key=key, min_version=0, max_version=spec.max_version) for key, spec in API_SPECS.items()
    ]
    message = ApiVersionsResponse(
        version=version, error_code=error_code, api_keys=keys, throttle_time_ms=throttle_ms, **extra
    )
    if version >= 3:
        message.supported_features = [
            ApiVersionsResponse.SupportedFeatureKey(name="metadata.version", min_version=1, max_version=21)
        ]
        message.finalized_features_epoch = 42
        message.finalized_features = [
            ApiVersionsResponse.FinalizedFeatureKey(
                name="metadata.version", max_version_level=21, min_version_level=21
            )
        ]
        message.zk_migration_ready = True
        message.tags = {
            "supported_features",
            "finalized_features_epoch",
            "finalized_features",
            "zk_migration_ready",
        }
    return message


def _build(key: int, version: int, throttle_ms: int = BROKER_THROTTLE) -> bytes:
    if key == 0:
        return encode_body(_produce(version, throttle_ms), version)
    if key == 18:
        return encode_body(_api_versions(version, throttle_ms), version)
    cls = RESPONSES[key]
    if API_SPECS[key].has_throttle_field(version):
        return encode_body(cls(version=version, throttle_time_ms=throttle_ms), version)
    return encode_body(cls(version=version), version)


def _only_field_changed(before: bytes, after: bytes | bytearray, offset: int) -> None:
    assert len(after) == len(before)
    assert after[:offset] == before[:offset]
    assert after[offset + 4 :] == before[offset + 4 :]


# --- every API and version kafka-python has a schema for -----------------------------------------


def test_kafka_python_covers_the_apis_that_matter() -> None:
    assert {0, 1, 3, 18, 47} <= set(RESPONSES)


@pytest.mark.parametrize(("key", "version"), CODEC_CASES)
def test_read_and_patch_every_codec_response(key: int, version: int) -> None:
    cls = RESPONSES[key]
    body = _build(key, version)
    if not API_SPECS[key].has_throttle_field(version):
        assert throttle_field_offset(key, version, body) is None
        assert read_throttle_ms(key, version, body) is None
        untouched = bytearray(body)
        assert patch_throttle_ms(key, version, untouched, PATCHED) is False
        assert untouched == body
        return
    assert read_throttle_ms(key, version, body) == BROKER_THROTTLE
    offset = throttle_field_offset(key, version, body)
    assert offset is not None
    patched = bytearray(body)
    assert patch_throttle_ms(key, version, patched, PATCHED) is True
    _only_field_changed(body, patched, offset)
    assert read_throttle_ms(key, version, patched) == PATCHED
    expected = decode_body(cls, version, body)
    decoded = decode_body(cls, version, patched)
    assert decoded.throttle_time_ms == PATCHED
    expected.throttle_time_ms = PATCHED
    assert decoded == expected
    assert encode_body(decoded, version) == bytes(patched)  # unknown tags and all survive


@pytest.mark.parametrize("version", range(1, 14))
def test_produce_offset_is_right_after_the_responses_array(version: int) -> None:
    message = _produce(version)
    body = encode_body(message, version)
    # The same message with 4 bytes' worth of different throttle: only those bytes differ.
    other = encode_body(_produce(version, throttle_ms=0x01020304), version)
    offset = throttle_field_offset(0, version, body)
    assert offset is not None
    differing = [i for i in range(len(body)) if body[i] != other[i]]
    assert differing and min(differing) >= offset and max(differing) < offset + 4
    assert INT32_UNPACK(other, offset)[0] == 0x01020304


def test_produce_realistic_bodies_really_carry_what_they_should() -> None:
    decoded = decode_body(ProduceResponse, 12, encode_body(_produce(12), 12))
    partition = decoded.responses[1].partition_responses[3]
    assert [e.batch_index for e in partition.record_errors] == [0, 1, 2]
    assert partition.current_leader.leader_epoch == 9
    assert decoded.node_endpoints[0].host == "kafka-2.internal"
    assert decoded.unknown_tags == {"_7": b"future"}


@pytest.mark.parametrize("version", [9, 10, 13])
def test_produce_with_multi_byte_varints(version: int) -> None:
    # More than 126 partitions and record errors, and messages over 127 bytes: two-byte varints everywhere.
    errors = [RecordError(batch_index=i, batch_index_error_message="e" * 200) for i in range(130)]
    partitions = [
        Partition(
            index=p,
            error_code=0,
            base_offset=p,
            record_errors=errors if p == 0 else [],
            error_message="m" * 300,
        )
        for p in range(200)
    ]
    identity = {"topic_id": uuid.UUID(int=1)} if version >= 13 else {"name": "t" * 200}
    topics = [Topic(**identity, partition_responses=partitions[: 200 if t == 0 else 1]) for t in range(130)]
    message = ProduceResponse(version=version, responses=topics, throttle_time_ms=BROKER_THROTTLE)
    body = encode_body(message, version)
    assert read_throttle_ms(0, version, body) == BROKER_THROTTLE
    patched = bytearray(body)
    assert patch_throttle_ms(0, version, patched, PATCHED)
    assert decode_body(ProduceResponse, version, patched).throttle_time_ms == PATCHED


@pytest.mark.parametrize("version", [8, 9, 12, 13])
def test_produce_with_no_topics(version: int) -> None:
    body = encode_body(ProduceResponse(version=version, responses=[], throttle_time_ms=5), version)
    assert read_throttle_ms(0, version, body) == 5


def test_produce_v0_has_no_field() -> None:
    body = encode_body(_produce(0), 0)
    assert throttle_field_offset(0, 0, body) is None


@pytest.mark.parametrize("version", range(5))
def test_api_versions_with_an_error_other_than_unsupported_version_keeps_its_version(version: int) -> None:
    body = encode_body(_api_versions(version, error_code=42), version)
    expected = BROKER_THROTTLE if version >= 1 else None
    assert read_throttle_ms(18, version, body) == expected


@pytest.mark.parametrize("request_version", [1, 3, 4, 5, 9])
def test_api_versions_unsupported_version_answer_is_v0_and_has_no_field(request_version: int) -> None:
    # Kafka answers a too-new ApiVersions request in v0 format (codec quirk Q5): no throttle field.
    body = encode_body(_api_versions(0, error_code=35), 0)
    assert throttle_field_offset(18, request_version, body) is None
    untouched = bytearray(body)
    assert patch_throttle_ms(18, request_version, untouched, PATCHED) is False
    assert untouched == body


# --- delegation tokens: kafka-python has no schema, so the tests bring one ------------------------

_STR = "string"


def _field(name: str, kind: str, versions: str = "0+", **more: Any) -> dict[str, Any]:
    return {"name": name, "type": kind, "versions": versions, **more}


_PRINCIPALS = [
    _field("PrincipalType", _STR),
    _field("PrincipalName", _STR),
    _field("TokenRequesterPrincipalType", _STR, "3+"),
    _field("TokenRequesterPrincipalName", _STR, "3+"),
]
_THROTTLE = _field("ThrottleTimeMs", "int32")
_TIMESTAMPS_AND_TOKEN = [
    _field("IssueTimestampMs", "int64"),
    _field("ExpiryTimestampMs", "int64"),
    _field("MaxTimestampMs", "int64"),
    _field("TokenId", _STR),
    _field("Hmac", "bytes"),
]
_RENEWERS = _field(
    "Renewers",
    "[]DescribedDelegationTokenRenewer",
    fields=[_field("PrincipalType", _STR), _field("PrincipalName", _STR)],
)
_ERROR = _field("ErrorCode", "int16")
_EXPIRY = _field("ExpiryTimestampMs", "int64")
# key -> (max version, fields), after Kafka's *DelegationTokenResponse.json (flexible from v2). Field names
# only matter to this dict encoder; Describe's timestamps lack the Ms suffix in Kafka, same wire format.
_TOKEN_SCHEMAS: dict[int, tuple[int, list[dict[str, Any]]]] = {
    38: (3, [_ERROR, *_PRINCIPALS, *_TIMESTAMPS_AND_TOKEN, _THROTTLE]),
    39: (2, [_ERROR, _EXPIRY, _THROTTLE]),
    40: (2, [_ERROR, _EXPIRY, _THROTTLE]),
    41: (
        3,
        [
            _ERROR,
            _field(
                "Tokens",
                "[]DescribedDelegationToken",
                fields=[*_PRINCIPALS, *_TIMESTAMPS_AND_TOKEN, _RENEWERS],
            ),
            _THROTTLE,
        ],
    ),
}
TOKEN_CASES = [
    (key, v) for key, (max_version, _) in sorted(_TOKEN_SCHEMAS.items()) for v in range(max_version + 1)
]


@functools.cache
def _token_struct(key: int) -> StructField:
    max_version, fields = _TOKEN_SCHEMAS[key]
    schema = {
        "name": API_SPECS[key].name + "Response",
        "type": "response",
        "validVersions": f"0-{max_version}",
        "flexibleVersions": "2+",
        "fields": fields,
    }
    return StructField(schema)


def _principal(requester: str) -> dict[str, str]:
    return {
        "principal_type": "User",
        "principal_name": "alice",
        "token_requester_principal_type": "User",
        "token_requester_principal_name": requester,
    }


def _token_item(key: int, throttle_ms: int) -> dict[str, Any]:
    timestamps = {"issue_timestamp_ms": 1, "expiry_timestamp_ms": 2, "max_timestamp_ms": 3}
    if key == 38:
        return {
            "error_code": 0,
            **_principal("admin"),
            **timestamps,
            "token_id": "tok-1",
            "hmac": bytes(range(200)),
            "throttle_time_ms": throttle_ms,
        }
    if key in (39, 40):
        return {"error_code": 0, "expiry_timestamp_ms": 1_700_000_000_000, "throttle_time_ms": throttle_ms}
    tokens = [
        {
            **_principal(f"req-{i}"),
            "issue_timestamp_ms": i,
            "expiry_timestamp_ms": i + 1,
            "max_timestamp_ms": i + 2,
            "token_id": f"token-{i}",
            "hmac": b"\xaa" * (i * 70),
            "renewers": [{"principal_type": "User", "principal_name": f"r{j}"} for j in range(i)],
        }
        for i in range(3)
    ]
    return {"error_code": 0, "tokens": tokens, "throttle_time_ms": throttle_ms}


def _token_encode(key: int, version: int, item: dict[str, Any]) -> bytes:
    flexible = version >= 2
    return _token_struct(key).encode(item, version=version, compact=flexible, tagged=flexible)


def _token_decode(key: int, version: int, body: bytes | bytearray) -> dict[str, Any]:
    flexible = version >= 2
    data = io.BytesIO(bytes(body))
    decoded = _token_struct(key).decode(data, version=version, compact=flexible, tagged=flexible)
    assert data.read() == b""
    return decoded


@pytest.mark.parametrize(("key", "version"), TOKEN_CASES)
def test_delegation_token_field_is_last(key: int, version: int) -> None:
    assert API_SPECS[key].throttle_position is ThrottlePosition.LAST
    body = _token_encode(key, version, _token_item(key, BROKER_THROTTLE))
    assert read_throttle_ms(key, version, body) == BROKER_THROTTLE
    offset = throttle_field_offset(key, version, body)
    assert offset == len(body) - (5 if version >= 2 else 4)
    patched = bytearray(body)
    assert patch_throttle_ms(key, version, patched, PATCHED)
    _only_field_changed(body, patched, offset)
    expected = _token_decode(key, version, body)
    expected["throttle_time_ms"] = PATCHED
    assert _token_decode(key, version, patched) == expected


@pytest.mark.parametrize(("key", "version"), [(38, 3), (41, 1), (41, 3)])
def test_delegation_token_walk_rejects_every_truncation(key: int, version: int) -> None:
    body = _token_encode(key, version, _token_item(key, BROKER_THROTTLE))
    for end in range(len(body)):
        with pytest.raises(ProtocolError) as info:
            throttle_field_offset(key, version, body[:end])
        assert info.value.reason == "bad_response_body"


def test_describe_delegation_token_with_no_tokens() -> None:
    body = _token_encode(41, 2, {"error_code": 65, "tokens": [], "throttle_time_ms": 9})
    assert read_throttle_ms(41, 2, body) == 9


# --- APIs kafka-python has no schema for, with the field first ------------------------------------

NO_SCHEMA_FIRST = sorted(
    key
    for key, spec in API_SPECS.items()
    if key not in RESPONSES and key not in _TOKEN_SCHEMAS and spec.throttle_field_from is not None
)


def test_every_throttled_api_without_a_kafka_python_schema_has_the_field_first() -> None:
    assert NO_SCHEMA_FIRST  # 56, 59, 62-64, 67-73, 76-82 in kafka-python 3.0.12
    assert all(API_SPECS[key].throttle_position is ThrottlePosition.FIRST for key in NO_SCHEMA_FIRST)


@given(key=st.sampled_from(NO_SCHEMA_FIRST), tail=st.binary(max_size=64), data=st.data())
def test_first_position_apis_without_a_schema(key: int, tail: bytes, data: st.DataObject) -> None:
    version = data.draw(st.integers(0, API_SPECS[key].max_version))
    body = bytearray(INT32_PACK(BROKER_THROTTLE) + tail)
    assert read_throttle_ms(key, version, body) == BROKER_THROTTLE
    assert patch_throttle_ms(key, version, body, PATCHED)
    assert body == INT32_PACK(PATCHED) + tail


# --- positions, limits and truncation ---------------------------------------------------------------


def test_fixed_positions() -> None:
    assert throttle_field_offset(1, 12, bytes(20)) == 0
    assert throttle_field_offset(47, 0, bytes(20)) == 2  # OffsetDelete: after its ErrorCode
    assert throttle_field_offset(1, 0, bytes(20)) is None  # Fetch v0 predates the field
    assert throttle_field_offset(36, 2, bytes(20)) is None  # SaslAuthenticate never has one
    assert throttle_field_offset(999, 0, bytes(20)) is None  # unknown API


def test_first_position_holds_for_versions_newer_than_the_table() -> None:
    # Kafka never moves a leading field; a Fetch v19 answer still starts with throttle_time_ms.
    assert throttle_field_offset(1, API_SPECS[1].max_version + 1, bytes(8)) == 0


@pytest.mark.parametrize("key", sorted(THROTTLE_PATCHABLE_MAX_VERSIONS))
def test_walked_apis_refuse_versions_above_the_table(key: int) -> None:
    version = THROTTLE_PATCHABLE_MAX_VERSIONS[key] + 1
    with pytest.raises(ProtocolError) as info:
        throttle_field_offset(key, version, bytes(64))
    assert info.value.reason == "unsupported_version"


def test_patchable_max_versions_cover_the_walked_apis() -> None:
    assert THROTTLE_PATCHABLE_MAX_VERSIONS == {0: 13, 18: 5, 38: 3, 39: 2, 40: 2, 41: 3}


def _walked_versions() -> list[tuple[int, int]]:
    cases = []
    for key, newest in sorted(THROTTLE_PATCHABLE_MAX_VERSIONS.items()):
        first = API_SPECS[key].throttle_field_from
        assert first is not None
        cases += [(key, version) for version in range(first, newest + 1)]
    return cases


@pytest.mark.parametrize(("key", "version"), _walked_versions())
def test_every_walk_finds_the_field_where_kafkas_own_schema_puts_it(key: int, version: int) -> None:
    """Every walked API at every version the table lets through, built from the schema of the newest source
    that defines it (Kafka's trunk for ApiVersions v5) by tests/schema_codec.py, which shares no code with
    protocol/: the walk reads back the value written there."""
    try:
        schema = message_schema(key, "response", version)
    except LookupError:
        pytest.skip(SHARED_MISSING or "no schema defines it")
    message = sample(schema, version)
    message.update(ThrottleTimeMs=0x5A5A5A5A, ErrorCode=0)
    assert read_throttle_ms(key, version, encode(schema, version, message)) == 0x5A5A5A5A


@pytest.mark.parametrize(("key", "version"), [(1, 12), (3, 9), (47, 0)])
def test_fixed_positions_reject_short_bodies(key: int, version: int) -> None:
    offset = throttle_field_offset(key, version, bytes(6))
    assert offset is not None
    with pytest.raises(ProtocolError) as info:
        throttle_field_offset(key, version, bytes(offset + 3))
    assert info.value.reason == "bad_response_body"


@pytest.mark.parametrize(("key", "version"), [(0, 9), (0, 10), (0, 13), (18, 1), (18, 3), (18, 4)])
def test_walks_reject_every_truncation(key: int, version: int) -> None:
    body = _build(key, version)
    for end in range(len(body)):
        with pytest.raises(ProtocolError) as info:
            throttle_field_offset(key, version, body[:end])
        assert info.value.reason == "bad_response_body"


@pytest.mark.parametrize(("key", "version"), [(0, 9), (18, 2), (18, 3), (41, 2)])
def test_walks_reject_trailing_bytes(key: int, version: int) -> None:
    body = _token_encode(key, version, _token_item(key, 1)) if key == 41 else _build(key, version)
    with pytest.raises(ProtocolError) as info:
        throttle_field_offset(key, version, body + b"\x00")
    assert info.value.reason == "bad_response_body"


def test_non_flexible_produce_takes_the_last_four_bytes_and_needs_four() -> None:
    assert throttle_field_offset(0, 8, bytes(4)) == 0
    with pytest.raises(ProtocolError):
        throttle_field_offset(0, 8, bytes(3))


# --- writing -----------------------------------------------------------------------------------------


def test_patch_saturates_at_int32_and_refuses_negative() -> None:
    body = bytearray(_build(1, 12))
    assert patch_throttle_ms(1, 12, body, 2**40)
    assert read_throttle_ms(1, 12, body) == INT32_MAX
    with pytest.raises(ValueError):
        patch_throttle_ms(1, 12, body, -1)


def test_patch_works_on_a_writable_memoryview() -> None:
    buffer = bytearray(b"\xee" * 3 + _build(0, 9))
    view = memoryview(buffer)[3:]
    assert patch_throttle_ms(0, 9, view, PATCHED)
    assert read_throttle_ms(0, 9, buffer[3:]) == PATCHED
    assert buffer[:3] == b"\xee" * 3


def test_raise_keeps_the_larger_value() -> None:
    body = bytearray(_build(0, 11, throttle_ms=500))
    before = bytes(body)
    assert raise_throttle_ms(0, 11, body, 200) == 500
    assert body == before  # nothing written when the broker's value already wins
    assert raise_throttle_ms(0, 11, body, 900) == 900
    assert read_throttle_ms(0, 11, body) == 900
    assert raise_throttle_ms(0, 0, bytearray(_build(0, 0)), 900) is None


def _response_frame(key: int, version: int, body: bytes, correlation_id: int = 77) -> bytearray:
    flexible = version >= (API_SPECS[key].flexible_from or 1 << 30) and key != 18
    header = KafkaResponseHeader(correlation_id=correlation_id).encode(flexible=flexible)
    return bytearray(frame(bytes(header) + body))


@pytest.mark.parametrize(("key", "version"), [(0, 7), (0, 12), (1, 11), (1, 16), (18, 3), (47, 0)])
def test_frame_variants(key: int, version: int) -> None:
    body = _build(key, version)
    whole = _response_frame(key, version, body)
    header_size = response_header_size(key, version, whole)
    assert patch_frame_throttle_ms(key, version, whole, header_size, PATCHED)
    assert read_throttle_ms(key, version, whole[4 + header_size :]) == PATCHED
    assert INT32_UNPACK(whole, 4)[0] == 77  # the correlation id is untouched
    assert raise_frame_throttle_ms(key, version, whole, header_size, 5) == PATCHED
    assert raise_frame_throttle_ms(key, version, whole, header_size, PATCHED + 1) == PATCHED + 1
    assert len(whole) == 4 + header_size + len(body)


# --- junk ---------------------------------------------------------------------------------------------

ALL_KEYS = sorted(API_SPECS)


@settings(max_examples=400)
@given(key=st.sampled_from([*ALL_KEYS, 999]), version=st.integers(-2, 20), body=st.binary(max_size=80))
def test_junk_raises_only_protocol_error(key: int, version: int, body: bytes) -> None:
    try:
        value = read_throttle_ms(key, version, body)
    except ProtocolError:
        return
    assert value is None or -(2**31) <= value <= INT32_MAX
    writable = bytearray(body)
    assert patch_throttle_ms(key, version, writable, PATCHED) is (value is not None)


@settings(max_examples=300)
@given(
    case=st.sampled_from([(0, 9), (0, 10), (0, 13), (18, 3), (18, 2)]),
    data=st.data(),
)
def test_mutated_walked_bodies_raise_only_protocol_error(case: tuple[int, int], data: st.DataObject) -> None:
    key, version = case
    body = bytearray(_build(key, version))
    for _ in range(data.draw(st.integers(1, 4))):
        body[data.draw(st.integers(0, len(body) - 1))] = data.draw(st.integers(0, 255))
    try:
        offset = throttle_field_offset(key, version, body)
    except ProtocolError as exc:
        assert exc.reason in ("bad_response_body", "unsupported_version")
        return
    assert offset is None or 0 <= offset <= len(body) - 4


@settings(max_examples=200)
@given(key=st.sampled_from(sorted(_TOKEN_SCHEMAS)), version=st.integers(0, 3), body=st.binary(max_size=120))
def test_delegation_token_junk_raises_only_protocol_error(key: int, version: int, body: bytes) -> None:
    try:
        offset = throttle_field_offset(key, version, body)
    except ProtocolError:
        return
    assert offset is not None and 0 <= offset <= len(body) - 4
