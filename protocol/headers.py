"""Request and response headers, read with `struct` straight from a frame (prefix included)."""

from __future__ import annotations

import struct
from collections.abc import Callable

from sluice.protocol import compiled
from sluice.protocol.api_keys import ApiKey
from sluice.protocol.apis import (
    FLEXIBLE_FROM_BY_KEY,
    NOT_FLEXIBLE,
    request_header_version,
    response_header_version,
)
from sluice.protocol.errors import ProtocolError
from sluice.protocol.primitives import INT32_PACK, INT32_UNPACK, Buffer, skip_tagged_fields

# Defined beside the compiled parse, which names it too; imported from here by everything that reads one.
from sluice.protocol.request_header import RequestHeader as RequestHeader

_CONTROLLED_SHUTDOWN = ApiKey.CONTROLLED_SHUTDOWN
_KEYS_WITH_VERSIONS = len(FLEXIBLE_FROM_BY_KEY)

_KEY_VERSION_CORRELATION = struct.Struct(">hhi")
_UNPACK_KEY_VERSION_CORRELATION = _KEY_VERSION_CORRELATION.unpack_from
_UNPACK_HEADER_V1_FIXED = struct.Struct(">hhih").unpack_from  # key, version, correlation id, client_id length
_INT16_PACK = struct.Struct(">h").pack
_PREFIX = 4
_CLIENT_ID_AT = _PREFIX + 8  # the int16 length of client_id, after key, version and correlation id
_EMPTY_TAGGED_FIELDS = b"\x00"

# Client ids repeat on every request of a connection; decoding them once saves a UTF-8 decode per
# request. Cleared when full, since a flood of distinct ids (a misbehaving client) must not grow memory.
_CLIENT_ID_CACHE_MAX = 4096
_client_id_cache: dict[bytes, str] = {}


_new_header = tuple.__new__


def parse_request_header_in_python(frame: Buffer) -> RequestHeader:
    """Parse the request header of `frame` (which includes its 4-byte length prefix): `parse_request_header`
    in Python, the reference for the compiled one and what runs without it.

    Header version per the API table (protocol.apis.request_header_version); unknown APIs are read
    as v1 and never fail for being unknown. Memoryviews must be byte views (format 'B').
    """
    # The proxy's case first (a read-only view of its read buffer): one type check, not two.
    if type(frame) is memoryview:
        if not frame.readonly:
            frame = bytes(frame)  # slices of a mutable buffer cannot be hashed for the client-id cache
    elif type(frame) is not bytes:
        frame = bytes(frame)
    size = len(frame)
    pos = _CLIENT_ID_AT + 2
    if size >= pos:
        api_key, api_version, correlation_id, length = _UNPACK_HEADER_V1_FIXED(frame, _PREFIX)
    elif size >= _CLIENT_ID_AT:
        api_key, api_version, correlation_id = _UNPACK_KEY_VERSION_CORRELATION(frame, _PREFIX)
        length = None  # only header v0 (no client_id) fits
    else:
        raise ProtocolError("bad_request_header", f"frame of {size} bytes is shorter than a header")
    flexible = api_version >= (
        FLEXIBLE_FROM_BY_KEY[api_key] if 0 <= api_key < _KEYS_WITH_VERSIONS else NOT_FLEXIBLE
    )
    if not flexible and api_key == _CONTROLLED_SHUTDOWN and api_version == 0:
        return _new_header(
            RequestHeader, (api_key, api_version, correlation_id, None, _CLIENT_ID_AT - _PREFIX)
        )
    if length is None:
        raise ProtocolError("bad_request_header", "frame ends inside the client_id length")
    client_id: str | None
    if length < 0:
        if length != -1:
            raise ProtocolError("bad_request_header", f"client_id length {length}")
        client_id = None
    else:
        end = pos + length
        if end > size:
            raise ProtocolError("bad_request_header", "frame ends inside the client_id")
        # A copy of the (short) id, not a memoryview slice: hashing a memoryview first hashes the whole
        # object beneath it, which for a 1 MiB Produce frame costs ~350 us per request.
        raw = bytes(frame[pos:end])
        client_id = _client_id_cache.get(raw)
        if client_id is None:
            client_id = _decode_client_id(raw)
        pos = end
    if flexible:
        if pos < size and frame[pos] == 0:  # the usual empty tagged-field block
            pos += 1
        else:
            try:
                pos = skip_tagged_fields(frame, pos)
            except ProtocolError as exc:
                raise ProtocolError("bad_request_header", f"tagged fields: {exc.reason}") from None
    return _new_header(RequestHeader, (api_key, api_version, correlation_id, client_id, pos - _PREFIX))


