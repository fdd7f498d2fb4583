"""DescribeClientQuotas (48) and AlterClientQuotas (49), read and written sans-IO (spec §7.4, §7.5).

Both APIs have versions 0-1 in Kafka 3.9 (and 4.x); v1 is the flexible encoding of the same fields.
Every function takes or returns a body: the bytes after the Kafka request or response header. The proxy
reads requests and writes responses; the `sluice quotas import` tool and the test doubles go the other
way, so both directions are here. Malformed bodies and unknown versions raise ProtocolError.

An entity travels as a list of (entity_type, entity_name) pairs; a null name is the default entity. The
pairs are kept as they came, in their order and with duplicates, because validating them is the
answerer's job (Kafka reports a type given twice, an empty name, ... per entity).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from kafka.protocol.admin.client_quotas import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from kafka.protocol.api_message import ApiMessage

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.apis import FLEXIBLE_FROM
from sluice.protocol.codec_quirks import decode_body, encode_body
from sluice.protocol.errors import ProtocolError
from sluice.protocol.primitives import encode_uvarint

DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = ApiKey.DESCRIBE_CLIENT_QUOTAS, ApiKey.ALTER_CLIENT_QUOTAS
MIN_VERSION, MAX_VERSION = 0, 1

# Both APIs turned flexible at the same version.
_FLEXIBLE_FROM = FLEXIBLE_FROM[ApiKey.DESCRIBE_CLIENT_QUOTAS]
_INT16, _INT32, _DOUBLE = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">d")

# DescribeClientQuotasRequest's match types (their values must not change, says Kafka).
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

# (entity_type, entity_name); a None name is the default entity.
EntityPart = tuple[str, str | None]
Entity = tuple[EntityPart, ...]


class FilterComponent(NamedTuple):
    entity_type: str
    match_type: int
    match: str | None


class DescribeRequest(NamedTuple):
    components: tuple[FilterComponent, ...]
    strict: bool


class DescribedEntity(NamedTuple):
    entity: Entity
    values: tuple[tuple[str, float], ...]  # (quota key, value)


class DescribeResponse(NamedTuple):
    throttle_time_ms: int
    error_code: int
    error_message: str | None
    entries: tuple[DescribedEntity, ...] | None  # None with a top-level error


class QuotaOp(NamedTuple):
    key: str
    value: float  # ignored when remove is set
    remove: bool


class AlterEntry(NamedTuple):
    entity: Entity
    ops: tuple[QuotaOp, ...]


class AlterRequest(NamedTuple):
    entries: tuple[AlterEntry, ...]
    validate_only: bool


class AlterResult(NamedTuple):
    error_code: int
    error_message: str | None
    entity: Entity


class AlterResponse(NamedTuple):
    throttle_time_ms: int
    results: tuple[AlterResult, ...]


# -- the proxy's side: requests in, responses out ------------------------------------------------------


def decode_describe_request(version: int, body: bytes | memoryview) -> DescribeRequest:
    message = decode_body(DescribeClientQuotasRequest, version, body)
    components = tuple(
        FilterComponent(c.entity_type, c.match_type, c.match) for c in message.components or ()
    )
    return DescribeRequest(components, bool(message.strict))


def encode_describe_response(
    version: int,
    entries: Iterable[DescribedEntity | bytes] | None,
    error_code: int = 0,
    error_message: str | None = None,
    throttle_time_ms: int = 0,
) -> bytes:
    """The answer; `entries` None (with an error) is Kafka's top-level failure (spec §7.4).

    An entry may be given already encoded (`encode_described_entity` at the same version), so an
    answerer can keep the bytes of entities that have not changed. Written by hand rather than through
    kafka-python's objects: a describe of every quota of a large store (10,000 entities) must answer in
    milliseconds, and building 50,000 message objects took a quarter of a second.
    tests/protocol/test_client_quotas_codec.py checks it byte for byte against kafka-python's encoding.
    """
    _check_version(DescribeClientQuotasResponse, version)
    flexible = version >= _FLEXIBLE_FROM
    string = _compact_string if flexible else _string
    out = [_INT32.pack(throttle_time_ms), _INT16.pack(error_code), string(error_message)]
    if entries is None:
        out.append(b"\x00" if flexible else _INT32.pack(-1))
    else:
        encoded = [e if isinstance(e, bytes) else encode_described_entity(version, e) for e in entries]
        out.append(_compact_count(len(encoded)) if flexible else _INT32.pack(len(encoded)))
        out += encoded
    if flexible:
        out.append(b"\x00")
    return b"".join(out)


def encode_described_entity(version: int, entry: DescribedEntity) -> bytes:
    """One entry of a DescribeClientQuotas answer, in that answer's version."""
    flexible = version >= _FLEXIBLE_FROM
    string = _compact_string if flexible else _string
    count = _compact_count if flexible else _INT32.pack
    tags = b"\x00" if flexible else b""
    entity, values = entry
    out = [count(len(entity))]
    for entity_type, entity_name in entity:
        out += (string(entity_type), string(entity_name), tags)
    out.append(count(len(values)))
    for key, value in values:
        out += (string(key), _DOUBLE.pack(value), tags)
    out.append(tags)
    return b"".join(out)


