"""The proxy authenticates its own connections: SaslHandshake v1, then SaslAuthenticate (PLAIN or SCRAM).

The tokens come from `protocol/sasl_client.py` (SCRAM through scramp). SCRAM's client-final step salts the
password (PBKDF2, thousands of HMAC rounds): it runs in a worker thread, never on the event loop (hashlib
releases the GIL). scramp takes no precomputed salted password, so each new broker connection pays for it
once, a few milliseconds of a worker thread, as each connection of Kafka's own clients does.

KIP-368: when the broker gives the session a lifetime, the connection is marked to expire a little before
it (85 %, as Kafka's clients re-authenticate between 85 and 95 %); the pool then opens a fresh connection
instead of re-authenticating on the old one.

No message here quotes the password, a token or the broker's challenge: the broker's own error message
(Kafka's are fixed texts such as "Authentication failed: Invalid username or password") is the only detail.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Protocol

from kafka.errors import UnsupportedSaslMechanismError

from sluice.config.client_settings import ClientSasl
from sluice.protocol.client_requests import SASL_AUTHENTICATE, SASL_HANDSHAKE
from sluice.protocol.sasl import (
    decode_authenticate_response,
    decode_handshake_response,
    encode_authenticate_request,
    encode_handshake_request,
)
from sluice.protocol.sasl_client import PLAIN, SaslClientError, ScramClient, plain_token

from .errors import AuthenticationFailed, error_name

UNSUPPORTED_SASL_MECHANISM = UnsupportedSaslMechanismError.errno
_LIFETIME_SHARE = 0.85


class SaslConnection(Protocol):
    """What authentication needs of a broker connection (connection.py's BrokerConnection). A Protocol, so
    this module does not import connection.py, which calls it while opening a connection."""

    label: str
    versions: Mapping[int, tuple[int, int]]
    expires_at: float | None

    def version_for(self, api_key: int, what: str) -> int: ...

    async def request(self, api_key: int, version: int, body: bytes, timeout_s: float) -> memoryview: ...


async def authenticate(connection: SaslConnection, sasl: ClientSasl, timeout_s: float) -> None:
    where = f"{connection.label}: SASL {sasl.mechanism} as {sasl.username!r}"
    if SASL_HANDSHAKE not in connection.versions or SASL_AUTHENTICATE not in connection.versions:
        raise AuthenticationFailed(f"{where}: the broker offers no SaslHandshake v1 and SaslAuthenticate")
    handshake_version = connection.version_for(SASL_HANDSHAKE, "SaslHandshake")
    answer = decode_handshake_response(
        handshake_version,
        await connection.request(
            SASL_HANDSHAKE,
            handshake_version,
            encode_handshake_request(handshake_version, sasl.mechanism),
            timeout_s,
        ),
    )
    if answer.error_code == UNSUPPORTED_SASL_MECHANISM:
        enabled = ", ".join(answer.mechanisms) or "none"
        raise AuthenticationFailed(f"{where}: the broker does not enable it (enabled: {enabled})")
    if answer.error_code:
        raise AuthenticationFailed(f"{where}: SaslHandshake answered {error_name(answer.error_code)}")
    version = connection.version_for(SASL_AUTHENTICATE, "SaslAuthenticate")
    password = sasl.password.reveal()
    try:
        if sasl.mechanism == PLAIN:
            lifetime_ms = (
                await _step(connection, version, plain_token(sasl.username, password), timeout_s, where)
            )[1]
        else:
            scram = ScramClient(sasl.mechanism, sasl.username, password)
            server_first, _ = await _step(connection, version, scram.client_first(), timeout_s, where)
            scram.server_first(server_first)
            client_final = await asyncio.get_running_loop().run_in_executor(None, scram.client_final)
            server_final, lifetime_ms = await _step(connection, version, client_final, timeout_s, where)
            scram.server_final(server_final)
    except SaslClientError as exc:
        raise AuthenticationFailed(f"{where}: {exc}") from None
    if lifetime_ms > 0:
        connection.expires_at = asyncio.get_running_loop().time() + lifetime_ms / 1000 * _LIFETIME_SHARE


async def _step(
    connection: SaslConnection, version: int, token: bytes, timeout_s: float, where: str
) -> tuple[bytes, int]:
    body = await connection.request(
        SASL_AUTHENTICATE, version, encode_authenticate_request(version, token), timeout_s
    )
    answer = decode_authenticate_response(version, body)
    if answer.error_code:
        # The broker's message is one of Kafka's fixed texts; it holds no secret of ours.
        detail = f": {answer.error_message}" if answer.error_message else ""
        raise AuthenticationFailed(f"{where}: {error_name(answer.error_code)}{detail}")
    return answer.auth_bytes, answer.session_lifetime_ms
