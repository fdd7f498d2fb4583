"""kafka-python 3.0.12 codec quirks, worked around in this one module.

Everything else in `protocol/` decodes and re-encodes responses through `decode_body` and
`encode_body` here, never through `ApiMessage.decode`/`encode` directly. The quirks, each with a
round-trip test in tests/protocol/test_codec_quirks.py:

Q1  A decoded message has no `_header` slot set, so `encode(version=...)` raises AttributeError.
Q2  Unknown tagged fields are decoded into `unknown_tags` but never written back on encode: a proxy
    re-encoding a newer broker's answer would silently drop them.
Q3  A known tagged field whose value equals its default is dropped on encode even when it was on the
    wire (e.g. ApiVersions FinalizedFeaturesEpoch = -1 sent explicitly).
Q4  Tagged fields are re-encoded in schema order, not the ascending tag order the protocol requires.
Q5  `ApiVersionsResponse.decode` reads every error response as v0. Kafka falls back to v0 only for
    UNSUPPORTED_VERSION (35, `RequestContext.apiVersion()`); other errors (INVALID_REQUEST for a bad
    client software name, v3+) come in the request's version.
Q6  Malformed input escapes as IndexError, struct.error, UnicodeDecodeError, ValueError or
    OverflowError, and trailing bytes after the message are silently ignored.
Q7  The authorized-operations int32 fields are renamed `authorized_operations` by a json_patch and
    decoded to a set of bit numbers; Integer.MIN_VALUE ("not requested") becomes None. Round-trips
    byte-exactly; nothing here needs to change, the test pins it.
Q8  An all-zero UUID decodes to None and encodes back to zeros. Round-trips; pinned by a test.
Q9  A null (length -1) array, string or bytes field decodes to None even where the schema does not allow
    null; code reading such a field then fails with TypeError far from the decoder. Kafka refuses these
    ("non-nullable field was serialized as null"), and so does `decode_body` (ProtocolError).

Q2-Q4 are fixed by `encode_body`, a small walker over kafka-python's own field objects that encodes
plain fields with kafka-python's codecs but writes every tagged-field block itself: fields that were
present on the wire (or differ from their default) and unknown tags, sorted by tag. Nothing in
kafka-python is patched, so in-process kafka-python clients keep their behaviour.
"""

from __future__ import annotations

import struct
from typing import Any

from kafka.errors import UnsupportedVersionError
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import ApiVersionsResponse
from kafka.protocol.schemas.fields.base import BaseField
from kafka.protocol.schemas.fields.codecs import Bytes, String
from kafka.protocol.schemas.fields.struct import StructField

from sluice.protocol.errors import ProtocolError
from sluice.protocol.primitives import INT32_PACK, Buffer, encode_uvarint, read_int16

UNSUPPORTED_VERSION = UnsupportedVersionError.errno
_CODEC_ERRORS = (
    AssertionError,
    IndexError,
    struct.error,
    UnicodeDecodeError,
    ValueError,
    OverflowError,
    TypeError,
    KeyError,
)


def decode_body(
    message_class: type[ApiMessage], version: int, body: Buffer, *, allow_trailing: bool = False
) -> Any:
    """Decode a whole response body (after the response header) with kafka-python's codec.

    Raises ProtocolError('bad_<message>') if the body is malformed or has trailing bytes (Q6), unless
    `allow_trailing`: for a reader that only looks at what it decoded, such as the names in a Metadata
    answer of librdkafka's mock cluster, whose flexible versions end with one byte more than the schema.
    ApiVersions error bodies are decoded in the version Kafka really used (Q5).
    """
    if not 0 <= version <= message_class.max_version:
        raise ProtocolError("unsupported_version", f"{message_class.name} v{version}")
    data = body if isinstance(body, memoryview) else memoryview(body)
    reason = "bad_" + _snake(message_class.name)
    if message_class is ApiVersionsResponse:
        version = api_versions_body_version(version, data)
    flexible = message_class.flexible_version_q(version)
    decoder = message_class._struct.compiled_decode_from(
        version, compact=flexible, tagged=flexible, data_class=message_class[None]
    )
    try:
        message, end = decoder(data, 0)
    except _CODEC_ERRORS as exc:
        raise ProtocolError(reason, f"v{version}: {type(exc).__name__}") from None
    if end != len(data) and not (allow_trailing and end < len(data)):
        raise ProtocolError(reason, f"v{version}: {len(data) - end} trailing bytes")
    _reject_nulls(message_class._struct, message, version, reason)  # Q9
    message._header = None  # Q1
    return message


