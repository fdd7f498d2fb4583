"""Rebuilding a frame around a new body, keeping the original response header bytes."""

from __future__ import annotations

import struct

from ..filter_api.contract import Frame

_LENGTH = struct.Struct(">i")


def with_body(frame: Frame, header_size: int, body: bytes) -> bytes:
    header = memoryview(frame)[4 : 4 + header_size]
    return b"".join((_LENGTH.pack(header_size + len(body)), header, body))
