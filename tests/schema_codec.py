"""A small encoder and decoder driven by Kafka's JSON message schemas (tests/kafka_schemas.py), for the tests
that must build or read any API at any version, the ones kafka-python has no class for included.

    schema = message_schema(ApiKey.SHARE_FETCH, "response", 2)
    body = encode(schema, 2, {"ThrottleTimeMs": 0, "Responses": [...], "NodeEndpoints": [...]})
    assert decode(schema, 2, body)["NodeEndpoints"][0]["Host"] == ...

Messages are plain dicts keyed by the schema's field names; a field left out takes its default (0, "",
false, an empty array, null where the schema says so), and a tagged field left out is not written. A tag
the schema does not know is `_tag<N>`: its raw bytes. It
follows Kafka's encoding rules: compact strings, arrays and bytes and tagged-field blocks in flexible
versions, nullable structs with an int8 presence byte. It is the reference the guard and the hand-written
walkers are checked against, so it shares no code with protocol/.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

from kafka_schemas import Schema, in_versions, parse_versions, schema_sources

_FIXED = {
    "bool": struct.Struct(">?"),
    "int8": struct.Struct(">b"),
    "int16": struct.Struct(">h"),
    "uint16": struct.Struct(">H"),
    "int32": struct.Struct(">i"),
    "uint32": struct.Struct(">I"),
    "int64": struct.Struct(">q"),
    "float64": struct.Struct(">d"),
}


def message_schema(api_key: int, kind: str, version: int) -> Schema:
    """The schema of `kind` ("request"/"response") for `api_key` that defines `version`: the trunk's first,
    then kafka-python's, then 3.9.1's (the trunk dropped some old versions that 3.9.1 still defines)."""
    sources = schema_sources()
    ordered = sources[-1:] + sources[:-1] if len(sources) > 1 else sources
    for source in ordered:
        for schema in source.messages():
            wanted = schema["apiKey"] == api_key and schema["type"] == kind
            if wanted and in_versions(version, schema.get("validVersions")):
                return schema
    raise LookupError(f"no {kind} schema defines api {api_key} v{version}")


def flexible(schema: Schema, version: int) -> bool:
    return in_versions(version, schema.get("flexibleVersions"))


# ---- encoding ---------------------------------------------------------------------------------------------


def encode(schema: Schema, version: int, message: dict[str, Any]) -> bytes:
    out = bytearray()
    _encode_fields(out, schema["fields"], version, flexible(schema, version), message)
    return bytes(out)


def _uvarint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _present(field: Schema, version: int) -> bool:
    return in_versions(version, field.get("versions"))


def _tagged(field: Schema, version: int) -> bool:
    return "tag" in field and in_versions(version, field.get("taggedVersions"))


def _encode_fields(out: bytearray, fields: list[Schema], version: int, flex: bool, values: dict) -> None:
    tagged = []
    for field in fields:
        if not _present(field, version):
            continue
        if _tagged(field, version):
            if field["name"] in values:
                tagged.append(field)
            continue
        _encode_value(out, field, version, flex, values.get(field["name"], _default(field, version)))
    if flex:
        # Unknown tags, as decode gives them: "_tag<N>" -> the field's raw bytes.
        blocks = [(int(name[4:]), bytes(value)) for name, value in values.items() if name.startswith("_tag")]
        for field in tagged:
            data = bytearray()
            _encode_value(data, field, version, flex, values[field["name"]])
            blocks.append((field["tag"], bytes(data)))
        _uvarint(out, len(blocks))
        for tag, data in sorted(blocks):
            _uvarint(out, tag)
            _uvarint(out, len(data))
            out += data


def _default(field: Schema, version: int) -> Any:
    kind, default = field["type"], field.get("default")
    if default == "null":
        return None
    if kind.startswith("[]"):
        return []
    if "fields" in field:
        return None if in_versions(version, field.get("nullableVersions")) else {}
    if kind in ("string",):
        return default or ""
    if kind in ("bytes", "records"):
        return None if in_versions(version, field.get("nullableVersions")) else b""
    if kind == "uuid":
        return uuid.UUID(int=0)
    if kind == "bool":
        return default == "true"
    if kind == "float64":
        return float(default or 0)
    return int(default, 0) if isinstance(default, str) and default else 0


def _encode_value(out: bytearray, field: Schema, version: int, flex: bool, value: Any) -> None:
    kind = field["type"]
    nullable = in_versions(version, field.get("nullableVersions"))
    if kind.startswith("[]"):
        if value is None:
            out += b"\x00" if flex else b"\xff\xff\xff\xff"
            return
        _length(out, len(value), flex, wide=True)
        element = dict(field, type=kind[2:])
        element.pop("nullableVersions", None)
        for item in value:
            _encode_value(out, element, version, flex, item)
        return
    if "fields" in field:
        if nullable:
            if value is None:
                out += b"\xff"
                return
            out += b"\x01"
        _encode_fields(out, field["fields"], version, flex, value)
        return
    if kind in _FIXED:
        out += _FIXED[kind].pack(value)
    elif kind == "uuid":
        out += value.bytes
    elif kind == "string":
        _sized(out, None if value is None else value.encode(), flex, wide=False)
    elif kind in ("bytes", "records"):
        _sized(out, value, flex, wide=True)
    else:
        raise ValueError(f"type {kind} of {field['name']}")


def _length(out: bytearray, length: int, flex: bool, wide: bool) -> None:
    if flex:
        _uvarint(out, length + 1)
    else:
        out += (_FIXED["int32"] if wide else _FIXED["int16"]).pack(length)


def _sized(out: bytearray, data: bytes | None, flex: bool, wide: bool) -> None:
    if data is None:
        _length(out, -1, flex, wide)
    else:
        _length(out, len(data), flex, wide)
        out += data


# ---- decoding ---------------------------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def fixed(self, kind: str) -> Any:
        codec = _FIXED[kind]
        value = codec.unpack_from(self.data, self.pos)[0]
        self.pos += codec.size
        return value

    def take(self, size: int) -> bytes:
        if self.pos + size > len(self.data):
            raise ValueError("truncated")
        chunk = self.data[self.pos : self.pos + size]
        self.pos += size
        return chunk

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    def length(self, flex: bool, wide: bool) -> int:
        if flex:
            return self.uvarint() - 1
        return self.fixed("int32" if wide else "int16")


def decode(schema: Schema, version: int, data: bytes) -> dict[str, Any]:
    reader = _Reader(bytes(data))
    message = _decode_fields(reader, schema["fields"], version, flexible(schema, version))
    if reader.pos != len(reader.data):
        raise ValueError(f"{len(reader.data) - reader.pos} bytes after the message")
    return message


def _decode_fields(reader: _Reader, fields: list[Schema], version: int, flex: bool) -> dict[str, Any]:
    values: dict[str, Any] = {}
    by_tag = {}
    for field in fields:
        if not _present(field, version):
            continue
        if _tagged(field, version):
            by_tag[field["tag"]] = field
            continue
        values[field["name"]] = _decode_value(reader, field, version, flex)
    if flex:
        for _ in range(reader.uvarint()):
            tag, size = reader.uvarint(), reader.uvarint()
            field = by_tag.get(tag)
            if field is None:
                values[f"_tag{tag}"] = reader.take(size)
                continue
            end = reader.pos + size
            values[field["name"]] = _decode_value(reader, field, version, flex)
            if reader.pos != end:
                raise ValueError(
                    f"tagged field {field['name']} is {size} bytes, read {reader.pos - end + size}"
                )
    return values


def _decode_value(reader: _Reader, field: Schema, version: int, flex: bool) -> Any:
    kind = field["type"]
    if kind.startswith("[]"):
        count = reader.length(flex, wide=True)
        if count < 0:
            return None
        element = dict(field, type=kind[2:])
        element.pop("nullableVersions", None)
        return [_decode_value(reader, element, version, flex) for _ in range(count)]
    if "fields" in field:
        if in_versions(version, field.get("nullableVersions")) and reader.fixed("int8") < 0:
            return None
        return _decode_fields(reader, field["fields"], version, flex)
    if kind in _FIXED:
        return reader.fixed(kind)
    if kind == "uuid":
        return uuid.UUID(bytes=reader.take(16))
    length = reader.length(flex, wide=kind != "string")
    if length < 0:
        return None
    data = reader.take(length)
    return data.decode() if kind == "string" else data


def versions_of(schema: Schema) -> range:
    low, high = parse_versions(schema.get("validVersions")) or (0, -1)
    return range(low, high + 1)


def sample(schema: Schema, version: int) -> dict[str, Any]:
    """A message with every field of `version` set (tagged ones too) and one element in every array."""
    return _sample_fields(schema["fields"], version)


def _sample_fields(fields: list[Schema], version: int) -> dict[str, Any]:
    return {f["name"]: _sample_value(f, version) for f in fields if _present(f, version)}


def _sample_value(field: Schema, version: int) -> Any:
    kind = field["type"]
    if kind.startswith("[]"):
        element = dict(field, type=kind[2:])
        return [_sample_value(element, version)]
    if "fields" in field:
        return _sample_fields(field["fields"], version)
    if kind == "bool":
        return True
    if kind == "float64":
        return 1.5
    if kind in _FIXED:
        return 1
    if kind == "uuid":
        return uuid.UUID(int=7)
    if kind == "string":
        return "ab"
    return b"\x01\x02"
