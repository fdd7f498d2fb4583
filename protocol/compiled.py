"""The compiled readers of the hot path (protocol/_compiled.c), each None where this install was built
without them (no C compiler at hand: the build goes on without them, pyproject.toml).

Each is the translation of a Python reader that stays the reference and runs in its place when it is None:
`produce_responses_end`, `fetch_responses` and `fetch_answer_topics` (the walk with the answer's top-level
tagged fields after it) of protocol/response_walks.py, `walk_produce_body` and
`produce_topic_bytes` (its topics alone) of protocol/produce_stream.py, `parse_request_header` of
protocol/headers.py (which binds what it reads beside the frame once, `bind_request_headers`);
tests/protocol/test_compiled.py holds each pair equal. Four are twins of their common case only, handing
every other call to the Python they translate (each bound once): `rewrite_node_endpoints` of
protocol/node_endpoints.py answers a Produce or Fetch answer with an empty top-level tagged block
(`bind_node_endpoints`), `produce_acks` of protocol/produce.py reads a v3+ Produce request's acks after a
null transactional id (`bind_produce_acks`), `response_header_size` of protocol/headers.py sizes a header
with no tagged fields (`bind_response_headers`), `produce_topics` of protocol/produce_stream.py walks a
Produce request's topics where no other filter kept a walk of it (`bind_produce_topics`). And
`whole_frames`, the loop of protocol/frames.py's splitter over a read's frames, hands the Python the calls
it does not read as the Python would (a view that is not of bytes; `bind_whole_frames`). `buffer_in_use`
reads protocol/frame_memory.py's answer from the bytearray itself. `walked_fetch_topics` takes the walk
protocol/response_walks.py kept of a Fetch answer from that module's globals (`bind_walked_fetch_topics`).
Why they exist: they run on every request and every Produce and Fetch answer, and in Python a partition's
few field reads cost as much as the rest of the request's handling (docs/architecture.md, "Compiled
readers").

Their contract is the proxy's use of them: a C-contiguous byte buffer (bytes, bytearray, a byte
memoryview), read from a `start` of 0 or more; the Python twins also take what the proxy never passes
(a strided view, a negative start), the compiled ones refuse it (BufferError, ValueError).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from sluice.protocol.primitives import Buffer
from sluice.protocol.request_header import RequestHeader

__all__ = [
    "bind_node_endpoints",
    "bind_produce_acks",
    "bind_produce_topics",
    "bind_request_headers",
    "bind_response_headers",
    "bind_walked_fetch_topics",
    "bind_whole_frames",
    "buffer_in_use",
    "fetch_answer_topics",
    "fetch_responses",
    "parse_request_header",
    "produce_acks",
    "produce_responses_end",
    "produce_topic_bytes",
    "produce_topics",
    "response_header_size",
    "rewrite_node_endpoints",
    "walk_produce_body",
    "walked_fetch_topics",
    "whole_frames",
]

_TopicBytes = list[tuple[str | bytes, int]]  # [(topic name, or id from v13, record bytes)]
_Walked = tuple[int, int, _TopicBytes, list[list[tuple[int, int]]]]

# (api_version, body, start) -> the offset after a Produce v9+ answer's responses.
produce_responses_end: Callable[[int, Buffer, int], int] | None = None
# (api_version, body, start, topics_wanted) -> ([(topic, record bytes)], the offset after the responses).
fetch_responses: Callable[[int, Buffer, int, bool], tuple[_TopicBytes, int]] | None = None
# (api_version, body, start) -> ([(topic, record bytes)], the offset after the top-level tagged fields).
fetch_answer_topics: Callable[[int, Buffer, int], tuple[_TopicBytes, int]] | None = None
# (api_version, body, start) -> (acks, timeout_ms, [(topic, record bytes)], [[(partition, record bytes)]]).
walk_produce_body: Callable[[int, Buffer, int], _Walked] | None = None
# (api_version, body, start) -> [(topic, record bytes)]: the same walk, keeping no partition.
produce_topic_bytes: Callable[[int, Buffer, int], _TopicBytes] | None = None
# (RequestHeader, first flexible version per API key, "never flexible", ControlledShutdown's key, the
# client-id cache, its decoder) -> None; then parse_request_header(frame) -> RequestHeader.
bind_request_headers: (
    Callable[[type[RequestHeader], tuple[int, ...], int, int, dict[bytes, str], Callable[[bytes], str]], None]
    | None
) = None
parse_request_header: Callable[[Buffer], RequestHeader] | None = None
# ({api key: (first version with NodeEndpoints, last known)}, response_walks' globals,
# node_endpoints.rewrite_node_endpoints_in_python)
# -> None; then rewrite_node_endpoints(api_key, api_version, body, address_for, start, remember), the
# Python's answer: (the new body or None, how many entries were rewritten).
bind_node_endpoints: (
    Callable[[Mapping[int, tuple[int, int]], dict[str, object], Callable[..., object]], None] | None
) = None
rewrite_node_endpoints: Callable[..., tuple[bytes | None, int]] | None = None
# (first transactional version, first flexible version, produce.produce_acks_in_python) -> None; then
# produce_acks(frame, header), its answer: a Produce request's acks.
bind_produce_acks: Callable[[int, int, Callable[..., int]], None] | None = None
produce_acks: Callable[[Buffer, RequestHeader], int] | None = None
# (produce_stream's globals, PRODUCE_MAX, produce_stream.produce_topics_in_python) -> None; then
# produce_topics(frame, header), its answer: [(topic, record bytes)] of a framed Produce request.
bind_produce_topics: Callable[[dict[str, object], int, Callable[..., _TopicBytes]], None] | None = None
produce_topics: Callable[[Buffer, RequestHeader], _TopicBytes] | None = None
# (ApiVersions' key, headers.response_header_size_in_python) -> None; then response_header_size(api_key,
# api_version, frame), its answer (reading the table bind_request_headers bound).
bind_response_headers: Callable[[int, Callable[..., int]], None] | None = None
response_header_size: Callable[[int, int, Buffer], int] | None = None
# (frames.whole_frames_in_python) -> None; then whole_frames(view, pos, min_payload, max_frame, frames), its
# answer: (where the whole frames appended end, the next frame's length field or None).
bind_whole_frames: Callable[[Callable[..., tuple[int, int | None]]], None] | None = None
whole_frames: Callable[..., tuple[int, int | None]] | None = None
# (bytearray) -> whether a view of it is alive (frame_memory.buffer_in_use_in_python's answer).
buffer_in_use: Callable[[bytearray], bool] | None = None
# (response_walks' globals, response_walks.walked_fetch_topics_in_python) -> None; then
# walked_fetch_topics(api_version, body, start), its answer (reading and resetting the globals' _last_fetch).
bind_walked_fetch_topics: Callable[[dict[str, object], Callable[..., _TopicBytes | None]], None] | None = None
walked_fetch_topics: Callable[[int, Buffer, int], _TopicBytes | None] | None = None

try:
    from sluice.protocol import _compiled
except ImportError:  # built without a C compiler
    pass
else:
    produce_responses_end = _compiled.produce_responses_end
    fetch_responses = _compiled.fetch_responses
    fetch_answer_topics = _compiled.fetch_answer_topics
    walk_produce_body = _compiled.walk_produce_body
    produce_topic_bytes = _compiled.produce_topic_bytes
    bind_request_headers = _compiled.bind_request_headers
    parse_request_header = _compiled.parse_request_header
    bind_node_endpoints = _compiled.bind_node_endpoints
    rewrite_node_endpoints = _compiled.rewrite_node_endpoints
    bind_produce_acks = _compiled.bind_produce_acks
    produce_acks = _compiled.produce_acks
    bind_produce_topics = _compiled.bind_produce_topics
    produce_topics = _compiled.produce_topics
    bind_response_headers = _compiled.bind_response_headers
    response_header_size = _compiled.response_header_size
    bind_whole_frames = _compiled.bind_whole_frames
    whole_frames = _compiled.whole_frames
    buffer_in_use = _compiled.buffer_in_use
    bind_walked_fetch_topics = _compiled.bind_walked_fetch_topics
    walked_fetch_topics = _compiled.walked_fetch_topics
