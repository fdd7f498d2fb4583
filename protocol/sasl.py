"""Bodies of SaslHandshake (key 17, v0-1) and SaslAuthenticate (key 36, v0-2; v2 is flexible).

A body is what follows the Kafka request or response header. Decoding and encoding go through
kafka-python's generated codecs via protocol.codec_quirks, like every other codec-backed message here.

Every failure is a ProtocolError: an unsupported version ('unsupported_version'), a malformed,
truncated or over-long body ('bad_sasl_handshake_request', 'bad_sasl_authenticate_response', ...), a
null where Kafka's schema allows none, or a value that cannot be encoded ('unencodable_<message>').
SASL auth bytes carry passwords, SCRAM proofs and bearer tokens, so no error detail ever quotes them:
details name the version and what was wrong, never content.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.codec_quirks import decode_body, encode_body
from sluice.protocol.errors import ProtocolError

# The newest versions these codecs read; the proxy clamps ApiVersions answers to them.
SASL_MAX_VERSIONS: dict[int, int] = {
    ApiKey.SASL_HANDSHAKE: min(SaslHandshakeRequest.max_version, SaslHandshakeResponse.max_version),
    ApiKey.SASL_AUTHENTICATE: min(SaslAuthenticateRequest.max_version, SaslAuthenticateResponse.max_version),
}

_INT16_RANGE = range(-(2**15), 2**15)
_INT64_RANGE = range(-(2**63), 2**63)
_BytesLike = bytes | bytearray | memoryview

__all__ = [
    "SASL_MAX_VERSIONS",
    "SaslAuthenticateResult",
    "SaslHandshakeResult",
    "decode_authenticate_request",
    "decode_authenticate_response",
    "decode_handshake_request",
    "decode_handshake_response",
    "encode_authenticate_request",
    "encode_authenticate_response",
    "encode_handshake_request",
    "encode_handshake_response",
]


class SaslHandshakeResult(NamedTuple):
    error_code: int
    mechanisms: list[str]


class SaslAuthenticateResult(NamedTuple):
    error_code: int
    error_message: str | None
    auth_bytes: bytes
    session_lifetime_ms: int  # 0 before v1, which has no such field


def decode_handshake_request(version: int, body: _BytesLike) -> str:
    """The mechanism the client chose."""
    mechanism: str = decode_body(SaslHandshakeRequest, version, body).mechanism
    return mechanism


def decode_handshake_response(version: int, body: _BytesLike) -> SaslHandshakeResult:
    message = decode_body(SaslHandshakeResponse, version, body)  # nulls are refused there (Q9)
    return SaslHandshakeResult(message.error_code, list(message.mechanisms))


def decode_authenticate_request(version: int, body: _BytesLike) -> bytes:
    """The client's SASL token."""
    return bytes(decode_body(SaslAuthenticateRequest, version, body).auth_bytes)


def decode_authenticate_response(version: int, body: _BytesLike) -> SaslAuthenticateResult:
    message = decode_body(SaslAuthenticateResponse, version, body)
    lifetime = message.session_lifetime_ms if version >= 1 else 0
    return SaslAuthenticateResult(
        message.error_code, message.error_message, bytes(message.auth_bytes), lifetime
    )


def encode_handshake_request(version: int, mechanism: str) -> bytes:
    _require(SaslHandshakeRequest, version, isinstance(mechanism, str), "mechanism must be a str")
    return _encode(SaslHandshakeRequest, version, mechanism=mechanism)


def encode_handshake_response(version: int, error_code: int, mechanisms: list[str]) -> bytes:
    _require_error_code(SaslHandshakeResponse, version, error_code)
    valid = isinstance(mechanisms, list | tuple) and all(isinstance(m, str) for m in mechanisms)
    _require(SaslHandshakeResponse, version, valid, "mechanisms must be a list of str")
    return _encode(SaslHandshakeResponse, version, error_code=error_code, mechanisms=list(mechanisms))


def encode_authenticate_request(version: int, auth_bytes: bytes) -> bytes:
    _require_bytes(SaslAuthenticateRequest, version, auth_bytes)
    return _encode(SaslAuthenticateRequest, version, auth_bytes=bytes(auth_bytes))


def encode_authenticate_response(
    version: int,
    error_code: int,
    error_message: str | None,
    auth_bytes: bytes,
    session_lifetime_ms: int = 0,
) -> bytes:
    """Encode a SaslAuthenticate response body.

    `session_lifetime_ms` is silently left out before v1, as Kafka does: the field is marked ignorable.
    """
    cls = SaslAuthenticateResponse
    _require_error_code(cls, version, error_code)
    _require(cls, version, error_message is None or isinstance(error_message, str), "error_message type")
    _require_bytes(cls, version, auth_bytes)
    _require(
        cls,
        version,
        _is_int(session_lifetime_ms) and session_lifetime_ms in _INT64_RANGE,
        "session_lifetime_ms out of int64 range",
    )
    return _encode(
        cls,
        version,
        error_code=error_code,
        error_message=error_message,
        auth_bytes=bytes(auth_bytes),
        session_lifetime_ms=session_lifetime_ms,
    )


def _encode(message_class: type[ApiMessage], version: int, **fields: Any) -> bytes:
    _check_version(message_class, version)
    message = message_class(version=version, **fields)
    try:
        return encode_body(message, version)
    except (struct.error, ValueError, TypeError, OverflowError, UnicodeEncodeError) as exc:
        # The exception text may quote the value (a token); keep only its type.
        raise ProtocolError(_unencodable(message_class), f"v{version}: {type(exc).__name__}") from None


def _check_version(message_class: type[ApiMessage], version: int) -> None:
    if not (_is_int(version) and 0 <= version <= message_class.max_version):
        raise ProtocolError("unsupported_version", f"{message_class.name} v{version}")


def _require(message_class: type[ApiMessage], version: int, condition: bool, what: str) -> None:
    _check_version(message_class, version)
    if not condition:
        raise ProtocolError(_unencodable(message_class), f"v{version}: {what}")


def _require_error_code(message_class: type[ApiMessage], version: int, error_code: int) -> None:
    valid = _is_int(error_code) and error_code in _INT16_RANGE
    _require(message_class, version, valid, "error_code out of int16 range")


def _require_bytes(message_class: type[ApiMessage], version: int, auth_bytes: bytes) -> None:
    # Kafka's AuthBytes is not nullable; kafka-python would happily write a null for None.
    _require(message_class, version, isinstance(auth_bytes, _BytesLike), "auth_bytes must be bytes")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _unencodable(message_class: type[ApiMessage]) -> str:
    return "unencodable_" + _snake(message_class.name)


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() and i else c.lower() for i, c in enumerate(name))
