"""What the tests of a compiled twin compare of an outcome: its type and value, all the way down (frames by
their bytes, a FrameHead by its head and size, tuples and lists item by item, anything else by its repr),
so that 1 and 1.0, a view and bytes, a Forward and a plain tuple are told apart."""

from __future__ import annotations

from sluice.protocol.frames import FrameHead


def shape(value: object) -> object:
    if isinstance(value, memoryview | bytes | bytearray):
        return (type(value).__name__, bytes(value))
    if isinstance(value, FrameHead):
        return ("FrameHead", bytes(value.head), value.size)
    if isinstance(value, tuple):
        return (type(value).__name__, *(shape(v) for v in value))
    if isinstance(value, list):
        return [shape(v) for v in value]
    return (type(value).__name__, repr(value))