def decode_alter_request(version: int, body: bytes | memoryview) -> AlterRequest:
    message = decode_body(AlterClientQuotasRequest, version, body)
    entries = tuple(
        AlterEntry(
            _entity_pairs(entry.entity),
            tuple(QuotaOp(op.key, float(op.value), bool(op.remove)) for op in entry.ops or ()),
        )
        for entry in message.entries or ()
    )
    return AlterRequest(entries, bool(message.validate_only))


def encode_alter_response(version: int, results: Iterable[AlterResult], throttle_time_ms: int = 0) -> bytes:
    _check_version(AlterClientQuotasResponse, version)
    data = AlterClientQuotasResponse
    entry_class = data.EntryData
    message = data(
        version=version,
        throttle_time_ms=throttle_time_ms,
        entries=[
            entry_class(
                version=version,
                error_code=result.error_code,
                error_message=result.error_message,
                entity=_entity_data(entry_class.EntityData, version, result.entity),
            )
            for result in results
        ],
    )
    return encode_body(message, version)


# -- the other side: what an admin client sends, and what a broker answers -------------------------------


def encode_describe_request(version: int, components: Iterable[FilterComponent], strict: bool) -> bytes:
    _check_version(DescribeClientQuotasRequest, version)
    data = DescribeClientQuotasRequest
    message = data(
        version=version,
        components=[
            data.ComponentData(
                version=version, entity_type=c.entity_type, match_type=c.match_type, match=c.match
            )
            for c in components
        ],
        strict=strict,
    )
    return encode_body(message, version)


def decode_describe_response(version: int, body: bytes | memoryview) -> DescribeResponse:
    message = decode_body(DescribeClientQuotasResponse, version, body)
    entries = None
    if message.entries is not None:
        entries = tuple(
            DescribedEntity(
                _entity_pairs(entry.entity), tuple((v.key, float(v.value)) for v in entry.values or ())
            )
            for entry in message.entries
        )
    return DescribeResponse(message.throttle_time_ms, message.error_code, message.error_message, entries)


def encode_alter_request(version: int, entries: Iterable[AlterEntry], validate_only: bool) -> bytes:
    _check_version(AlterClientQuotasRequest, version)
    data = AlterClientQuotasRequest
    entry_class = data.EntryData
    message = data(
        version=version,
        entries=[
            entry_class(
                version=version,
                entity=_entity_data(entry_class.EntityData, version, entry.entity),
                ops=[
                    entry_class.OpData(version=version, key=op.key, value=float(op.value), remove=op.remove)
                    for op in entry.ops
                ],
            )
            for entry in entries
        ],
        validate_only=validate_only,
    )
    return encode_body(message, version)


def decode_alter_response(version: int, body: bytes | memoryview) -> AlterResponse:
    message = decode_body(AlterClientQuotasResponse, version, body)
    results = tuple(
        AlterResult(entry.error_code, entry.error_message, _entity_pairs(entry.entity))
        for entry in message.entries or ()
    )
    return AlterResponse(message.throttle_time_ms, results)


# -- helpers -------------------------------------------------------------------------------------------


def _check_version(message_class: type[ApiMessage], version: int) -> None:
    if not MIN_VERSION <= version <= message_class.max_version:
        raise ProtocolError("unsupported_version", f"{message_class.name} v{version}")


def _entity_pairs(entity: Sequence[Any] | None) -> Entity:
    return tuple((part.entity_type, part.entity_name) for part in entity or ())


def _entity_data(entity_class: Any, version: int, entity: Entity) -> list[Any]:
    return [entity_class(version=version, entity_type=kind, entity_name=name) for kind, name in entity]


def _string(text: str | None) -> bytes:
    if text is None:
        return b"\xff\xff"
    data = text.encode()
    return _INT16.pack(len(data)) + data


def _compact_string(text: str | None) -> bytes:
    if text is None:
        return b"\x00"
    data = text.encode()
    size = len(data) + 1
    return (_SMALL[size] if size < 128 else encode_uvarint(size)) + data


def _compact_count(count: int) -> bytes:
    return _SMALL[count + 1] if count < 127 else encode_uvarint(count + 1)


_SMALL = [bytes([n]) for n in range(128)]
