"""Valid sample bodies for any kafka-python message class, built from its schema: every field set, every
array holding one element. The decoder fuzz mutates these so it reaches past the first length check."""

from __future__ import annotations

import uuid
from typing import Any

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.schemas.fields.codecs import (
    UUID,
    BitField,
    Boolean,
    Bytes,
    Float64,
    Int8,
    Int16,
    Int32,
    Int64,
    String,
    UnsignedInt16,
)

from sluice.protocol.codec_quirks import encode_body

_INTS = (Int8, Int16, Int32, Int64, UnsignedInt16)


def _simple_value(field: Any) -> Any:
    kind = field._type
    if kind in _INTS:
        return 1
    if isinstance(kind, String):
        return "ab"
    if kind is Bytes:
        return b"\x01\x02"
    if kind is Boolean:
        return True
    if kind is UUID:
        return uuid.UUID(int=7)
    if kind is Float64:
        return 1.5
    if kind is BitField:
        return {1, 3}
    raise TypeError(f"no sample for {field!r}")


def _value(field: Any, version: int) -> Any:
    if field.is_struct_array():
        return [_struct(field.array_of, version)]
    if field.is_array():
        return [_simple_value(field.array_of)]
    if field.is_struct():
        return _struct(field, version)
    return _simple_value(field)


def _fields(struct_field: Any, version: int) -> dict[str, Any]:
    return {f.name: _value(f, version) for f in struct_field.fields.values() if f.for_version_q(version)}


def _struct(struct_field: Any, version: int) -> Any:
    return struct_field.data_class(version=version, **_fields(struct_field, version))


def sample_body(message_class: type[ApiMessage], version: int) -> bytes:
    """A valid body of `message_class` at `version` with every field present and one element per array."""
    message = message_class(version=version, **_fields(message_class._struct, version))
    return encode_body(message, version)
