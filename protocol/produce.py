"""A Produce request's `acks` and `timeout_ms`, read without decoding its records (acks=0 requests get no
response), and an answer that fails every partition of a request with one error code."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable

from kafka.errors import RequestTimedOutError

from sluice.protocol import compiled
from sluice.protocol.api_keys import ApiKey
from sluice.protocol.apis import FLEXIBLE_FROM
from sluice.protocol.errors import ProtocolError
from sluice.protocol.headers import RequestHeader
from sluice.protocol.message_codec import encode_response_body
from sluice.protocol.primitives import (
    read_int16,
    read_int32,
    skip_compact_nullable_string,
    skip_nullable_string,
)
from sluice.protocol.record_sets import LAST_WITH_TOPIC_NAMES, Topic

_FIRST_FLEXIBLE = FLEXIBLE_FROM[ApiKey.PRODUCE]
FIRST_TRANSACTIONAL = 3  # the first version with a transactional_id before acks
REQUEST_TIMED_OUT = RequestTimedOutError.errno  # retriable: the request was not completed in time
_INT16 = struct.Struct(">h").unpack_from
_ACKS_TIMEOUT = struct.Struct(">hi").unpack_from


def _past_null_transactional_id(frame: memoryview | bytes, pos: int, version: int) -> int:
    """Where acks starts when the transactional_id at `pos` is null (the common case: a compact null is
    one byte, a classic one two), else -1: the id is there or not all of it has arrived."""
    if version >= _FIRST_FLEXIBLE:
        return pos + 1 if len(frame) > pos and frame[pos] == 0 else -1
    return pos + 2 if len(frame) >= pos + 2 and _INT16(frame, pos)[0] == -1 else -1


def produce_acks_in_python(frame: memoryview | bytes, header: RequestHeader) -> int:
    """Read `acks` from a Produce request without decoding the rest of the body.

    `frame` includes the 4-byte length prefix; the body starts at 4 + header.size.
    v0-2: acks is the first field. v3+: it follows the nullable transactional_id, which is a compact
    string in flexible versions (v9+).

    The reference for the compiled one (protocol/_compiled.c), which reads the two common cases, a v3+
    request with a null transactional id, itself, and calls this for every other.
    """
    pos = 4 + header.size
    version = header.api_version
    acks: int
    if version >= _FIRST_FLEXIBLE:
        # What every current client sends, inline (the pipeline asks for every Produce): a null compact
        # transactional_id, one zero byte, then acks.
        if len(frame) >= pos + 3 and frame[pos] == 0:
            acks = _INT16(frame, pos + 1)[0]
            return acks
    elif version >= FIRST_TRANSACTIONAL:
        at = _past_null_transactional_id(frame, pos, version)
        if at >= 0 and len(frame) >= at + 2:
            acks = _INT16(frame, at)[0]
            return acks
    return produce_acks_and_timeout(frame, header)[0]


produce_acks: Callable[[memoryview | bytes, RequestHeader], int] = produce_acks_in_python
if compiled.produce_acks is not None and compiled.bind_produce_acks is not None:
    compiled.bind_produce_acks(FIRST_TRANSACTIONAL, _FIRST_FLEXIBLE, produce_acks_in_python)
    produce_acks = compiled.produce_acks


def produce_acks_and_timeout(frame: memoryview | bytes, header: RequestHeader) -> tuple[int, int]:
    """`acks`, and `timeout_ms`: how long the client lets the broker take over the request (the Java
    client's request.timeout.ms, which is also how long it waits for the answer; librdkafka's
    request.timeout.ms).

    The head alone, not the body's walk (protocol/produce_stream.py, which gives the same two to the
    filters): the request pipeline asks for every Produce, often before the rest of the request has
    arrived, and needs nothing past these two fields."""
    pos = 4 + header.size
    version = header.api_version
    if version >= FIRST_TRANSACTIONAL:
        at = _past_null_transactional_id(frame, pos, version)
        if at >= 0 and len(frame) >= at + 6:
            acks_and_timeout: tuple[int, int] = _ACKS_TIMEOUT(frame, at)
            return acks_and_timeout
    try:
        if version >= FIRST_TRANSACTIONAL:
            if version >= _FIRST_FLEXIBLE:
                pos = skip_compact_nullable_string(frame, pos)
            else:
                pos = skip_nullable_string(frame, pos)
        acks, pos = read_int16(frame, pos)
        timeout_ms, _ = read_int32(frame, pos)
    except ProtocolError as exc:
        raise ProtocolError("bad_produce_request", exc.detail or exc.reason) from None
    return acks, timeout_ms


def produce_error_body(
    api_version: int, partitions: list[tuple[Topic, list[int]]], error_code: int, throttle_ms: int
) -> bytes:
    """The body of a Produce response that fails every partition of the request with `error_code` (no
    offsets: nothing was written), as a broker answers a request it did not append."""
    key = "topic_id" if api_version > LAST_WITH_TOPIC_NAMES else "name"
    responses = [
        {
            # kafka-python's codec takes a topic id as its text form.
            key: str(uuid.UUID(bytes=topic)) if isinstance(topic, bytes) else topic,
            "partition_responses": [
                {"index": index, "error_code": error_code, "base_offset": -1} for index in indexes
            ],
        }
        for topic, indexes in partitions
    ]
    return encode_response_body(
        ApiKey.PRODUCE, api_version, responses=responses, throttle_time_ms=throttle_ms
    )
