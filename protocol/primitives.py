"""Bounds-checked readers for the Kafka primitive types that the hand-written parsers need.

Every reader takes a buffer and an offset and returns `(value, new_offset)`. Anything that would read
past the end of the buffer raises ProtocolError('truncated'); callers that know the context (a request
header, a Metadata body) re-raise with their own reason.
"""

from __future__ import annotations

import struct

from sluice.protocol.errors import ProtocolError

Buffer = bytes | bytearray | memoryview

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
INT16_UNPACK = _INT16.unpack_from
INT32_UNPACK = _INT32.unpack_from
INT32_PACK = _INT32.pack
INT32_MAX = 0x7FFFFFFF

# An unsigned varint carrying an int32 never needs more than 5 bytes (7 bits each).
_MAX_VARINT_SHIFT = 28


def read_int16(buf: Buffer, pos: int) -> tuple[int, int]:
    end = pos + 2
    if end > len(buf):
        raise ProtocolError("truncated", f"int16 at {pos}")
    return INT16_UNPACK(buf, pos)[0], end


def read_int32(buf: Buffer, pos: int) -> tuple[int, int]:
    end = pos + 4
    if end > len(buf):
        raise ProtocolError("truncated", f"int32 at {pos}")
    return INT32_UNPACK(buf, pos)[0], end


def read_uvarint(buf: Buffer, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    size = len(buf)
    while True:
        if pos >= size:
            raise ProtocolError("truncated", "unsigned varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > _MAX_VARINT_SHIFT:
            raise ProtocolError("bad_varint", "unsigned varint longer than 5 bytes")


def read_array_count(buf: Buffer, pos: int, flexible: bool, what: str = "array") -> tuple[int, int]:
    """An array's element count: an unsigned varint of count + 1 in flexible versions, else an int32.
    A null array (count -1) raises ProtocolError('null_array'): the callers' arrays are never nullable."""
    if flexible:
        count_plus_one, pos = read_uvarint(buf, pos)
        count = count_plus_one - 1
    else:
        count, pos = read_int32(buf, pos)
    if count < 0:
        raise ProtocolError("null_array", what)
    return count, pos


def encode_uvarint(value: int) -> bytes:
    if value < 0:
        raise ValueError("unsigned varint cannot be negative")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def skip_tagged_fields(buf: Buffer, pos: int) -> int:
    """Skip a tagged-field block (count, then tag/size/bytes per field); return the offset after it."""
    if pos < len(buf) and buf[pos] == 0:  # the common case: an empty block
        return pos + 1
    count, pos = read_uvarint(buf, pos)
    size = len(buf)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        length, pos = read_uvarint(buf, pos)
        pos += length
        if pos > size:
            raise ProtocolError("truncated", "tagged field")
    return pos


def skip_nullable_string(buf: Buffer, pos: int) -> int:
    """Skip a classic (int16 length, -1 = null) nullable string."""
    length, pos = read_int16(buf, pos)
    return _skip_sized(buf, pos, length, "string")


def skip_compact_nullable_string(buf: Buffer, pos: int) -> int:
    """Skip a compact (unsigned varint length + 1, 0 = null) nullable string."""
    length_plus_one, pos = read_uvarint(buf, pos)
    if length_plus_one > 1:
        pos += length_plus_one - 1
        if pos > len(buf):
            raise ProtocolError("truncated", "compact string")
    return pos


def skip_nullable_bytes(buf: Buffer, pos: int) -> int:
    """Skip classic (int32 length, -1 = null) nullable bytes."""
    length, pos = read_int32(buf, pos)
    return _skip_sized(buf, pos, length, "bytes")


def _skip_sized(buf: Buffer, pos: int, length: int, what: str) -> int:
    """Skip `length` bytes of a classic nullable field whose length was just read (-1 = null)."""
    if length < -1:
        raise ProtocolError(f"bad_{what}_length", str(length))
    if length > 0:
        pos += length
        if pos > len(buf):
            raise ProtocolError("truncated", what)
    return pos
