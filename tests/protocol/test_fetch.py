"""Fetch request limits and Kafka's max_bytes cap, the response session, and the empty throttled answer,
checked against kafka-python's FetchRequest/FetchResponse codecs for every version 0-18."""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer import FetchRequest, FetchResponse

from sluice.protocol.codec_quirks import decode_body, encode_body
from sluice.protocol.errors import ProtocolError
from sluice.protocol.fetch import (
    FETCH_MAX_VERSION,
    cap_fetch_request,
    empty_fetch_response,
    fetch_request_limits,
    fetch_response_session,
)
from sluice.protocol.primitives import INT32_MAX
from sluice.protocol.throttle_field import patch_throttle_ms, read_throttle_ms

VERSIONS = range(FETCH_MAX_VERSION + 1)
MAX_BYTES = 52_428_800  # the Java consumer's fetch.max.bytes default
MIN_BYTES = 1


def test_table_max_version_matches_the_codec() -> None:
    assert FETCH_MAX_VERSION == FetchRequest.max_version == FetchResponse.max_version == 18


def _request(version: int, min_bytes: int = MIN_BYTES, max_bytes: int = MAX_BYTES) -> bytes:
    partition = FetchRequest.FetchTopic.FetchPartition(
        partition=3,
        current_leader_epoch=5,
        fetch_offset=123_456,
        last_fetched_epoch=4,
        log_start_offset=-1,
        partition_max_bytes=1_048_576,
    )
    identity = {"topic_id": uuid.UUID(int=99)} if version >= 13 else {"topic": "orders"}
    forgotten = {"topic_id": uuid.UUID(int=98)} if version >= 13 else {"topic": "old"}
    request = FetchRequest(
        version=version,
        max_wait_ms=500,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=1,
        session_id=77,
        session_epoch=3,
        topics=[FetchRequest.FetchTopic(**identity, partitions=[partition])],
        forgotten_topics_data=[FetchRequest.ForgottenTopic(**forgotten, partitions=[1, 2])],
        rack_id="eu-1a",
    )
    if version <= 14:
        request.replica_id = -1
    if version >= 12:
        request.cluster_id = "cluster-a"
        request.tags = {"cluster_id"}
    if version >= 15:
        request.replica_state = FetchRequest.ReplicaState(replica_id=-1, replica_epoch=-1)
        request.tags = {"cluster_id", "replica_state"}
    return bytes(request.encode(version=version))


def _decode_request(version: int, body: bytes | bytearray) -> Any:
    return decode_body(FetchRequest, version, bytes(body))


@pytest.mark.parametrize("version", VERSIONS)
def test_limits_for_every_version(version: int) -> None:
    body = _request(version, min_bytes=1024)
    if version < 3:
        assert fetch_request_limits(version, body) is None
    else:
        assert fetch_request_limits(version, body) == (1024, MAX_BYTES)


@pytest.mark.parametrize("version", range(3, FETCH_MAX_VERSION + 1))
def test_cap_lowers_max_bytes_and_min_bytes_and_nothing_else(version: int) -> None:
    body = _request(version, min_bytes=5000)
    capped = bytearray(body)
    assert cap_fetch_request(version, capped, 3000) is True
    assert len(capped) == len(body)
    expected = _decode_request(version, body)
    expected.max_bytes = 3000
    expected.min_bytes = 3000  # min_bytes = min(min_bytes, new max_bytes)
    assert _decode_request(version, capped) == expected
    assert fetch_request_limits(version, capped) == (3000, 3000)


@pytest.mark.parametrize("version", range(3, FETCH_MAX_VERSION + 1))
def test_cap_keeps_a_smaller_min_bytes(version: int) -> None:
    capped = bytearray(_request(version, min_bytes=1))
    assert cap_fetch_request(version, capped, 30)  # spec V17: 30-byte cap for 10 B/s, N = 4
    assert fetch_request_limits(version, capped) == (1, 30)


@pytest.mark.parametrize("version", VERSIONS)
def test_cap_above_max_bytes_changes_nothing(version: int) -> None:
    body = _request(version)
    capped = bytearray(body)
    assert cap_fetch_request(version, capped, MAX_BYTES) is False
    assert cap_fetch_request(version, capped, 10**12) is False
    assert cap_fetch_request(version, capped, float("inf")) is False
    assert capped == body


@pytest.mark.parametrize("version", [0, 1, 2])
def test_versions_without_max_bytes_are_left_alone(version: int) -> None:
    body = _request(version)
    capped = bytearray(body)
    assert cap_fetch_request(version, capped, 10) is False
    assert capped == body


def test_cap_truncates_a_float_like_kafkas_to_int() -> None:
    capped = bytearray(_request(12))
    assert cap_fetch_request(12, capped, 29.9)
    assert fetch_request_limits(12, capped) == (1, 29)


def test_cap_of_zero_and_bad_caps() -> None:
    capped = bytearray(_request(11))
    assert cap_fetch_request(11, capped, 0)
    assert fetch_request_limits(11, capped) == (0, 0)
    for bad in (-1, float("nan")):
        with pytest.raises(ValueError):
            cap_fetch_request(11, bytearray(_request(11)), bad)


def test_cap_works_on_a_writable_memoryview_inside_a_frame() -> None:
    prefix = b"\x00" * 30  # stands in for the length prefix and request header
    frame = bytearray(prefix + _request(15))
    assert cap_fetch_request(15, memoryview(frame)[len(prefix) :], 4096)
    assert frame[: len(prefix)] == prefix
    assert _decode_request(15, frame[len(prefix) :]).max_bytes == 4096