def forget_client_ids() -> None:
    """Empty the client-id cache. After a spike of connections its entries are the spike's clients', each
    a few small objects that would keep one of the allocator's arenas from being freed
    (proxy/process/memory_return.py); the ids still in use are decoded again at their next request."""
    _client_id_cache.clear()


def _decode_client_id(raw: memoryview | bytes) -> str:
    # The key is a (small) bytes copy, so the cache never pins a frame in memory.
    key = bytes(raw)
    decoded = key.decode("utf-8", errors="replace")
    if len(_client_id_cache) >= _CLIENT_ID_CACHE_MAX:
        _client_id_cache.clear()
    _client_id_cache[key] = decoded
    return decoded


def _compiled_parse() -> Callable[[Buffer], RequestHeader] | None:
    """The compiled parse (protocol/compiled.py), bound to this module's tables and client-id cache."""
    bind, parse = compiled.bind_request_headers, compiled.parse_request_header
    if bind is None or parse is None:
        return None
    bind(
        RequestHeader,
        FLEXIBLE_FROM_BY_KEY,
        NOT_FLEXIBLE,
        _CONTROLLED_SHUTDOWN,
        _client_id_cache,
        _decode_client_id,
    )
    return parse


# The request header of every request: the compiled parse where this install has it, else the Python one.
parse_request_header: Callable[[Buffer], RequestHeader] = _compiled_parse() or parse_request_header_in_python


def response_header_size_in_python(api_key: int, api_version: int, frame: memoryview | bytes) -> int:
    """Size of the response header of `frame` (prefix included in `frame`, excluded from the size):
    4 for header v0, 4 + the tagged-field block for v1. ApiVersions always uses v0.

    The reference for the compiled one (protocol/_compiled.c), which answers a header v0 and a header v1
    with no tagged fields itself, and calls this for every other."""
    size = len(frame)
    if size < _PREFIX + 4:
        raise ProtocolError("bad_response_header", f"frame of {size} bytes has no correlation id")
    if response_header_version(api_key, api_version) == 0:
        return 4
    if size > _PREFIX + 4 and frame[_PREFIX + 4] == 0:
        return 5  # header v1 with no tagged fields: nearly every answer
    try:
        return skip_tagged_fields(frame, _PREFIX + 4) - _PREFIX
    except ProtocolError as exc:
        raise ProtocolError("bad_response_header", f"tagged fields: {exc.reason}") from None


response_header_size: Callable[[int, int, memoryview | bytes], int] = response_header_size_in_python
if (
    compiled.response_header_size is not None
    and compiled.bind_response_headers is not None
    and parse_request_header is compiled.parse_request_header  # which bound the table it reads
):
    compiled.bind_response_headers(int(ApiKey.API_VERSIONS), response_header_size_in_python)
    response_header_size = compiled.response_header_size


def read_correlation_id(frame: memoryview | bytes) -> int:
    """The correlation id of a response frame (int32 right after the length prefix)."""
    if len(frame) < _PREFIX + 4:
        raise ProtocolError("bad_response_header", f"frame of {len(frame)} bytes has no correlation id")
    correlation_id: int = INT32_UNPACK(frame, _PREFIX)[0]
    return correlation_id


def encode_request_header(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None
) -> bytes:
    """Encode a request header (no length prefix) in the header version the API table prescribes."""
    head = _KEY_VERSION_CORRELATION.pack(api_key, api_version, correlation_id)
    header_version = request_header_version(api_key, api_version)
    if header_version == 0:
        return head
    # client_id keeps the classic int16 length even in header v2, so any broker can read it.
    if client_id is None:
        head += b"\xff\xff"
    else:
        encoded = client_id.encode("utf-8")
        head += _INT16_PACK(len(encoded)) + encoded
    if header_version == 2:
        head += _EMPTY_TAGGED_FIELDS
    return head


def frame(payload: bytes) -> bytes:
    """Prefix `payload` with its 4-byte big-endian length."""
    return INT32_PACK(len(payload)) + payload


def encode_response(api_key: int, api_version: int, correlation_id: int, body: bytes) -> bytes:
    """A whole framed response (for answers the proxy makes itself): length prefix, header, `body`."""
    header = INT32_PACK(correlation_id)
    if response_header_version(api_key, api_version) == 1:
        header += _EMPTY_TAGGED_FIELDS
    return frame(header + body)


def encode_request(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: bytes
) -> bytes:
    """A whole framed request: length prefix, header, `body`."""
    return frame(encode_request_header(api_key, api_version, correlation_id, client_id) + body)
