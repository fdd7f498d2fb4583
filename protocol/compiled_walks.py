"""The compiled walks of Produce and Fetch structures (protocol/_walks.c), each None where this install was
built without them (no C compiler at hand: the build goes on without them, pyproject.toml).

Each is the translation of a Python walk that stays the reference and runs in its place when it is None:
`produce_responses_end` and `fetch_responses` of protocol/response_walks.py, `walk_produce_body` of
protocol/produce_stream.py (tests/protocol/test_compiled_walks.py holds each pair equal). Why they exist:
these walks run on every Produce request and every Produce and Fetch answer, and in Python a partition's
few field reads cost as much as the rest of the request's handling (docs/architecture.md, "Compiled
walks").
"""

from __future__ import annotations

from collections.abc import Callable

from sluice.protocol.primitives import Buffer

__all__ = ["fetch_responses", "produce_responses_end", "walk_produce_body"]

_TopicBytes = list[tuple[str | bytes, int]]  # [(topic name, or id from v13, record bytes)]
_Walked = tuple[int, int, _TopicBytes, list[list[tuple[int, int]]]]

# (api_version, body, start) -> the offset after a Produce v9+ answer's responses.
produce_responses_end: Callable[[int, Buffer, int], int] | None = None
# (api_version, body, start, topics_wanted) -> ([(topic, record bytes)], the offset after the responses).
fetch_responses: Callable[[int, Buffer, int, bool], tuple[_TopicBytes, int]] | None = None
# (api_version, body) -> (acks, timeout_ms, [(topic, record bytes)], [[(partition, record bytes)]]).
walk_produce_body: Callable[[int, Buffer], _Walked] | None = None

try:
    from sluice.protocol import _walks
except ImportError:  # built without a C compiler
    pass
else:
    produce_responses_end = _walks.produce_responses_end
    fetch_responses = _walks.fetch_responses
    walk_produce_body = _walks.walk_produce_body