@pytest.mark.parametrize("version", [3, 14, 15, 18])
def test_short_requests_are_protocol_errors(version: int) -> None:
    body = _request(version)
    needed = 12 if version >= 15 else 16
    assert fetch_request_limits(version, body[:needed]) is not None
    with pytest.raises(ProtocolError) as info:
        fetch_request_limits(version, body[: needed - 1])
    assert info.value.reason == "bad_fetch_request"
    with pytest.raises(ProtocolError):
        cap_fetch_request(version, bytearray(body[: needed - 1]), 10)


@pytest.mark.parametrize("version", [-1, FETCH_MAX_VERSION + 1])
def test_unknown_versions_are_refused(version: int) -> None:
    for call in (
        lambda: fetch_request_limits(version, bytes(64)),
        lambda: cap_fetch_request(version, bytearray(64), 10),
        lambda: fetch_response_session(version, bytes(64)),
        lambda: empty_fetch_response(version, 10, 0),
    ):
        with pytest.raises(ProtocolError) as info:
            call()
        assert info.value.reason == "unsupported_version"


# --- responses -------------------------------------------------------------------------------------


def _response(version: int, error_code: int, session_id: int, throttle_ms: int = 12345) -> bytes:
    topic_cls = FetchResponse.FetchableTopicResponse
    partition = topic_cls.PartitionData(
        partition_index=0,
        error_code=0,
        high_watermark=1000,
        last_stable_offset=1000,
        log_start_offset=0,
        aborted_transactions=None,
        preferred_read_replica=-1,
        records=b"\x00" * 300,
    )
    identity = {"topic_id": uuid.UUID(int=5)} if version >= 13 else {"topic": "orders"}
    response = FetchResponse(
        version=version,
        throttle_time_ms=throttle_ms,
        error_code=error_code,
        session_id=session_id,
        responses=[topic_cls(**identity, partitions=[partition])],
    )
    return encode_body(response, version)


@pytest.mark.parametrize("version", VERSIONS)
def test_response_session_for_every_version(version: int) -> None:
    body = _response(version, error_code=71, session_id=123_456_789)
    expected = (71, 123_456_789) if version >= 7 else (0, 0)
    assert fetch_response_session(version, body) == expected


def test_short_response_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError) as info:
        fetch_response_session(7, bytes(9))
    assert info.value.reason == "bad_fetch_response"


@pytest.mark.parametrize("version", VERSIONS)
def test_empty_fetch_response_for_every_version(version: int) -> None:
    body = empty_fetch_response(version, throttle_ms=5000, session_id=987_654)
    decoded = decode_body(FetchResponse, version, body)
    assert decoded.responses == []
    if version >= 1:
        assert decoded.throttle_time_ms == 5000
        assert read_throttle_ms(1, version, body) == 5000
    if version >= 7:
        assert (decoded.error_code, decoded.session_id) == (0, 987_654)
        assert fetch_response_session(version, body) == (0, 987_654)
    if version >= 12:
        assert body.endswith(b"\x01\x00")  # an empty topics array, then no tagged fields at all
        assert not decoded.tags and not decoded.unknown_tags


def test_empty_fetch_response_keeps_the_brokers_session_end_to_end() -> None:
    broker_body = _response(12, error_code=0, session_id=4242, throttle_ms=0)
    _error, session_id = fetch_response_session(12, broker_body)
    throttled = empty_fetch_response(12, throttle_ms=2500, session_id=session_id)
    assert fetch_response_session(12, throttled) == (0, 4242)
    assert read_throttle_ms(1, 12, throttled) == 2500
    assert len(throttled) < len(broker_body)


def test_empty_fetch_response_saturates_and_refuses_negative_throttle() -> None:
    assert read_throttle_ms(1, 11, empty_fetch_response(11, 2**40, 0)) == INT32_MAX
    with pytest.raises(ValueError):
        empty_fetch_response(11, -1, 0)


@pytest.mark.parametrize("version", [1, 7, 12, 16, 18])
def test_throttle_patch_on_a_full_fetch_response(version: int) -> None:
    body = _response(version, error_code=0, session_id=9)
    patched = bytearray(body)
    assert patch_throttle_ms(1, version, patched, 777)
    expected = decode_body(FetchResponse, version, body)
    expected.throttle_time_ms = 777
    assert decode_body(FetchResponse, version, patched) == expected


# --- junk -------------------------------------------------------------------------------------------


@settings(max_examples=300)
@given(version=st.integers(-3, 22), body=st.binary(max_size=40), cap=st.integers(0, 2**33))
def test_junk_raises_only_protocol_error(version: int, body: bytes, cap: int) -> None:
    for call in (
        lambda: fetch_request_limits(version, body),
        lambda: cap_fetch_request(version, bytearray(body), cap),
        lambda: fetch_response_session(version, body),
    ):
        with contextlib.suppress(ProtocolError):
            call()


@settings(max_examples=200)
@given(
    version=st.integers(3, FETCH_MAX_VERSION),
    body=st.binary(min_size=16, max_size=40),
    cap=st.integers(0, 2**33),
)
def test_cap_postconditions_on_arbitrary_limits(version: int, body: bytes, cap: int) -> None:
    before = fetch_request_limits(version, body)
    assert before is not None
    capped = bytearray(body)
    changed = cap_fetch_request(version, capped, cap)
    after = fetch_request_limits(version, capped)
    assert after is not None
    expected_max = min(before[1], min(cap, INT32_MAX))
    assert after == (min(before[0], expected_max), expected_max)
    assert changed is (after != before)
    assert (capped == body) is (not changed)