# Per (struct, version): the untagged fields that may not be null, and what to look inside.
# (name, nullable, child struct or None, is an array (of structs, or of strings/bytes whose entries are
# checked))
_NullPlan = tuple[tuple[str, bool, StructField | None, bool], ...]
_null_plans: dict[tuple[int, int], _NullPlan] = {}


def _null_plan(struct_field: StructField, version: int) -> _NullPlan:
    key = (id(struct_field), version)
    plan = _null_plans.get(key)
    if plan is None:
        entries = []
        for field in struct_field.untagged_fields(version):
            nullable = field.nullable_for_version_q(version)
            if field.is_struct_array():
                entries.append((field.name, nullable, field.array_of, True))
            elif field.is_struct():
                entries.append((field.name, nullable, field, False))
            elif field.is_array():
                entries.append((field.name, nullable, None, _may_be_null(field.array_of)))
            elif _may_be_null(field) and not nullable:
                entries.append((field.name, False, None, False))
        plan = _null_plans[key] = tuple(entries)
    return plan


def _may_be_null(field: BaseField) -> bool:
    """A string or bytes field: the codec reads length -1 as None whatever the schema says."""
    kind = getattr(field, "_type", None)
    return isinstance(kind, String) or kind is Bytes


def _reject_nulls(struct_field: StructField, item: Any, version: int, reason: str) -> None:
    for name, nullable, child, is_array in _null_plan(struct_field, version):
        value = getattr(item, name)
        if value is None:
            if not nullable:
                raise ProtocolError(reason, f"v{version}: null {name}, which is not nullable")
        elif child is not None:
            if is_array:
                for element in value:
                    _reject_nulls(child, element, version, reason)
            else:
                _reject_nulls(child, value, version, reason)
        elif is_array and None in value:  # entries of a []string are never nullable in Kafka's schemas
            raise ProtocolError(reason, f"v{version}: null entry in {name}")


def api_versions_body_version(request_version: int, body: Buffer) -> int:
    """The version an ApiVersions response body is written in (Q5): v0 for UNSUPPORTED_VERSION."""
    try:
        error_code, _ = read_int16(body, 0)
    except ProtocolError:
        raise ProtocolError("bad_api_versions_response", "no error code") from None
    return 0 if error_code == UNSUPPORTED_VERSION else request_version


def encode_body(message: Any, version: int) -> bytes:
    """Encode a response body, preserving every tagged field (Q2-Q4)."""
    flexible = message.flexible_version_q(version)
    out: list[bytes] = []
    _encode_struct(message._struct, message, version, flexible, out)
    return b"".join(out)


def _encode_struct(
    struct_field: StructField, item: Any, version: int, flexible: bool, out: list[bytes]
) -> None:
    for field in struct_field.untagged_fields(version):
        _encode_field(field, getattr(item, field.name), version, flexible, out)
    if flexible:
        out.append(_tagged_block(struct_field, item, version))


def _encode_field(field: BaseField, value: Any, version: int, flexible: bool, out: list[bytes]) -> None:
    if field.is_struct_array():
        if value is None:
            out.append(b"\x00" if flexible else INT32_PACK(-1))
            return
        out.append(encode_uvarint(len(value) + 1) if flexible else INT32_PACK(len(value)))
        element = field.array_of
        for item in value:
            _encode_struct(element, item, version, flexible, out)
    elif field.is_struct():
        if field.nullable_for_version_q(version):  # KIP-893 nullable struct: int8 presence prefix
            if value is None:
                out.append(b"\xff")
                return
            out.append(b"\x01")
        _encode_struct(field, value, version, flexible, out)
    else:
        out.append(field.encode(value, version=version, compact=flexible, tagged=flexible))


def _tagged_block(struct_field: StructField, item: Any, version: int) -> bytes:
    present = item.tags or ()
    entries: list[tuple[int, bytes]] = []
    for field in struct_field.tagged_fields(version)._fields:
        value = getattr(item, field.name)
        if field.name in present or value != field.default:
            encoded: list[bytes] = []
            _encode_field(field, value, version, True, encoded)
            entries.append((field.tag, b"".join(encoded)))
    for name, raw in (item.unknown_tags or {}).items():
        entries.append((int(name[1:]), bytes(raw)))
    entries.sort(key=lambda entry: entry[0])
    parts = [encode_uvarint(len(entries))]
    for tag, encoded_value in entries:
        parts += (encode_uvarint(tag), encode_uvarint(len(encoded_value)), encoded_value)
    return b"".join(parts)


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() and i else c.lower() for i, c in enumerate(name))
