"""SaslInspector on its own: request and response frames built by `protocol/` (SCRAM messages by `scramp`),
fed to the filter as the connection would, with a recording stand-in for the connection."""

from __future__ import annotations

import pytest
from sasl_tokens import oauthbearer_response, plain_token, unsecured_jwt
from scramp import ScramClient, ScramMechanism

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.errors import ProtocolError
from sluice.protocol.headers import encode_request, encode_response, parse_request_header
from sluice.protocol.sasl import (
    encode_authenticate_request,
    encode_authenticate_response,
    encode_handshake_request,
    encode_handshake_response,
)
from sluice.proxy.filter_api.contract import InFlight, RawExchange
from sluice.proxy.filters.sasl_inspector import SaslInspectorFactory
from sluice.quota import ANONYMOUS

FAILED = 58


class RecordingConnection:
    """The parts of ConnectionInfo the inspector uses."""

    def __init__(self) -> None:
        self.peer = "127.0.0.1:1"
        self.user = ANONYMOUS
        self.raw: RawExchange | None = None
        self.authenticated = 0

    def begin_raw_exchange(self, exchange: RawExchange) -> None:
        self.raw = exchange

    def sasl_authenticated(self) -> None:
        self.authenticated += 1


class Session:
    def __init__(self, factory: SaslInspectorFactory | None = None) -> None:
        self.conn = RecordingConnection()
        self.inspector = (factory or SaslInspectorFactory()).create(self.conn)
        self._correlation_id = 0

    def exchange(self, api_key: int, version: int, request_body: bytes, response_body: bytes) -> None:
        self._correlation_id += 1
        frame = encode_request(api_key, version, self._correlation_id, "inspector-test", request_body)
        header = parse_request_header(frame)
        assert self.inspector.on_request(header, frame) is frame  # passthrough, never rewritten
        response = encode_response(api_key, version, self._correlation_id, response_body)
        assert self.inspector.on_response(InFlight(header), response) is response

    def handshake(self, mechanism: str, version: int = 1, error_code: int = 0) -> None:
        self.exchange(
            ApiKey.SASL_HANDSHAKE,
            version,
            encode_handshake_request(version, mechanism),
            encode_handshake_response(version, error_code, ["PLAIN", "SCRAM-SHA-256"]),
        )

    def authenticate(self, token: bytes, answer: bytes = b"", error_code: int = 0, version: int = 1) -> None:
        message = "Authentication failed: Invalid username or password" if error_code else None
        self.exchange(
            ApiKey.SASL_AUTHENTICATE,
            version,
            encode_authenticate_request(version, token),
            encode_authenticate_response(version, error_code, message, answer, 3_600_000 if version else 0),
        )


def test_plain_success_makes_the_principal_the_user():
    session = Session()
    session.handshake("PLAIN")
    assert session.conn.user == ANONYMOUS
    session.authenticate(plain_token("alice", "pw"))
    assert session.conn.user == "alice"


def test_plain_authorization_id_wins_over_the_authentication_id():
    session = Session()
    session.handshake("PLAIN")
    session.authenticate(plain_token("admin", "pw", authzid="alice"))
    assert session.conn.user == "alice"


def test_a_failed_exchange_leaves_anonymous():
    session = Session()
    session.handshake("PLAIN")
    session.authenticate(plain_token("alice", "wrong"), error_code=FAILED)
    assert session.conn.user == ANONYMOUS


def test_a_refused_handshake_starts_no_exchange():
    session = Session()
    session.handshake("PLAIN", error_code=33)  # the broker does not offer PLAIN
    session.authenticate(plain_token("alice", "pw"))  # a confused client; the broker would refuse it anyway
    assert session.conn.user == ANONYMOUS


def test_scram_user_is_set_only_after_the_server_final_message():
    mechanism = "SCRAM-SHA-256"
    server = ScramMechanism(mechanism).make_server(
        lambda _user: ScramMechanism(mechanism).make_auth_info("pw", iteration_count=4096)
    )
    client = ScramClient([mechanism], "ali,ce=", "pw")
    session = Session()
    session.handshake(mechanism)
    client_first = client.get_client_first()
    server.set_client_first(client_first)
    server_first = server.get_server_first()
    session.authenticate(client_first.encode(), server_first.encode())
    assert session.conn.user == ANONYMOUS  # half way: nothing proven yet
    client.set_server_first(server_first)
    client_final = client.get_client_final()
    server.set_client_final(client_final)
    session.authenticate(client_final.encode(), server.get_server_final().encode())
    assert session.conn.user == "ali,ce="  # =2C and =3D unescaped


def test_reauthentication_replaces_the_user():
    session = Session()
    session.handshake("PLAIN")
    session.authenticate(plain_token("alice", "pw"))
    session.handshake("PLAIN")
    session.authenticate(plain_token("bob", "pw"))
    assert session.conn.user == "bob"


def test_a_failed_reauthentication_keeps_the_user_it_had():
    session = Session()
    session.handshake("PLAIN")
    session.authenticate(plain_token("alice", "pw"))
    session.handshake("PLAIN")
    session.authenticate(plain_token("bob", "pw"), error_code=FAILED)
    assert session.conn.user == "alice"


def test_handshake_v0_hands_the_connection_a_raw_exchange():
    session = Session()
    session.handshake("PLAIN", version=0)
    raw = session.conn.raw
    assert raw is not None
    raw.client_token(plain_token("alice", "pw"))
    assert session.conn.user == ANONYMOUS
    assert raw.server_token(b"") is True  # PLAIN is one round: Kafka framing resumes
    assert session.conn.user == "alice"


def test_handshake_v0_with_a_mechanism_sluice_cannot_follow_closes_the_connection():
    session = Session()
    with pytest.raises(ProtocolError) as caught:
        session.handshake("GSSAPI", version=0)
    assert caught.value.reason == "sasl_legacy_mechanism_unsupported"


def test_oauthbearer_uses_the_configured_claim():
    token = oauthbearer_response(unsecured_jwt({"sub": "svc-1", "email": "carol@example.com"}))
    session = Session(SaslInspectorFactory(principal_claim="email"))
    session.handshake("OAUTHBEARER")
    session.authenticate(token)
    assert session.conn.user == "carol@example.com"
