"""Reading a Produce request's `acks` without decoding its records (acks=0 requests get no response)."""

from __future__ import annotations

import struct

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.apis import FLEXIBLE_FROM
from sluice.protocol.errors import ProtocolError
from sluice.protocol.headers import RequestHeader
from sluice.protocol.primitives import read_int16, skip_compact_nullable_string, skip_nullable_string

_FIRST_FLEXIBLE = FLEXIBLE_FROM[ApiKey.PRODUCE]
_NULL_ID_THEN_ACKS = struct.Struct(">hh").unpack_from


def produce_acks(frame: memoryview | bytes, header: RequestHeader) -> int:
    """Read `acks` from a Produce request without decoding the rest of the body.

    `frame` includes the 4-byte length prefix; the body starts at 4 + header.size.
    v0-2: acks is the first field. v3+: it follows the nullable transactional_id, which is a compact
    string in flexible versions (v9+).
    """
    pos = 4 + header.size
    version = header.api_version
    if 3 <= version < _FIRST_FLEXIBLE and len(frame) >= pos + 4:
        # The common case, read at once: a null transactional_id (length -1), then acks.
        null, acks = _NULL_ID_THEN_ACKS(frame, pos)
        if null == -1:
            return acks
    try:
        if version >= 3:
            if version >= _FIRST_FLEXIBLE:
                pos = skip_compact_nullable_string(frame, pos)
            else:
                pos = skip_nullable_string(frame, pos)
        acks, _ = read_int16(frame, pos)
    except ProtocolError as exc:
        raise ProtocolError("bad_produce_request", exc.detail or exc.reason) from None
    return acks
