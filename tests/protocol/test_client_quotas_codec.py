"""protocol/client_quota_codec.py against kafka-python's own DescribeClientQuotas / AlterClientQuotas classes,
at every version Kafka 3.9 knows (0 and 1; v1 is flexible)."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.admin.client_quotas import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)

from sluice.protocol.client_quota_codec import (
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    AlterEntry,
    AlterResult,
    DescribedEntity,
    FilterComponent,
    QuotaOp,
    decode_alter_request,
    decode_alter_response,
    decode_describe_request,
    decode_describe_response,
    encode_alter_request,
    encode_alter_response,
    encode_describe_request,
    encode_describe_response,
)
from sluice.protocol.errors import ProtocolError

VERSIONS = (0, 1)
COMPONENTS = (
    FilterComponent("user", MATCH_EXACT, "alice smith"),
    FilterComponent("client-id", MATCH_DEFAULT, None),
    FilterComponent("ip", MATCH_SPECIFIED, None),
)
ENTITY = (("user", "alice"), ("client-id", None))


def kp_describe_request(version: int) -> bytes:
    component = DescribeClientQuotasRequest.ComponentData
    message = DescribeClientQuotasRequest(
        version=version,
        components=[
            component(version=version, entity_type=c.entity_type, match_type=c.match_type, match=c.match)
            for c in COMPONENTS
        ],
        strict=True,
    )
    return bytes(message.encode(version=version))


def kp_alter_request(version: int) -> bytes:
    entry = AlterClientQuotasRequest.EntryData
    part, op = entry.EntityData, entry.OpData
    message = AlterClientQuotasRequest(
        version=version,
        entries=[
            entry(
                version=version,
                entity=[
                    part(version=version, entity_type="user", entity_name="alice"),
                    part(version=version, entity_type="client-id", entity_name=None),
                ],
                ops=[
                    op(version=version, key="producer_byte_rate", value=1048576.0, remove=False),
                    op(version=version, key="consumer_byte_rate", value=0.0, remove=True),
                ],
            ),
            entry(
                version=version,
                entity=[part(version=version, entity_type="ip", entity_name="10.0.0.1")],
                ops=[],
            ),
        ],
        validate_only=True,
    )
    return bytes(message.encode(version=version))


@pytest.mark.parametrize("version", VERSIONS)
def test_describe_request_from_kafka_python_decodes(version: int) -> None:
    request = decode_describe_request(version, kp_describe_request(version))
    assert request.components == COMPONENTS
    assert request.strict is True


@pytest.mark.parametrize("version", VERSIONS)
def test_describe_request_encodes_byte_for_byte_like_kafka_python(version: int) -> None:
    assert encode_describe_request(version, COMPONENTS, True) == kp_describe_request(version)


@pytest.mark.parametrize("version", VERSIONS)
def test_describe_response_decodes_in_kafka_python(version: int) -> None:
    entries = [
        DescribedEntity(ENTITY, (("producer_byte_rate", 1048576.0), ("request_percentage", 12.34))),
        DescribedEntity((("ip", None),), (("connection_creation_rate", 5.0),)),
    ]
    body = encode_describe_response(version, entries, throttle_time_ms=7)
    message = DescribeClientQuotasResponse.decode(body, version=version)
    assert message.throttle_time_ms == 7
    assert message.error_code == 0
    assert message.error_message is None
    assert [[(e.entity_type, e.entity_name) for e in entry.entity] for entry in message.entries] == [
        list(ENTITY),
        [("ip", None)],
    ]
    assert [(v.key, v.value) for v in message.entries[0].values] == [
        ("producer_byte_rate", 1048576.0),
        ("request_percentage", 12.34),
    ]
    assert decode_describe_response(version, body).entries == tuple(entries)


@pytest.mark.parametrize("version", VERSIONS)
def test_describe_error_response_has_null_entries(version: int) -> None:
    body = encode_describe_response(version, None, 35, "Unsupported entity type group")
    message = DescribeClientQuotasResponse.decode(body, version=version)
    assert (message.error_code, message.error_message, message.entries) == (
        35,
        "Unsupported entity type group",
        None,
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_empty_describe_answer_is_an_empty_list_not_null(version: int) -> None:
    message = DescribeClientQuotasResponse.decode(encode_describe_response(version, []), version=version)
    assert message.entries == []


@pytest.mark.parametrize("version", VERSIONS)
def test_alter_request_from_kafka_python_decodes(version: int) -> None:
    request = decode_alter_request(version, kp_alter_request(version))
    assert request.validate_only is True
    assert request.entries == (
        AlterEntry(
            ENTITY,
            (QuotaOp("producer_byte_rate", 1048576.0, False), QuotaOp("consumer_byte_rate", 0.0, True)),
        ),
        AlterEntry((("ip", "10.0.0.1"),), ()),
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_alter_request_encodes_byte_for_byte_like_kafka_python(version: int) -> None:
    entries = decode_alter_request(version, kp_alter_request(version)).entries
    assert encode_alter_request(version, entries, True) == kp_alter_request(version)


@pytest.mark.parametrize("version", VERSIONS)
def test_alter_response_decodes_in_kafka_python(version: int) -> None:
    results = [
        AlterResult(0, None, ENTITY),
        AlterResult(42, "Quota producer_byte_rate must be greater than 0", (("client-id", "pump"),)),
    ]
    body = encode_alter_response(version, results, throttle_time_ms=3)
    message = AlterClientQuotasResponse.decode(body, version=version)
    assert message.throttle_time_ms == 3
    assert [(e.error_code, e.error_message) for e in message.entries] == [
        (0, None),
        (42, "Quota producer_byte_rate must be greater than 0"),
    ]
    assert [(e.entity_type, e.entity_name) for e in message.entries[1].entity] == [("client-id", "pump")]
    assert decode_alter_response(version, body).results == tuple(results)


@pytest.mark.parametrize("version", VERSIONS)
def test_duplicate_entity_types_are_kept_for_the_validator(version: int) -> None:
    body = encode_alter_request(
        version, [AlterEntry((("user", "a"), ("user", "b")), (QuotaOp("x", 1.0, False),))], False
    )
    assert decode_alter_request(version, body).entries[0].entity == (("user", "a"), ("user", "b"))


@pytest.mark.parametrize(
    "call",
    [
        lambda: encode_describe_response(2, []),
        lambda: encode_alter_response(2, []),
        lambda: encode_describe_request(2, [], False),
        lambda: encode_alter_request(2, [], False),
        lambda: decode_describe_request(2, b""),
        lambda: decode_alter_request(2, b""),
    ],
)
def test_versions_beyond_one_are_refused(call) -> None:
    with pytest.raises(ProtocolError):
        call()


@pytest.mark.parametrize("version", VERSIONS)
def test_truncated_and_trailing_bytes_are_protocol_errors(version: int) -> None:
    body = kp_alter_request(version)
    with pytest.raises(ProtocolError):
        decode_alter_request(version, body[:-3])
    with pytest.raises(ProtocolError):
        decode_alter_request(version, body + b"\x00")
    with pytest.raises(ProtocolError):
        decode_describe_request(version, kp_describe_request(version)[:5])


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80), st.sampled_from(VERSIONS))
def test_any_bytes_decode_or_raise_protocol_error(data: bytes, version: int) -> None:
    for decode in (decode_describe_request, decode_alter_request):
        with contextlib.suppress(ProtocolError):
            decode(version, data)


def kp_describe_response(
    version: int, entries: list[DescribedEntity] | None, code: int, message: str | None
) -> bytes:
    entry = DescribeClientQuotasResponse.EntryData
    message_object = DescribeClientQuotasResponse(
        version=version,
        throttle_time_ms=11,
        error_code=code,
        error_message=message,
        entries=None
        if entries is None
        else [
            entry(
                version=version,
                entity=[entry.EntityData(version=version, entity_type=t, entity_name=n) for t, n in e.entity],
                values=[entry.ValueData(version=version, key=k, value=v) for k, v in e.values],
            )
            for e in entries
        ],
    )
    return bytes(message_object.encode(version=version))


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=100, deadline=None)
@given(
    entries=st.one_of(
        st.none(),
        st.lists(
            st.builds(
                DescribedEntity,
                st.lists(
                    st.tuples(st.text(max_size=8), st.one_of(st.none(), st.text(max_size=200))), max_size=3
                ).map(tuple),
                st.lists(st.tuples(st.text(max_size=30), st.floats(allow_nan=False)), max_size=4).map(tuple),
            ),
            max_size=5,
        ),
    ),
    code=st.integers(-1, 100),
    message=st.one_of(st.none(), st.text(max_size=50)),
)
def test_hand_written_describe_answer_equals_kafka_python_byte_for_byte(
    version: int, entries: list[DescribedEntity] | None, code: int, message: str | None
) -> None:
    ours = encode_describe_response(version, entries, code, message, throttle_time_ms=11)
    assert ours == kp_describe_response(version, entries, code, message)
