"""A test double: the SASL side of a Kafka broker in front of librdkafka's mock cluster (which has none).

    with MockCluster(brokers=3) as cluster, SaslBrokerDouble(cluster.bootstrap, {"alice": "pw"}) as broker:
        Producer({"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice", "sasl.password": "pw"})

One listener per mock broker (127.0.0.1, kernel-chosen port, optional TLS). Each connection goes through
the states of Kafka's SaslServerAuthenticator, then relays frames both ways unchanged except the broker
addresses in Metadata, FindCoordinator and DescribeCluster answers and the NodeEndpoints of Produce, Fetch
and the share answers, which point at the double's listeners (as a SASL broker names its own).

* Before authentication only ApiVersions (relayed; SaslHandshake and SaslAuthenticate are added to the
  answer), SaslHandshake and SaslAuthenticate are allowed; anything else closes the connection. ApiVersions
  v3+ is answered here with UNSUPPORTED_VERSION in v0 and the mock's range (0-2), as Kafka answers a
  version it lacks, so clients fall back instead of meeting the mock's odd v3 answer.
* SaslHandshake v1 leads to SaslAuthenticate requests, v0 to raw length-prefixed tokens without Kafka
  headers. An unknown mechanism gets UNSUPPORTED_SASL_MECHANISM (33) and the enabled list, then a close.
* PLAIN checks `users`; SCRAM-SHA-256/512 run `scramp` with credentials made from `users` (4096
  iterations, Kafka's minimum); OAUTHBEARER accepts an unsecured JWT (alg none, an unexpired `exp`) whose
  `sub` is a user, and otherwise answers Kafka's JSON error challenge, then fails the client's %x01.
* A failure is SASL_AUTHENTICATION_FAILED (58) with Kafka's message, then a close (legacy framing: just
  the close). Kafka's messages: PLAIN "Authentication failed: Invalid username or password"; SCRAM (whose
  server throws a SaslException) "Authentication failed during authentication due to invalid credentials
  with SASL mechanism SCRAM-SHA-256"; OAUTHBEARER the JSON challenge itself.
* KIP-368: with `session_lifetime_ms` > 0 a completed SaslAuthenticate v1+ carries it, a new SaslHandshake
  on an authenticated connection re-authenticates (same mechanism and principal, at most one start per
  second, as Kafka's KafkaChannel allows), and any other request after the session expired closes the
  connection. Otherwise SaslHandshake and SaslAuthenticate on an authenticated connection get
  ILLEGAL_SASL_STATE (34), as Kafka's request handlers answer them.

`authenticated` lists each accepted principal (re-authentications included), `failed` each username whose
authentication failed ('' when the token named none), `connections` counts accepted connections. Secrets
never reach a log line or an error message.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import json
import logging
import ssl
import struct
import time
from collections.abc import Iterable
from enum import Enum
from functools import partial
from types import TracebackType
from typing import Protocol

from doubles.loop_thread import LoopThread
from kafka.protocol.metadata import ApiVersionsResponse
from scramp import ScramException, ScramMechanism

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.broker_addresses import REWRITABLE_MAX_VERSIONS, rewrite_broker_addresses
from sluice.protocol.client_requests import METADATA, decode_metadata, encode_metadata_request
from sluice.protocol.codec_quirks import decode_body, encode_body
from sluice.protocol.errors import ProtocolError
from sluice.protocol.headers import (
    RequestHeader,
    encode_response,
    parse_request_header,
    read_correlation_id,
    response_header_size,
)
from sluice.protocol.headers import (
    frame as framed,
)
from sluice.protocol.node_endpoints import NODE_ENDPOINTS_MAX_VERSIONS, rewrite_node_endpoints
from sluice.protocol.produce import produce_acks
from sluice.protocol.sasl import (
    decode_authenticate_request,
    decode_handshake_request,
    encode_authenticate_response,
    encode_handshake_response,
)
from sluice.proxy.filters.frames import with_body
from sluice.proxy.kafka_client.connection import open_broker_connection
from sluice.proxy.tools.mock_cluster import parse_bootstrap

__all__ = ["SaslBrokerDouble"]

_log = logging.getLogger("sluice.tests.sasl_broker")

PRODUCE, API_VERSIONS = 0, 18
ADDRESS_APIS = frozenset({3, 10, 60})  # Metadata, FindCoordinator, DescribeCluster
# Produce, Fetch and the share answers name a new leader's address after NOT_LEADER_OR_FOLLOWER (KIP-951).
ENDPOINT_APIS = frozenset(NODE_ENDPOINTS_MAX_VERSIONS)
MOCK_API_VERSIONS_MAX = 2  # the mock answers ApiVersions v0-2 only (proxy/mock_cluster.py)
SASL_AUTHENTICATE_MAX = 2
UNSUPPORTED_VERSION = 35
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58
SCRAM_ITERATIONS = 4096
# Kafka's sasl.server.max.receive.size before authentication; afterwards the usual frame limit.
_MAX_SASL_FRAME = 524288
_MAX_FRAME = 100 << 20
_START_TIMEOUT_S = 15.0
_LENGTH = struct.Struct(">i")
_OAUTH_INVALID_TOKEN = '{"status":"invalid_token"}'
_KV_SEPARATOR = b"\x01"
_OTHER_AUTHZID = "Authentication failed: Client requested an authorization id that is different from username"


class _Refused(Exception):
    """The double closes this connection, as Kafka would (the reason is for debug logs, never a secret)."""


class _AuthFailed(Exception):
    def __init__(self, message: str, username: str) -> None:
        super().__init__(message)
        self.message = message
        self.username = username


def _invalid_credentials(mechanism: str) -> _AuthFailed:
    # What Kafka answers when the SASL server throws a plain SaslException, hiding the reason.
    message = "Authentication failed during authentication due to invalid credentials with SASL mechanism"
    return _AuthFailed(f"{message} {mechanism}", "")


class _SaslServer(Protocol):
    def step(self, token: bytes) -> tuple[bytes, str | None]:
        """The answer to one client token, and the principal once the exchange is complete."""
        ...


class _Plain:
    def __init__(self, users: dict[str, str]) -> None:
        self._users = users

    def step(self, token: bytes) -> tuple[bytes, str | None]:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise _invalid_credentials("PLAIN")
        try:
            authzid, username, password = (part.decode("utf-8") for part in parts)
        except UnicodeDecodeError:
            raise _invalid_credentials("PLAIN") from None
        if not username:
            raise _AuthFailed("Authentication failed: username not specified", "")
        if not password:
            raise _AuthFailed("Authentication failed: password not specified", username)
        expected = self._users.get(username)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise _AuthFailed("Authentication failed: Invalid username or password", username)
        if authzid and authzid != username:
            raise _AuthFailed(_OTHER_AUTHZID, username)
        return b"", username


class _Scram:
    def __init__(self, mechanism: str, credentials: dict[str, tuple[bytes, bytes, bytes, int]]) -> None:
        self._mechanism = mechanism
        self._credentials = credentials
        self._server = ScramMechanism(mechanism).make_server(self._lookup)
        self._username = ""
        self._seen_first = False

    def _lookup(self, username: str) -> tuple[bytes, bytes, bytes, int] | None:
        self._username = username
        return self._credentials.get(username)

    def step(self, token: bytes) -> tuple[bytes, str | None]:
        try:
            text = token.decode("utf-8")
            if not self._seen_first:
                self._seen_first = True
                self._server.set_client_first(text)
                authzid = _scram_authzid(text)
                if authzid and authzid != self._username:
                    raise _AuthFailed(_OTHER_AUTHZID, self._username)
                return self._server.get_server_first().encode(), None
            self._server.set_client_final(text)
            return self._server.get_server_final().encode(), self._username
        except (UnicodeDecodeError, ScramException):
            failure = _invalid_credentials(self._mechanism)
            failure.username = self._username
            raise failure from None


def _scram_authzid(client_first: str) -> str:
    """The `a=` of the gs2 header ('n,a=alice,n=alice,r=...'), unescaped."""
    parts = client_first.split(",", 2)
    if len(parts) < 2 or not parts[1].startswith("a="):
        return ""
    return parts[1][2:].replace("=2C", ",").replace("=3D", "=")


class _OAuthBearer:
    def __init__(self, users: dict[str, str]) -> None:
        self._users = users
        self._error: str | None = None
        self._subject = ""

    def step(self, token: bytes) -> tuple[bytes, str | None]:
        if self._error is not None:
            # After the error challenge the client can only acknowledge with %x01; Kafka then fails.
            failure = _AuthFailed(self._error, self._subject)
            if token != _KV_SEPARATOR:
                failure = _invalid_credentials("OAUTHBEARER")
                failure.username = self._subject
            raise failure
        authzid, jws = _oauth_initial_response(token)
        claims = _unsecured_jwt_claims(jws)
        subject = claims.get("sub") if claims is not None else None
        self._subject = subject if isinstance(subject, str) else ""
        if subject not in self._users or not _unexpired(claims):
            self._error = _OAUTH_INVALID_TOKEN
            return self._error.encode(), None
        if authzid and authzid != subject:
            message = (
                f"Authentication failed: Client requested an authorization id ({authzid}) that is different "
                f"from the token's principal name ({subject})"
            )
            raise _AuthFailed(message, self._subject)
        return b"", self._subject


def _oauth_initial_response(token: bytes) -> tuple[str, str]:
    """(authzid, token) from RFC 7628's 'n,[a=authzid],%x01auth=Bearer <token>%x01[k=v%x01]*%x01'."""
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        raise _invalid_credentials("OAUTHBEARER") from None
    gs2, separator, rest = text.partition("\x01")
    fields = gs2.split(",")
    if not separator or len(fields) != 3 or fields[0] != "n" or fields[2] or not rest.endswith("\x01\x01"):
        raise _invalid_credentials("OAUTHBEARER")
    authzid = fields[1][2:] if fields[1].startswith("a=") else ""
    if fields[1] and not authzid:
        raise _invalid_credentials("OAUTHBEARER")
    for pair in rest[:-2].split("\x01"):
        key, _, value = pair.partition("=")
        scheme, _, bearer = value.partition(" ")
        if key == "auth" and scheme.lower() == "bearer" and bearer.strip():
            return authzid, bearer.strip()
    raise _invalid_credentials("OAUTHBEARER")


