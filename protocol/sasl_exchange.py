"""Following one SASL authentication exchange from the outside, the way Kafka's server side runs it.

The caller feeds every client token and every server answer of ONE exchange, whatever the framing
(SaslAuthenticate requests and responses, or the raw length-prefixed tokens that follow SaslHandshake
v0) and learns when the broker has accepted or refused the client. The principal comes from the client's
first token only; it is a claim, to be trusted only once the outcome is SUCCEEDED. A KIP-368
re-authentication is a new exchange, so a new SaslExchange.

How each mechanism ends on Kafka's server side:

* any answer with a non-zero error code: FAILED (SaslAuthenticate v1+ carries SASL_AUTHENTICATION_FAILED);
* PLAIN: the single server answer with error 0 (an empty token) is success;
* SCRAM-SHA-256/512: the first answer is server-first; the second is server-final, `v=` (the server's
  signature) for success, `e=` for an error. Kafka only ever sends `v=` after verifying the client's
  proof; anything else is treated as FAILED so that a principal is never trusted on doubt;
* OAUTHBEARER: error 0 with an empty token is success. A non-empty token is the RFC 7628 error
  challenge (JSON): still PENDING, and the next answer is FAILED whatever it carries, because after a
  challenge the client can only send the \\x01 acknowledgement and the server must then fail it;
* any other mechanism (GSSAPI, ...): not followable. Its end is not visible from outside, so it stays
  PENDING until an error makes it FAILED.

Once SUCCEEDED or FAILED, further tokens change nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

from sluice.protocol.errors import ProtocolError
from sluice.protocol.sasl_mechanisms import (
    OAUTHBEARER,
    PLAIN,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    oauthbearer_principal,
    plain_principal,
    scram_principal,
)

FOLLOWABLE_MECHANISMS = frozenset({PLAIN, SCRAM_SHA_256, SCRAM_SHA_512, OAUTHBEARER})

__all__ = ["FOLLOWABLE_MECHANISMS", "SaslExchange", "SaslOutcome"]

_TokenBytes = bytes | bytearray | memoryview


class SaslOutcome(Enum):
    PENDING = "pending"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class SaslExchange:
    """One SASL exchange: the principal the client claims and whether the broker accepted it."""

    __slots__ = (
        "_client_tokens",
        "_principal_of",
        "_server_tokens",
        "followable",
        "mechanism",
        "outcome",
        "principal",
    )

    def __init__(self, mechanism: str, principal_claim: str = "sub") -> None:
        self.mechanism = mechanism
        self.followable = mechanism in FOLLOWABLE_MECHANISMS
        self.principal: str | None = None
        self.outcome = SaslOutcome.PENDING
        self._client_tokens = 0
        self._server_tokens = 0
        self._principal_of = _principal_parser(mechanism, principal_claim)

    def client_token(self, token: _TokenBytes) -> None:
        """Record a client token. Only the first one names the principal; garbage leaves it None."""
        self._client_tokens += 1
        if self._client_tokens != 1 or self.outcome is not SaslOutcome.PENDING or self._principal_of is None:
            return
        try:
            self.principal = self._principal_of(bytes(token))
        except ProtocolError:
            self.principal = None

    def server_token(self, token: _TokenBytes, error_code: int = 0) -> SaslOutcome:
        """Record a server answer (the legacy framing has no error code: 0) and return the outcome."""
        if self.outcome is not SaslOutcome.PENDING:
            return self.outcome
        self._server_tokens += 1
        if error_code != 0:
            self.outcome = SaslOutcome.FAILED
        elif self.followable:
            self.outcome = self._followed_outcome(bytes(token))
        return self.outcome

    def _followed_outcome(self, token: bytes) -> SaslOutcome:
        if self.mechanism == PLAIN:
            return SaslOutcome.SUCCEEDED
        if self.mechanism == OAUTHBEARER:
            if self._server_tokens > 1:  # the answer to the client's ack of an error challenge
                return SaslOutcome.FAILED
            return SaslOutcome.PENDING if token else SaslOutcome.SUCCEEDED
        # SCRAM: server-first, then server-final.
        if self._server_tokens == 1:
            return SaslOutcome.PENDING
        return SaslOutcome.SUCCEEDED if token.startswith(b"v=") else SaslOutcome.FAILED


def _principal_parser(mechanism: str, claim: str) -> Callable[[bytes], str] | None:
    if mechanism == PLAIN:
        return plain_principal
    if mechanism in (SCRAM_SHA_256, SCRAM_SHA_512):
        return scram_principal
    if mechanism == OAUTHBEARER:
        return lambda token: oauthbearer_principal(token, claim)
    return None
