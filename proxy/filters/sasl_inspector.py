"""SaslInspector: learn who the client is from its SASL exchange, without taking part in it.

The broker still authenticates; Sluice only reads the principal the client claims (PLAIN's authorization
or authentication id, SCRAM's saslname, a JWT claim for OAUTHBEARER) and makes it the connection's user
once the broker answers success. A failed or aborted exchange changes nothing, and the broker's answer
passes through untouched. A new exchange on an authenticated connection (KIP-368 re-authentication)
replaces the user when it succeeds.

Both framings are followed: SaslAuthenticate requests (after SaslHandshake v1), and the legacy bare
length-prefixed tokens after SaslHandshake v0, which the connection relays in its raw mode while this
filter's exchange watches. Tokens carry passwords, proofs and bearer tokens: nothing from them is logged
except the principal.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.errors import ProtocolError
from sluice.protocol.headers import RequestHeader, response_header_size
from sluice.protocol.sasl import (
    SASL_MAX_VERSIONS,
    decode_authenticate_request,
    decode_authenticate_response,
    decode_handshake_request,
    decode_handshake_response,
)
from sluice.protocol.sasl_exchange import FOLLOWABLE_MECHANISMS, SaslExchange, SaslOutcome
from sluice.quota import ANONYMOUS

from ..filter_api.contract import (
    ConnectionInfo,
    Filter,
    FilterFactory,
    Frame,
    InFlight,
    RequestEffect,
    RequestFrame,
    whole,
)
from ..observability.log import get_logger

_log = get_logger("sluice.sasl")
_SASL_HANDSHAKE = ApiKey.SASL_HANDSHAKE
_KEYS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


class SaslInspector(Filter):
    """One connection's SASL state: the mechanism asked for, and the exchange under way."""

    request_api_keys = _KEYS
    response_api_keys = _KEYS
    max_versions = SASL_MAX_VERSIONS

    __slots__ = ("_principal_claim", "client_id", "exchange", "mechanism")

    def __init__(self, conn: ConnectionInfo, principal_claim: str = "sub") -> None:
        super().__init__(conn)
        self._principal_claim = principal_claim
        self.mechanism: str | None = None
        self.exchange: SaslExchange | None = None
        self.client_id: str | None = None  # as the client's SASL requests gave it, for the log

    # ---- requests -------------------------------------------------------------------------------

    def on_request(self, header: RequestHeader, frame: RequestFrame) -> RequestEffect:
        with _no_token_in_errors():
            self._request(header, memoryview(whole(frame))[4 + header.size :])
        return frame

    def _request(self, header: RequestHeader, body: memoryview) -> None:
        self.client_id = header.client_id
        if header.api_key == _SASL_HANDSHAKE:
            self.mechanism = decode_handshake_request(header.api_version, body)
            self.exchange = None
            if header.api_version == 0 and self.mechanism not in FOLLOWABLE_MECHANISMS:
                # Without Kafka framing Sluice cannot tell where such tokens end and requests begin.
                raise ProtocolError(
                    "sasl_legacy_mechanism_unsupported",
                    f"{self.mechanism} with SaslHandshake v0 (clients on SaslAuthenticate are fine)",
                )
        else:
            if self.exchange is None and self.mechanism is not None:
                self.exchange = SaslExchange(self.mechanism, self._principal_claim)
            if self.exchange is not None:
                self.exchange.client_token(decode_authenticate_request(header.api_version, body))

    # ---- responses ------------------------------------------------------------------------------

    def on_response(self, request: InFlight, frame: Frame) -> Frame:
        header = request.header
        with _no_token_in_errors():
            body = memoryview(frame)[4 + response_header_size(header.api_key, header.api_version, frame) :]
            self._response(header, body)
        return frame

    def _response(self, header: RequestHeader, body: memoryview) -> None:
        if header.api_key == _SASL_HANDSHAKE:
            self._handshake_answered(header.api_version, body)
        elif self.exchange is not None:
            answer = decode_authenticate_response(header.api_version, body)
            outcome = self.exchange.server_token(answer.auth_bytes, answer.error_code)
            self.settle(outcome, answer.error_code)

    def _handshake_answered(self, version: int, body: memoryview) -> None:
        conn = self.conn
        answer = decode_handshake_response(version, body)
        if answer.error_code != 0 or self.mechanism is None:
            _log.info("sasl_handshake_refused", peer=conn.peer, error_code=answer.error_code)
            self.mechanism = None
            return
        if self.mechanism not in FOLLOWABLE_MECHANISMS:
            _log.info(
                "sasl_principal_unknown",
                peer=conn.peer,
                mechanism=self.mechanism,
                reason="Sluice reads PLAIN, SCRAM and OAUTHBEARER principals only; the user stays as it was",
            )
        if version > 0:
            return  # SaslAuthenticate requests follow; the exchange starts with the first of them
        self.exchange = SaslExchange(self.mechanism, self._principal_claim)
        conn.begin_raw_exchange(_RawSasl(self))

    def settle(self, outcome: SaslOutcome, error_code: int) -> None:
        """An exchange ended (or goes on): make its principal the user on success."""
        exchange = self.exchange
        if exchange is None or outcome is SaslOutcome.PENDING:
            return
        conn = self.conn
        self.exchange = None
        self.mechanism = None
        if outcome is SaslOutcome.FAILED:
            # The connection keeps the user it had (ANONYMOUS before any success); the broker closes it.
            _log.info("sasl_failed", peer=conn.peer, mechanism=exchange.mechanism, error_code=error_code)
            return
        conn.sasl_authenticated()  # the broker said yes: the limits on unauthenticated frames end
        if exchange.principal is None:
            _log.warning(
                "sasl_principal_unknown",
                peer=conn.peer,
                mechanism=exchange.mechanism,
                user=conn.user,
                reason="the broker accepted tokens Sluice could not read a principal from",
            )
            return
        previous, conn.user = conn.user, exchange.principal
        _log.info(
            "sasl_authenticated",
            peer=conn.peer,
            client_id=self.client_id,
            mechanism=exchange.mechanism,
            user=conn.user,
            # Only a re-authentication (KIP-368) or SASL over an mTLS identity replaces a user.
            **({"previous_user": previous} if previous not in (ANONYMOUS, conn.user) else {}),
        )