def _unsecured_jwt_claims(jws: str) -> dict[str, object] | None:
    """The claims of an unsecured JWS ('<header>.<claims>.' with alg none), or None."""
    parts = jws.split(".")
    if len(parts) != 3 or parts[2]:
        return None
    try:
        header, claims = (
            json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))) for part in parts[:2]
        )
    except (binascii.Error, ValueError, RecursionError):  # RecursionError: absurdly nested JSON
        return None
    if not isinstance(header, dict) or header.get("alg") != "none" or not isinstance(claims, dict):
        return None
    return claims


def _unexpired(claims: dict[str, object] | None) -> bool:
    # Kafka's unsecured validator requires `exp` (seconds, may be fractional) to be in the future.
    expires = claims.get("exp") if claims is not None else None
    return isinstance(expires, int | float) and not isinstance(expires, bool) and expires > time.time()


class _State(Enum):
    BEFORE_HANDSHAKE = "ApiVersions or SaslHandshake"
    AFTER_API_VERSIONS = "SaslHandshake"
    AUTHENTICATE = "SaslAuthenticate"
    LEGACY_TOKENS = "raw SASL tokens"
    COMPLETE = "authenticated"


class SaslBrokerDouble:
    """Kafka's SASL server side in front of each broker of a mock cluster; see the module docstring.

    A context manager running its own asyncio loop in a daemon thread; leaving the context (or `close`)
    closes every listener and connection.
    """

    def __init__(
        self,
        mock_bootstrap: str,
        users: dict[str, str],
        *,
        mechanisms: Iterable[str] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"),
        tls: ssl.SSLContext | None = None,
        session_lifetime_ms: int = 0,
        sasl_handshake_max_version: int = 1,
    ) -> None:
        """`sasl_handshake_max_version=0` plays a pre-1.0 broker: SaslHandshake v0 only and no
        SaslAuthenticate, so clients fall back to raw tokens (the legacy framing)."""
        self.mechanisms = list(mechanisms)
        unknown = set(self.mechanisms) - {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"}
        if unknown or not self.mechanisms:
            raise ValueError(
                f"mechanisms: expected some of PLAIN, SCRAM-SHA-256/512, OAUTHBEARER, got {unknown}"
            )
        if sasl_handshake_max_version not in (0, 1):
            raise ValueError(f"sasl_handshake_max_version must be 0 or 1, got {sasl_handshake_max_version}")
        self.users = dict(users)
        self.session_lifetime_ms = session_lifetime_ms
        self.handshake_max_version = sasl_handshake_max_version
        self.authenticated: list[str] = []
        self.failed: list[str] = []
        self.connections = 0  # accepted so far, to tell re-authentications from reconnections
        self.bootstrap = ""
        self.listeners: dict[int, int] = {}  # mock broker id -> the double's port in front of it
        self._mock_bootstrap = mock_bootstrap
        self._tls = tls
        self._scram_credentials = {
            mechanism: {
                user: ScramMechanism(mechanism).make_auth_info(password, iteration_count=SCRAM_ITERATIONS)
                for user, password in self.users.items()
            }
            for mechanism in self.mechanisms
            if mechanism.startswith("SCRAM-")
        }
        self._servers: list[asyncio.Server] = []
        self._connection_tasks: set[asyncio.Task[None]] = set()
        self._loop_thread = LoopThread(
            "sasl-broker-double", self._open, self._close, start_timeout_s=_START_TIMEOUT_S
        )

    def __enter__(self) -> SaslBrokerDouble:
        self._loop_thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._loop_thread.stop()

    def sasl_server(self, mechanism: str) -> _SaslServer:
        if mechanism == "PLAIN":
            return _Plain(self.users)
        if mechanism == "OAUTHBEARER":
            return _OAuthBearer(self.users)
        return _Scram(mechanism, self._scram_credentials[mechanism])

    def address_for(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        listener = self.listeners.get(node_id)
        return (host, port) if listener is None else ("127.0.0.1", listener)

    async def _open(self) -> None:
        """One listener in front of each broker of the mock cluster."""
        try:
            first = parse_bootstrap(self._mock_bootstrap)[0]
            brokers = await _fetch_brokers(*first)
            for node_id, host, port in brokers:
                accept = partial(self._accept, host, port)
                server = await asyncio.start_server(accept, "127.0.0.1", 0, ssl=self._tls)
                self._servers.append(server)
                self.listeners[node_id] = server.sockets[0].getsockname()[1]
        except BaseException:
            await self._close()
            raise
        fronting_first = [node for node, host, port in brokers if (host, port) == first]
        self.bootstrap = f"127.0.0.1:{self.listeners[(fronting_first or sorted(self.listeners))[0]]}"

    async def _close(self) -> None:
        for server in self._servers:
            server.close()
        for task in list(self._connection_tasks):
            task.cancel()
        await asyncio.gather(*self._connection_tasks, return_exceptions=True)

    async def _accept(
        self, host: str, port: int, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connection_tasks.add(task)
        self.connections += 1
        upstream_writer: asyncio.StreamWriter | None = None
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(host, port)
            await _Connection(self, client_reader, client_writer, upstream_reader, upstream_writer).run()
        except (_Refused, ProtocolError) as exc:
            _log.debug("closing a connection: %s", exc)
        except (OSError, EOFError):
            pass
        except asyncio.CancelledError:
            # Shutting down. Ending normally: Python 3.11's start_server callback calls exception() on
            # the finished task, which raises for a cancelled one.
            pass
        finally:
            self._connection_tasks.discard(task)
            client_writer.close()
            if upstream_writer is not None:
                upstream_writer.close()


class _Connection:
    """One client connection: Kafka's server-side SASL states, then the relay."""

    def __init__(
        self,
        double: SaslBrokerDouble,
        client_reader: asyncio.StreamReader,
        client_writer: asyncio.StreamWriter,
        upstream_reader: asyncio.StreamReader,
        upstream_writer: asyncio.StreamWriter,
    ) -> None:
        self._double = double
        self._client_reader = client_reader
        self._client_writer = client_writer
        self._upstream_reader = upstream_reader
        self._upstream_writer = upstream_writer
        self._state = _State.BEFORE_HANDSHAKE
        self._mechanism = ""
        self._server: _SaslServer | None = None
        self._principal: str | None = None
        self._reauthenticating = False
        self._bad_reauth_mechanism = False
        self._last_reauthentication_start: float | None = None
        self._session_expires_at: float | None = None
        self._in_flight: dict[int, tuple[int, int]] = {}  # correlation id -> (api key, version)
        self._idle = asyncio.Event()
        self._idle.set()

    async def run(self) -> None:
        tasks = {asyncio.create_task(self._serve_requests()), asyncio.create_task(self._relay_answers())}
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        # Re-raise what ended the connection (the other task's CancelledError is no news).
        for task, outcome in zip(tasks, outcomes, strict=True):
            if task in done and isinstance(outcome, BaseException):
                raise outcome

    async def _serve_requests(self) -> None:
        while True:
            limit = _MAX_FRAME if self._state is _State.COMPLETE else _MAX_SASL_FRAME
            payload = await _read_frame(self._client_reader, limit)
            if self._state is _State.LEGACY_TOKENS:
                await self._legacy_token(payload)
                continue
            frame = framed(payload)
            header = parse_request_header(frame)
            body = memoryview(frame)[4 + header.size :]
            await self._request(header, frame, body)

    async def _request(self, header: RequestHeader, frame: bytes, body: memoryview) -> None:
        if self._state is _State.COMPLETE:
            await self._authenticated_request(header, frame, body)
            return
        key, state = header.api_key, self._state
        if key == API_VERSIONS and state is _State.BEFORE_HANDSHAKE:
            if header.api_version > MOCK_API_VERSIONS_MAX:
                await self._answer(header, _unsupported_api_versions())  # no state change: retry allowed
            else:
                self._state = _State.AFTER_API_VERSIONS
                self._relay(header, frame)
        elif key == ApiKey.SASL_HANDSHAKE and state in (_State.BEFORE_HANDSHAKE, _State.AFTER_API_VERSIONS):
            await self._handshake(header, body)
        elif key == ApiKey.SASL_AUTHENTICATE and state is _State.AUTHENTICATE:
            await self._authenticate(header, body)
        else:
            raise _Refused(f"API {key} while expecting {state.value}")

    async def _authenticated_request(self, header: RequestHeader, frame: bytes, body: memoryview) -> None:
        """Kafka's SocketServer order: a SaslHandshake that may re-authenticate does; otherwise an expired
        session closes the connection; otherwise the request is served (SASL ones as illegal state)."""
        key, version = header.api_key, header.api_version
        if key == ApiKey.SASL_HANDSHAKE and self._may_reauthenticate():
            await self._idle.wait()  # Kafka re-authenticates only once no response is pending
            self._reauthenticating = True
            await self._handshake(header, body)
        elif self._session_expires_at is not None and time.monotonic() > self._session_expires_at:
            raise _Refused("a request after the session expired")
        elif key == ApiKey.SASL_HANDSHAKE:
            await self._answer(header, encode_handshake_response(version, ILLEGAL_SASL_STATE, []))
        elif key == ApiKey.SASL_AUTHENTICATE:
            message = "SaslAuthenticate request received after successful authentication"
            await self._answer(
                header, encode_authenticate_response(version, ILLEGAL_SASL_STATE, message, b"")
            )
        elif key == API_VERSIONS and version > MOCK_API_VERSIONS_MAX:
            await self._answer(header, _unsupported_api_versions())
        else:
            self._relay(header, frame)

    def _may_reauthenticate(self) -> bool:
        """Kafka's KafkaChannel.maybeBeginServerReauthentication: only with a session lifetime, and at most
        one re-authentication start per second."""
        if self._double.session_lifetime_ms <= 0:
            return False
        now = time.monotonic()
        if self._last_reauthentication_start is not None and now - self._last_reauthentication_start < 1.0:
            return False
        self._last_reauthentication_start = now
        return True

    async def _handshake(self, header: RequestHeader, body: memoryview) -> None:
        version = header.api_version
        if version > self._double.handshake_max_version:
            raise _Refused(f"SaslHandshake v{version}")
        mechanism = decode_handshake_request(version, body)
        enabled = self._double.mechanisms
        if mechanism not in enabled:
            await self._answer(
                header, encode_handshake_response(version, UNSUPPORTED_SASL_MECHANISM, enabled)
            )
            raise _Refused("unsupported SASL mechanism")
        await self._answer(header, encode_handshake_response(version, 0, enabled))
        if self._reauthenticating and mechanism != self._mechanism:
            self._bad_reauth_mechanism = True  # Kafka fails the next token, without an answer
        self._mechanism = mechanism
        self._server = self._double.sasl_server(mechanism)
        self._state = _State.AUTHENTICATE if version >= 1 else _State.LEGACY_TOKENS

    async def _authenticate(self, header: RequestHeader, body: memoryview) -> None:
        version = header.api_version
        if version > SASL_AUTHENTICATE_MAX:
            raise _Refused(f"SaslAuthenticate v{version}")
        token = decode_authenticate_request(version, body)
        if self._bad_reauth_mechanism:
            raise _Refused("re-authentication with another mechanism")
        assert self._server is not None
        try:
            answer, principal = self._server.step(token)
            if principal is not None and self._reauthenticating and principal != self._principal:
                message = (
                    "Cannot change principals during re-authentication from "
                    f"User.{self._principal}: User.{principal}"
                )
                raise _AuthFailed(message, principal)
        except _AuthFailed as failure:
            self._double.failed.append(failure.username)
            body_out = encode_authenticate_response(version, SASL_AUTHENTICATION_FAILED, failure.message, b"")
            await self._answer(header, body_out)
            raise _Refused(f"{self._mechanism} authentication failed") from None
        lifetime = self._double.session_lifetime_ms if principal is not None else 0
        if principal is not None:
            self._complete(principal)  # before answering, so a test that saw the answer sees the principal
        await self._answer(header, encode_authenticate_response(version, 0, None, answer, lifetime))

    async def _legacy_token(self, token: bytes) -> None:
        assert self._server is not None
        try:
            answer, principal = self._server.step(token)
        except _AuthFailed as failure:
            self._double.failed.append(failure.username)
            raise _Refused(f"{self._mechanism} authentication failed (legacy framing)") from None
        if principal is not None:
            self._complete(principal)
        self._client_writer.write(framed(answer))
        await self._client_writer.drain()

    def _complete(self, principal: str) -> None:
        self._principal = principal
        self._double.authenticated.append(principal)
        self._state = _State.COMPLETE
        self._reauthenticating = False
        lifetime_ms = self._double.session_lifetime_ms
        self._session_expires_at = time.monotonic() + lifetime_ms / 1000 if lifetime_ms > 0 else None

    async def _answer(self, header: RequestHeader, body: bytes) -> None:
        """Answer locally, after every relayed answer, so answers keep the order of requests."""
        await self._idle.wait()
        self._client_writer.write(
            encode_response(header.api_key, header.api_version, header.correlation_id, body)
        )
        await self._client_writer.drain()

    def _relay(self, header: RequestHeader, frame: bytes) -> None:
        if not (header.api_key == PRODUCE and produce_acks(frame, header) == 0):  # acks=0: no answer
            self._in_flight[header.correlation_id] = (header.api_key, header.api_version)
            self._idle.clear()
        self._upstream_writer.write(frame)

    async def _relay_answers(self) -> None:
        while True:
            payload = await _read_frame(self._upstream_reader, _MAX_FRAME)
            frame = framed(payload)
            request = self._in_flight.pop(read_correlation_id(frame), None)
            if request is None:
                raise _Refused("the broker answered a request nobody sent")
            self._client_writer.write(self._rewrite(*request, frame))
            if not self._in_flight:
                self._idle.set()
            await self._client_writer.drain()

    def _rewrite(self, api_key: int, api_version: int, frame: bytes) -> bytes:
        if api_key not in ADDRESS_APIS and api_key not in ENDPOINT_APIS and api_key != API_VERSIONS:
            return frame
        start = 4 + response_header_size(api_key, api_version, frame)
        body = memoryview(frame)[start:]
        if api_key == API_VERSIONS:
            new_body = _with_sasl_apis(api_version, body, self._double.handshake_max_version)
        elif api_key in ENDPOINT_APIS:
            address_for = self._double.address_for
            new_body, _rewritten = rewrite_node_endpoints(api_key, api_version, body, address_for)
        else:
            new_body = rewrite_broker_addresses(api_key, api_version, body, self._double.address_for)
        if new_body is None:
            return frame
        return with_body(frame, start - 4, new_body)


async def _read_frame(reader: asyncio.StreamReader, limit: int) -> bytes:
    length = _LENGTH.unpack(await reader.readexactly(4))[0]
    if not 0 <= length <= limit:
        raise _Refused(f"frame length {length}")
    return await reader.readexactly(length)


def _unsupported_api_versions() -> bytes:
    entry = ApiVersionsResponse.ApiVersion(
        api_key=API_VERSIONS, min_version=0, max_version=MOCK_API_VERSIONS_MAX
    )
    message = ApiVersionsResponse(version=0, error_code=UNSUPPORTED_VERSION, api_keys=[entry])
    return encode_body(message, 0)


def _with_sasl_apis(version: int, body: memoryview, handshake_max_version: int) -> bytes | None:
    """The mock's ApiVersions answer plus SaslHandshake and SaslAuthenticate, address APIs capped at what
    protocol/ can rewrite; error answers pass untouched."""
    if int.from_bytes(body[:2], "big", signed=True) != 0:
        return None
    message = decode_body(ApiVersionsResponse, version, body)
    entries = [
        entry
        for entry in message.api_keys
        if entry.api_key not in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)
    ]
    for entry in entries:
        cap = REWRITABLE_MAX_VERSIONS.get(entry.api_key, NODE_ENDPOINTS_MAX_VERSIONS.get(entry.api_key))
        if cap is not None and entry.min_version <= cap < entry.max_version:
            entry.max_version = cap
    ApiVersion = ApiVersionsResponse.ApiVersion
    entries.append(
        ApiVersion(api_key=ApiKey.SASL_HANDSHAKE, min_version=0, max_version=handshake_max_version)
    )
    if handshake_max_version >= 1:  # a pre-1.0 broker has no SaslAuthenticate
        entries.append(
            ApiVersion(api_key=ApiKey.SASL_AUTHENTICATE, min_version=0, max_version=SASL_AUTHENTICATE_MAX)
        )
    message.api_keys = sorted(entries, key=lambda entry: entry.api_key)
    return encode_body(message, version)


async def _fetch_brokers(host: str, port: int) -> list[tuple[int, str, int]]:
    """Ask the mock cluster, once and without credentials, for its brokers: [(node_id, host, port)]."""
    connection = await open_broker_connection(
        host, port, client_id="sasl-broker-double", tls=None, sasl=None, timeout_s=5.0
    )
    try:
        version = connection.version_for(METADATA, "Metadata")
        body = await connection.request(METADATA, version, encode_metadata_request(version, [], False), 5.0)
        answer = decode_metadata(version, body)
    finally:
        connection.close()
    return [(b.node_id, b.host, b.port) for b in answer.brokers.values()]
