"""Request/response headers against kafka-python's own header codecs, and malformed headers."""

from __future__ import annotations

import io
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.api_header import RequestHeader as KafkaRequestHeader
from kafka.protocol.api_header import ResponseHeader as KafkaResponseHeader

from sluice.protocol.apis import response_header_version
from sluice.protocol.errors import ProtocolError
from sluice.protocol.headers import (
    RequestHeader,
    encode_request_header,
    frame,
    parse_request_header,
    read_correlation_id,
    response_header_size,
)
from sluice.protocol.primitives import encode_uvarint, skip_tagged_fields

METADATA, API_VERSIONS, CONTROLLED_SHUTDOWN, FETCH = 3, 18, 7, 1


def _kafka_request_header(key: int, version: int, corr: int, client_id: str | None, flexible: bool) -> bytes:
    header = KafkaRequestHeader(
        request_api_key=key, request_api_version=version, correlation_id=corr, client_id=client_id
    )
    return bytes(header.encode(flexible=flexible))


@pytest.mark.parametrize(
    ("key", "version", "flexible"),
    [
        (METADATA, 1, False),
        (METADATA, 8, False),
        (METADATA, 9, True),
        (FETCH, 12, True),
        (API_VERSIONS, 3, True),
    ],
)
@pytest.mark.parametrize("client_id", ["rdkafka", "", None, "ünïcode-id"])
def test_request_header_v1_and_v2_parse_what_kafka_python_encodes(
    key: int, version: int, flexible: bool, client_id: str | None
) -> None:
    raw = _kafka_request_header(key, version, 123456, client_id, flexible)
    header = parse_request_header(frame(raw + b"body"))
    assert header == RequestHeader(key, version, 123456, client_id, len(raw))


@pytest.mark.parametrize(
    ("key", "version", "flexible"), [(METADATA, 0, False), (METADATA, 12, True), (API_VERSIONS, 4, True)]
)
def test_encode_request_header_matches_kafka_python(key: int, version: int, flexible: bool) -> None:
    for client_id in ("sluice", None):
        ours = encode_request_header(key, version, -7, client_id)
        assert ours == _kafka_request_header(key, version, -7, client_id, flexible)
        decoded = KafkaRequestHeader.decode(io.BytesIO(ours), flexible=flexible)
        assert (decoded.request_api_key, decoded.correlation_id, decoded.client_id) == (key, -7, client_id)


def test_request_header_v2_skips_tagged_fields() -> None:
    base = _kafka_request_header(METADATA, 12, 9, "cid", flexible=False)
    tagged = encode_uvarint(2) + encode_uvarint(0) + encode_uvarint(3) + b"abc"
    tagged += encode_uvarint(300) + encode_uvarint(130) + b"t" * 130
    header = parse_request_header(frame(base + tagged + b"\x01\x02"))
    assert header.client_id == "cid"
    assert header.size == len(base) + len(tagged)


def test_controlled_shutdown_v0_uses_header_v0_without_client_id() -> None:
    raw = struct.pack(">hhi", CONTROLLED_SHUTDOWN, 0, 42) + struct.pack(">i", 1)
    assert parse_request_header(frame(raw)) == RequestHeader(CONTROLLED_SHUTDOWN, 0, 42, None, 8)
    assert encode_request_header(CONTROLLED_SHUTDOWN, 0, 42, "ignored") == raw[:8]


def test_controlled_shutdown_v1_has_a_client_id() -> None:
    raw = _kafka_request_header(CONTROLLED_SHUTDOWN, 1, 42, "broker-1", flexible=False)
    assert parse_request_header(frame(raw)).client_id == "broker-1"


def test_unknown_api_key_is_read_as_header_v1() -> None:
    raw = _kafka_request_header(999, 3, 5, "future", flexible=False)
    header = parse_request_header(frame(raw + b"\x00"))
    assert header == RequestHeader(999, 3, 5, "future", len(raw))


def test_known_api_above_its_max_version_stays_flexible() -> None:
    raw = _kafka_request_header(FETCH, 99, 5, "newer-client", flexible=True)
    assert parse_request_header(frame(raw)).size == len(raw)


def test_invalid_utf8_client_id_is_decoded_with_replacement() -> None:
    raw = struct.pack(">hhih", METADATA, 1, 1, 2) + b"\xff\xfe"
    assert parse_request_header(frame(raw)).client_id == "\ufffd\ufffd"


def test_client_id_from_a_memoryview_and_a_mutable_buffer() -> None:
    framed = frame(_kafka_request_header(METADATA, 1, 1, "view-id", flexible=False))
    assert parse_request_header(memoryview(framed)).client_id == "view-id"
    assert parse_request_header(memoryview(bytearray(framed))).client_id == "view-id"


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x00\x03\x00\x01",  # no correlation id
        struct.pack(">hhi", METADATA, 1, 1),  # no client_id length
        struct.pack(">hhih", METADATA, 1, 1, 10) + b"short",  # client_id runs past the frame
        struct.pack(">hhih", METADATA, 1, 1, -2),  # only -1 means null
        struct.pack(">hhih", METADATA, 9, 1, -1),  # flexible: tagged-field block missing
        struct.pack(">hhih", METADATA, 9, 1, -1) + b"\x01\x00\x05ab",  # tagged field runs past the frame
        struct.pack(">hhih", METADATA, 9, 1, -1) + b"\xff\xff\xff\xff\xff\x01",  # 6-byte varint
    ],
)
def test_malformed_request_header_is_bad_request_header(raw: bytes) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_request_header(frame(raw))
    assert info.value.reason == "bad_request_header"


