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
from weakref import WeakKeyDictionary

from sluice.protocol.errors import ProtocolError
from sluice.protocol.headers import RequestHeader, response_header_size
from sluice.protocol.sasl import (
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    decode_authenticate_request,
    decode_authenticate_response,
    decode_handshake_request,
    decode_handshake_response,
)
from sluice.protocol.sasl_exchange import FOLLOWABLE_MECHANISMS, SaslExchange, SaslOutcome
from sluice.quota import ANONYMOUS

from ..log import get_logger
from .base import ConnectionInfo, Filter, Frame, InFlight

_log = get_logger("sluice.sasl")
_KEYS = frozenset({SASL_HANDSHAKE, SASL_AUTHENTICATE})


class _Session:
    """One connection's SASL state: the mechanism asked for, and the exchange under way."""

    __slots__ = ("client_id", "exchange", "mechanism")

    def __init__(self) -> None:
        self.mechanism: str | None = None
        self.exchange: SaslExchange | None = None
        self.client_id: str | None = None  # as the client's SASL requests gave it, for the log


class SaslInspector(Filter):
    request_api_keys = _KEYS
    response_api_keys = _KEYS

    def __init__(self, principal_claim: str = "sub") -> None:
        self._principal_claim = principal_claim
        self._sessions: WeakKeyDictionary[ConnectionInfo, _Session] = WeakKeyDictionary()

    def _session(self, conn: ConnectionInfo) -> _Session:
        session = self._sessions.get(conn)
        if session is None:
            session = self._sessions[conn] = _Session()
        return session

    # ---- requests -------------------------------------------------------------------------------

    def on_request(self, conn: ConnectionInfo, header: RequestHeader, frame: Frame) -> Frame:
        with _no_token_in_errors():
            self._request(conn, header, memoryview(frame)[4 + header.size :])
        return frame

    def _request(self, conn: ConnectionInfo, header: RequestHeader, body: memoryview) -> None:
        session = self._session(conn)
        session.client_id = header.client_id
        if header.api_key == SASL_HANDSHAKE:
            session.mechanism = decode_handshake_request(header.api_version, body)
            session.exchange = None
            if header.api_version == 0 and session.mechanism not in FOLLOWABLE_MECHANISMS:
                # Without Kafka framing Sluice cannot tell where such tokens end and requests begin.
                raise ProtocolError(
                    "sasl_legacy_mechanism_unsupported",
                    f"{session.mechanism} with SaslHandshake v0 (clients on SaslAuthenticate are fine)",
                )
        else:
            if session.exchange is None and session.mechanism is not None:
                session.exchange = SaslExchange(session.mechanism, self._principal_claim)
            if session.exchange is not None:
                session.exchange.client_token(decode_authenticate_request(header.api_version, body))

    # ---- responses ------------------------------------------------------------------------------

    def on_response(self, conn: ConnectionInfo, request: InFlight, frame: Frame) -> Frame:
        header = request.header
        with _no_token_in_errors():
            body = memoryview(frame)[4 + response_header_size(header.api_key, header.api_version, frame) :]
            self._response(conn, header, body)
        return frame

    def _response(self, conn: ConnectionInfo, header: RequestHeader, body: memoryview) -> None:
        session = self._session(conn)
        if header.api_key == SASL_HANDSHAKE:
            self._handshake_answered(conn, session, header.api_version, body)
        elif session.exchange is not None:
            answer = decode_authenticate_response(header.api_version, body)
            outcome = session.exchange.server_token(answer.auth_bytes, answer.error_code)
            _settle(conn, session, outcome, answer.error_code)

    def _handshake_answered(
        self, conn: ConnectionInfo, session: _Session, version: int, body: memoryview
    ) -> None:
        answer = decode_handshake_response(version, body)
        if answer.error_code != 0 or session.mechanism is None:
            _log.info("sasl_handshake_refused", peer=conn.peer, error_code=answer.error_code)
            session.mechanism = None
            return
        if session.mechanism not in FOLLOWABLE_MECHANISMS:
            _log.info(
                "sasl_principal_unknown",
                peer=conn.peer,
                mechanism=session.mechanism,
                reason="Sluice reads PLAIN, SCRAM and OAUTHBEARER principals only; the user stays as it was",
            )
        if version > 0:
            return  # SaslAuthenticate requests follow; the exchange starts with the first of them
        session.exchange = SaslExchange(session.mechanism, self._principal_claim)
        conn.begin_raw_exchange(_RawSasl(conn, session))


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


def _settle(conn: ConnectionInfo, session: _Session, outcome: SaslOutcome, error_code: int) -> None:
    """An exchange ended (or goes on): make its principal the user on success."""
    exchange = session.exchange
    if exchange is None or outcome is SaslOutcome.PENDING:
        return
    session.exchange = None
    session.mechanism = None
    if outcome is SaslOutcome.FAILED:
        # The connection keeps the user it had (ANONYMOUS before any success); the broker closes it.
        _log.info("sasl_failed", peer=conn.peer, mechanism=exchange.mechanism, error_code=error_code)
        return
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
        client_id=session.client_id,
        mechanism=exchange.mechanism,
        user=conn.user,
        # Only a re-authentication (KIP-368) or SASL over an mTLS identity replaces a user.
        **({"previous_user": previous} if previous not in (ANONYMOUS, conn.user) else {}),
    )


class _RawSasl:
    """Feeds the legacy framing's bare tokens to the session's exchange (the connection's RawExchange)."""

    __slots__ = ("_conn", "_session")

    def __init__(self, conn: ConnectionInfo, session: _Session) -> None:
        self._conn = conn
        self._session = session

    def client_token(self, token: bytes) -> None:
        if self._session.exchange is not None:
            self._session.exchange.client_token(token)

    def server_token(self, token: bytes) -> bool:
        exchange = self._session.exchange
        if exchange is None:
            return True
        # Legacy framing has no error code: a broker that refuses closes the connection instead.
        outcome = exchange.server_token(token, 0)
        _settle(self._conn, self._session, outcome, 0)
        return outcome is not SaslOutcome.PENDING
