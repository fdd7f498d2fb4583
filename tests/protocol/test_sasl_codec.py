"""SaslHandshake (key 17) and SaslAuthenticate (key 36) bodies: protocol/sasl.py."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import pytest
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.errors import ProtocolError
from sluice.protocol.primitives import encode_uvarint
from sluice.protocol.sasl import (
    SaslAuthenticateResult,
    SaslHandshakeResult,
    decode_authenticate_request,
    decode_authenticate_response,
    decode_handshake_request,
    decode_handshake_response,
    encode_authenticate_request,
    encode_authenticate_response,
    encode_handshake_request,
    encode_handshake_response,
)

Decoder = Callable[[int, Any], Any]
Maker = Callable[[], Any]

SECRET = b"\x00alice\x00hunter2-very-secret"
SASL_AUTHENTICATION_FAILED = 58


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def _compact_bytes(raw: bytes) -> bytes:
    return encode_uvarint(len(raw) + 1) + raw


def test_api_keys_are_kafkas() -> None:
    assert ApiKey.SASL_HANDSHAKE == SaslHandshakeRequest.API_KEY == 17
    assert ApiKey.SASL_AUTHENTICATE == SaslAuthenticateRequest.API_KEY == 36


# --- SaslHandshake ---------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1])
def test_handshake_request_wire_format_and_round_trip(version: int) -> None:
    body = encode_handshake_request(version, "SCRAM-SHA-256")
    assert body == _string("SCRAM-SHA-256")
    assert decode_handshake_request(version, body) == "SCRAM-SHA-256"


@pytest.mark.parametrize("version", [0, 1])
def test_handshake_request_matches_kafka_python_encoder(version: int) -> None:
    theirs = bytes(SaslHandshakeRequest(version=version, mechanism="OAUTHBEARER").encode(version=version))
    assert encode_handshake_request(version, "OAUTHBEARER") == theirs
    assert decode_handshake_request(version, theirs) == "OAUTHBEARER"


@pytest.mark.parametrize("version", [0, 1])
def test_handshake_response_wire_format_and_round_trip(version: int) -> None:
    body = encode_handshake_response(version, 33, ["PLAIN", "SCRAM-SHA-512"])
    assert body == struct.pack(">hi", 33, 2) + _string("PLAIN") + _string("SCRAM-SHA-512")
    assert decode_handshake_response(version, body) == SaslHandshakeResult(33, ["PLAIN", "SCRAM-SHA-512"])


@pytest.mark.parametrize("version", [0, 1])
def test_handshake_response_matches_kafka_python_encoder(version: int) -> None:
    message = SaslHandshakeResponse(version=version, error_code=0, mechanisms=["GSSAPI", "PLAIN"])
    theirs = bytes(message.encode(version=version))
    assert encode_handshake_response(version, 0, ["GSSAPI", "PLAIN"]) == theirs
    assert decode_handshake_response(version, theirs) == SaslHandshakeResult(0, ["GSSAPI", "PLAIN"])


def test_handshake_response_with_no_mechanisms() -> None:
    body = encode_handshake_response(1, 0, [])
    assert decode_handshake_response(1, body) == SaslHandshakeResult(0, [])


def test_handshake_decoders_accept_a_memoryview() -> None:
    body = memoryview(bytearray(encode_handshake_request(1, "PLAIN")))
    assert decode_handshake_request(1, body) == "PLAIN"


# --- SaslAuthenticate ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2])
def test_authenticate_request_round_trip(version: int) -> None:
    body = encode_authenticate_request(version, SECRET)
    expected = _compact_bytes(SECRET) + b"\x00" if version == 2 else struct.pack(">i", len(SECRET)) + SECRET
    assert body == expected
    decoded = decode_authenticate_request(version, body)
    assert decoded == SECRET
    assert type(decoded) is bytes


@pytest.mark.parametrize("version", [0, 1, 2])
def test_authenticate_request_matches_kafka_python_encoder(version: int) -> None:
    theirs = bytes(
        SaslAuthenticateRequest(version=version, auth_bytes=b"n,,n=bob,r=abc").encode(version=version)
    )
    assert encode_authenticate_request(version, b"n,,n=bob,r=abc") == theirs
    assert decode_authenticate_request(version, theirs) == b"n,,n=bob,r=abc"


def test_authenticate_request_accepts_an_empty_token_and_memoryview() -> None:
    assert decode_authenticate_request(2, memoryview(encode_authenticate_request(2, b""))) == b""
    assert encode_authenticate_request(0, memoryview(b"abc")) == b"\x00\x00\x00\x03abc"


def test_authenticate_response_v0_wire_format() -> None:
    body = encode_authenticate_response(0, 58, "Authentication failed", b"", session_lifetime_ms=0)
    assert body == struct.pack(">h", 58) + _string("Authentication failed") + struct.pack(">i", 0)


def test_authenticate_response_v1_carries_session_lifetime() -> None:
    body = encode_authenticate_response(1, 0, None, b"v=abc", session_lifetime_ms=3_600_000)
    assert body == struct.pack(">hh", 0, -1) + struct.pack(">i", 5) + b"v=abc" + struct.pack(">q", 3_600_000)
    assert decode_authenticate_response(1, body) == SaslAuthenticateResult(0, None, b"v=abc", 3_600_000)


def test_authenticate_response_v2_is_flexible() -> None:
    body = encode_authenticate_response(2, 0, "ok", b"v=abc", session_lifetime_ms=7)
    assert body == (
        struct.pack(">h", 0)
        + _compact_bytes(b"ok")
        + _compact_bytes(b"v=abc")
        + struct.pack(">q", 7)
        + b"\x00"
    )
    assert decode_authenticate_response(2, body) == SaslAuthenticateResult(0, "ok", b"v=abc", 7)


def test_authenticate_response_v0_has_no_session_lifetime() -> None:
    # The field is ignorable in Kafka's schema: written only from v1, decoded as 0 before.
    assert encode_authenticate_response(
        0, 0, None, b"x", session_lifetime_ms=99
    ) == encode_authenticate_response(0, 0, None, b"x")
    assert (
        decode_authenticate_response(
            0, encode_authenticate_response(0, 0, None, b"x", 99)
        ).session_lifetime_ms
        == 0
    )


@pytest.mark.parametrize("version", [0, 1, 2])
@pytest.mark.parametrize("error_message", [None, "", "Authentication failed: Invalid username or password"])
def test_authenticate_response_matches_kafka_python_encoder(version: int, error_message: str | None) -> None:
    message = SaslAuthenticateResponse(
        version=version,
        error_code=SASL_AUTHENTICATION_FAILED,
        error_message=error_message,
        auth_bytes=b"e=invalid-proof",
        session_lifetime_ms=123,
    )
    theirs = bytes(message.encode(version=version))
    ours = encode_authenticate_response(
        version, SASL_AUTHENTICATION_FAILED, error_message, b"e=invalid-proof", 123
    )
    assert ours == theirs
    expected_lifetime = 123 if version >= 1 else 0
    assert decode_authenticate_response(version, theirs) == SaslAuthenticateResult(
        SASL_AUTHENTICATION_FAILED, error_message, b"e=invalid-proof", expected_lifetime
    )


def test_authenticate_v2_bodies_with_unknown_tagged_fields_decode() -> None:
    tags = encode_uvarint(1) + encode_uvarint(9) + encode_uvarint(2) + b"zz"
    request = _compact_bytes(b"token") + tags
    assert decode_authenticate_request(2, request) == b"token"
    response = struct.pack(">h", 0) + b"\x00" + _compact_bytes(b"") + struct.pack(">q", 0) + tags
    assert decode_authenticate_response(2, response) == SaslAuthenticateResult(0, None, b"", 0)


# --- malformed input -------------------------------------------------------------------------------

_DECODERS = [
    (decode_handshake_request, 1, lambda: encode_handshake_request(1, "PLAIN")),
    (decode_handshake_response, 1, lambda: encode_handshake_response(1, 0, ["PLAIN", "OAUTHBEARER"])),
    (decode_authenticate_request, 0, lambda: encode_authenticate_request(0, SECRET)),
    (decode_authenticate_request, 2, lambda: encode_authenticate_request(2, SECRET)),
    (decode_authenticate_response, 1, lambda: encode_authenticate_response(1, 0, "m", SECRET, 5)),
    (decode_authenticate_response, 2, lambda: encode_authenticate_response(2, 0, "m", SECRET, 5)),
]


@pytest.mark.parametrize(("decode", "version", "make_body"), _DECODERS)
def test_every_truncation_is_a_protocol_error(decode: Decoder, version: int, make_body: Maker) -> None:
    body = make_body()
    for cut in range(len(body)):
        with pytest.raises(ProtocolError) as raised:
            decode(version, body[:cut])
        assert raised.value.reason.startswith("bad_sasl_")
        assert b"hunter2" not in str(raised.value).encode()


@pytest.mark.parametrize(("decode", "version", "make_body"), _DECODERS)
def test_trailing_bytes_are_a_protocol_error(decode: Decoder, version: int, make_body: Maker) -> None:
    with pytest.raises(ProtocolError, match="trailing"):
        decode(version, make_body() + b"\x00")


@pytest.mark.parametrize(
    ("decode", "version"),
    [
        (decode_handshake_request, 2),
        (decode_handshake_response, 2),
        (decode_authenticate_request, 3),
        (decode_authenticate_response, 3),
        (decode_authenticate_request, -1),
    ],
)
def test_decoding_an_unsupported_version_is_a_protocol_error(decode: Decoder, version: int) -> None:
    with pytest.raises(ProtocolError) as raised:
        decode(version, b"\x00\x00\x00\x00")
    assert raised.value.reason == "unsupported_version"


@pytest.mark.parametrize(
    "encode",
    [
        lambda: encode_handshake_request(2, "PLAIN"),
        lambda: encode_handshake_response(2, 0, []),
        lambda: encode_authenticate_request(3, b""),
        lambda: encode_authenticate_response(3, 0, None, b""),
        lambda: encode_authenticate_response(-1, 0, None, b""),
    ],
)
def test_encoding_an_unsupported_version_is_a_protocol_error(encode: Maker) -> None:
    with pytest.raises(ProtocolError) as raised:
        encode()
    assert raised.value.reason == "unsupported_version"


@pytest.mark.parametrize(
    ("decode", "version", "body", "what"),
    [
        (decode_handshake_request, 0, b"\xff\xff", "null mechanism"),
        (decode_handshake_response, 0, b"\x00\x00\xff\xff\xff\xff", "null mechanisms"),
        (decode_handshake_response, 0, b"\x00\x00\x00\x00\x00\x01\xff\xff", "null entry in mechanisms"),
        (decode_authenticate_request, 0, b"\xff\xff\xff\xff", "null auth_bytes"),
        (decode_authenticate_request, 2, b"\x00\x00", "null auth_bytes"),
        (decode_authenticate_response, 0, b"\x00\x00\xff\xff\xff\xff\xff\xff", "null auth_bytes"),
    ],
)
def test_nulls_kafka_does_not_allow_are_protocol_errors(
    decode: Decoder, version: int, body: bytes, what: str
) -> None:
    with pytest.raises(ProtocolError, match=what) as raised:
        decode(version, body)
    assert raised.value.reason.startswith("bad_sasl_")


def test_a_length_beyond_the_body_is_a_protocol_error_without_the_token() -> None:
    body = struct.pack(">i", len(SECRET) + 10) + SECRET
    with pytest.raises(ProtocolError) as raised:
        decode_authenticate_request(0, body)
    assert raised.value.reason == "bad_sasl_authenticate_request"
    assert "hunter2" not in str(raised.value)


def test_an_error_message_that_is_not_utf8_is_a_protocol_error() -> None:
    body = struct.pack(">hh", 58, 2) + b"\xff\xfe" + struct.pack(">i", 0)
    with pytest.raises(ProtocolError) as raised:
        decode_authenticate_response(0, body)
    assert raised.value.reason == "bad_sasl_authenticate_response"


@pytest.mark.parametrize(
    ("encode", "what"),
    [
        (lambda: encode_handshake_request(0, None), "mechanism"),  # type: ignore[arg-type]
        (lambda: encode_handshake_response(0, 0, ["PLAIN", None]), "mechanisms"),  # type: ignore[list-item]
        (lambda: encode_handshake_response(0, 40_000, ["PLAIN"]), "error_code"),
        (lambda: encode_authenticate_request(0, None), "auth_bytes"),  # type: ignore[arg-type]
        (lambda: encode_authenticate_response(1, 0, None, "text"), "auth_bytes"),  # type: ignore[arg-type]
        (lambda: encode_authenticate_response(1, 0, b"x", b""), "error_message"),  # type: ignore[arg-type]
        (lambda: encode_authenticate_response(1, 0, None, b"", 2**63), "session_lifetime_ms"),
        (
            lambda: encode_handshake_request(0, "x" * 40_000),
            "error",
        ),  # struct.error: a string longer than int16
    ],
)
def test_unencodable_values_are_protocol_errors(encode: Maker, what: str) -> None:
    with pytest.raises(ProtocolError) as raised:
        encode()
    assert raised.value.reason.startswith("unencodable_sasl_")
    assert what in raised.value.detail


def test_an_unencodable_token_is_not_quoted_in_the_error() -> None:
    with pytest.raises(ProtocolError) as raised:
        encode_authenticate_response(0, 0, "hunter2" * 10_000, SECRET)
    assert raised.value.reason == "unencodable_sasl_authenticate_response"
    assert "hunter2" not in str(raised.value)
