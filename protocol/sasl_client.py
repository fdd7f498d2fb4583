"""The client side of SASL PLAIN and SCRAM-SHA-256/512 (RFC 4616, RFC 5802), as Kafka's clients speak them.

Sans-IO: tokens in, tokens out. Used by the proxy's own Kafka client to authenticate itself.

* PLAIN: one token, `authzid NUL username NUL password` with an empty authzid (Kafka's PlainSaslServer
  accepts only an authzid equal to the username, so none is sent).
* SCRAM: client-first (`n,,n=<user>,r=<nonce>`), then, from the server's first message, the salted password
  (PBKDF2, the slow step: `salt_password` is a separate function so the caller can run it off the event
  loop and cache it) and client-final with the proof; finally the server's signature is verified, so a
  server that does not know the password cannot pretend to. As Kafka's ScramSaslClient: no SASLprep, the
  username escaped (`=` as `=3D`, `,` as `=2C`), the server's nonce must extend ours, and fewer than 4096
  iterations are refused (Kafka's minimum; more than 16384, Kafka's maximum, too: a hostile server could
  otherwise make the client burn CPU).

Errors are SaslClientError with a message that never quotes a password, a proof or a server token.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from typing import NamedTuple

from sluice.protocol.errors import ProtocolError

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)
_HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
_GS2_HEADER = "n,,"


class SaslClientError(ProtocolError):
    """The exchange cannot go on: a malformed or dishonest server message. Never carries a secret.

    A ProtocolError like every other refusal of bytes a peer sent (reason `bad_sasl_server_message`)."""

    def __init__(self, message: str) -> None:
        super().__init__("bad_sasl_server_message", message)


class SaltParams(NamedTuple):
    salt: bytes
    iterations: int


def plain_token(username: str, password: str) -> bytes:
    return b"\0" + username.encode("utf-8") + b"\0" + password.encode("utf-8")


def salt_password(hash_name: str, password: str, params: SaltParams) -> bytes:
    """RFC 5802's Hi(password, salt, i): PBKDF2-HMAC. Slow on purpose; call it off the event loop."""
    return hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), params.salt, params.iterations)


class ScramClient:
    """One SCRAM exchange: client_first(), server_first(msg), client_final(salted), server_final(msg)."""

    __slots__ = (
        "_auth_message",
        "_bare",
        "_done",
        "_hash",
        "_nonce",
        "_salted",
        "_without_proof",
        "mechanism",
    )

    def __init__(self, mechanism: str, username: str, nonce: str | None = None) -> None:
        if mechanism not in _HASHES:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.mechanism = mechanism
        self._hash = _HASHES[mechanism]
        self._nonce = nonce if nonce is not None else secrets.token_urlsafe(24)
        self._bare = f"n={_escape(username)},r={self._nonce}"
        self._without_proof = ""
        self._auth_message = ""
        self._salted = b""
        self._done = False

    @property
    def hash_name(self) -> str:
        return self._hash

    def client_first(self) -> bytes:
        return (_GS2_HEADER + self._bare).encode("utf-8")

    def server_first(self, message: bytes) -> SaltParams:
        """Read the server's first message: its nonce, the salt and the iteration count."""
        attributes = _attributes(message, "server-first")
        if "e" in attributes:
            raise SaslClientError(f"the server refused the exchange: {_safe_error(attributes['e'])}")
        nonce, salt_text, count = attributes.get("r"), attributes.get("s"), attributes.get("i")
        if nonce is None or salt_text is None or count is None:
            raise SaslClientError("server-first message lacks r, s or i")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise SaslClientError("server-first message: the server's nonce does not extend the client's")
        # isascii(): str.isdigit() also accepts "²", which int() then refuses.
        if not (count.isascii() and count.isdigit()) or not MIN_ITERATIONS <= int(count) <= MAX_ITERATIONS:
            raise SaslClientError(
                f"server-first message: iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS} (Kafka's range)"
            )
        try:
            salt = base64.b64decode(salt_text, validate=True)
        except (binascii.Error, ValueError):
            raise SaslClientError("server-first message: the salt is not base64") from None
        self._without_proof = f"c={base64.b64encode(_GS2_HEADER.encode()).decode()},r={nonce}"
        self._auth_message = f"{self._bare},{message.decode('utf-8')},{self._without_proof}"
        return SaltParams(salt, int(count))

    def client_final(self, salted_password: bytes) -> bytes:
        if not self._auth_message:
            raise SaslClientError("client-final before the server's first message")
        self._salted = salted_password
        client_key = _hmac(self._hash, salted_password, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        signature = _hmac(self._hash, stored_key, self._auth_message.encode("utf-8"))
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return f"{self._without_proof},p={base64.b64encode(proof).decode()}".encode()

    def server_final(self, message: bytes) -> None:
        """Check the server's signature; raises SaslClientError if it proves nothing."""
        attributes = _attributes(message, "server-final")
        if "e" in attributes:
            raise SaslClientError(f"the server refused the proof: {_safe_error(attributes['e'])}")
        verifier = attributes.get("v")
        if verifier is None or not self._salted:
            raise SaslClientError("server-final message lacks the server signature")
        server_key = _hmac(self._hash, self._salted, b"Server Key")
        expected = _hmac(self._hash, server_key, self._auth_message.encode("utf-8"))
        try:
            given = base64.b64decode(verifier, validate=True)
        except (binascii.Error, ValueError):
            raise SaslClientError("server-final message: the signature is not base64") from None
        if not hmac.compare_digest(expected, given):
            raise SaslClientError("the server's signature does not match: it does not know the password")
        self._done = True

    @property
    def complete(self) -> bool:
        return self._done


def _escape(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


def _hmac(hash_name: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hash_name).digest()


def _attributes(message: bytes, what: str) -> dict[str, str]:
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslClientError(f"{what} message is not UTF-8") from None
    attributes: dict[str, str] = {}
    for part in text.split(","):
        name, equals, value = part.partition("=")
        if len(name) != 1 or not equals:
            raise SaslClientError(f"{what} message is malformed")
        attributes.setdefault(name, value)
    return attributes


_ERROR_VALUE = frozenset("abcdefghijklmnopqrstuvwxyz-")


def _safe_error(value: str) -> str:
    # RFC 5802's server-error-value is a fixed vocabulary; anything else is not repeated verbatim.
    return value if value and set(value) <= _ERROR_VALUE and len(value) <= 64 else "unrecognised error"