@given(st.binary(max_size=64))
def test_any_bytes_give_a_header_or_protocol_error(data: bytes) -> None:
    try:
        header = parse_request_header(data)
    except ProtocolError as exc:
        assert exc.reason == "bad_request_header"
    else:
        assert 8 <= header.size <= len(data) - 4


@given(
    key=st.integers(min_value=-(2**15), max_value=2**15 - 1),
    version=st.integers(min_value=-(2**15), max_value=2**15 - 1),
    corr=st.integers(min_value=-(2**31), max_value=2**31 - 1),
    client_id=st.none() | st.text(max_size=40),
)
def test_encode_then_parse_round_trips(key: int, version: int, corr: int, client_id: str | None) -> None:
    raw = encode_request_header(key, version, corr, client_id)
    header = parse_request_header(frame(raw + b"rest"))
    expected_client = None if (key, version) == (CONTROLLED_SHUTDOWN, 0) else client_id
    assert header == RequestHeader(key, version, corr, expected_client, len(raw))


@pytest.mark.parametrize(
    ("key", "version", "flexible"),
    [(METADATA, 8, False), (METADATA, 9, True), (FETCH, 11, False), (FETCH, 12, True), (999, 0, False)],
)
def test_response_header_size_matches_kafka_python(key: int, version: int, flexible: bool) -> None:
    raw = bytes(KafkaResponseHeader(correlation_id=77).encode(flexible=flexible))
    framed = frame(raw + b"\x00\x00\x00\x00body")
    assert response_header_size(key, version, framed) == len(raw)
    assert read_correlation_id(framed) == 77


@pytest.mark.parametrize("version", range(5))
def test_api_versions_response_header_is_always_v0(version: int) -> None:
    framed = frame(struct.pack(">ih", 5, 0) + b"\x00")
    assert response_header_size(API_VERSIONS, version, framed) == 4


def test_response_header_v1_with_tagged_fields() -> None:
    tagged = encode_uvarint(1) + encode_uvarint(7) + encode_uvarint(2) + b"zz"
    framed = frame(struct.pack(">i", 3) + tagged + b"body")
    assert response_header_size(METADATA, 12, framed) == 4 + len(tagged)


@pytest.mark.parametrize(
    ("version", "raw"),
    [(0, b"\x00\x00\x01"), (9, b"\x00\x00\x00\x01"), (9, b"\x00\x00\x00\x01\x02\x00\x00")],
)
def test_malformed_response_header_is_bad_response_header(version: int, raw: bytes) -> None:
    with pytest.raises(ProtocolError) as info:
        response_header_size(METADATA, version, frame(raw))
    assert info.value.reason == "bad_response_header"


def test_read_correlation_id_of_a_short_frame_is_an_error() -> None:
    with pytest.raises(ProtocolError):
        read_correlation_id(b"\x00\x00\x00\x02\x00\x01")


@given(
    key=st.integers(min_value=-5, max_value=100),
    version=st.integers(min_value=-1, max_value=20),
    data=st.binary(max_size=40),
)
def test_response_header_size_of_any_bytes_is_a_size_or_protocol_error(
    key: int, version: int, data: bytes
) -> None:
    try:
        size = response_header_size(key, version, data)
    except ProtocolError as exc:
        assert exc.reason == "bad_response_header"
    else:
        assert 4 <= size <= len(data) - 4


@given(
    key=st.integers(min_value=-5, max_value=100),
    version=st.integers(min_value=-1, max_value=20),
    tagged=st.sampled_from([b"", b"\x00", b"\x01\x07\x02zz", b"\x01\x07", b"\x80"]),
)
def test_response_header_size_is_the_header_version_the_api_table_gives(
    key: int, version: int, tagged: bytes
) -> None:
    """The size follows the API table's header version for every key (ApiVersions, unknown ones, negative
    ones) and version: 4 for header v0, else the tagged-field block read as skip_tagged_fields reads it."""
    framed = frame(struct.pack(">i", 3) + tagged + b"body"[: 4 - len(tagged)])
    if response_header_version(key, version) == 0:
        assert response_header_size(key, version, framed) == 4
        return
    try:
        expected: int | str = skip_tagged_fields(framed, 8) - 4
    except ProtocolError:
        expected = "bad_response_header"
    try:
        got: int | str = response_header_size(key, version, framed)
    except ProtocolError as exc:
        got = exc.reason
    assert got == expected


def test_frame_prefixes_the_length() -> None:
    assert frame(b"abc") == b"\x00\x00\x00\x03abc"
