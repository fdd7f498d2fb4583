"""The parsed request header, in a module of its own so that both its readers name it without importing
each other: protocol/headers.py's, in Python, and the compiled one that protocol/compiled.py hands out."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["RequestHeader"]


class RequestHeader(NamedTuple):
    """An immutable parsed request header.

    A NamedTuple rather than a frozen dataclass: it is built once per request on the hot path, and a
    frozen dataclass's __init__ costs about 6x as much.
    """

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    size: int  # bytes of the header itself: the body starts at frame offset 4 + size