class SaslInspectorFactory(FilterFactory):
    filter_class = SaslInspector

    def __init__(self, principal_claim: str = "sub") -> None:
        self._principal_claim = principal_claim

    def create(self, conn: ConnectionInfo) -> SaslInspector:
        return SaslInspector(conn, self._principal_claim)


@contextmanager
def _no_token_in_errors() -> Iterator[None]:
    """Anything but a ProtocolError (whose details never quote tokens) becomes one without details: an
    unexpected exception's text could carry token bytes, which hold passwords and proofs."""
    try:
        yield
    except ProtocolError:
        raise
    except Exception as exc:
        raise ProtocolError("bad_sasl_frame", type(exc).__name__) from None


class _RawSasl:
    """Feeds the legacy framing's bare tokens to the inspector's exchange (the connection's RawExchange)."""

    __slots__ = ("_inspector",)

    def __init__(self, inspector: SaslInspector) -> None:
        self._inspector = inspector

    def client_token(self, token: bytes) -> None:
        if self._inspector.exchange is not None:
            self._inspector.exchange.client_token(token)

    def server_token(self, token: bytes) -> bool:
        exchange = self._inspector.exchange
        if exchange is None:
            return True
        # Legacy framing has no error code: a broker that refuses closes the connection instead.
        outcome = exchange.server_token(token, 0)
        self._inspector.settle(outcome, 0)
        return outcome is not SaslOutcome.PENDING
