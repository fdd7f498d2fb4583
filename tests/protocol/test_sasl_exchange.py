"""The SASL exchange state machine (protocol/sasl_exchange.py), driven by real tokens.

SCRAM runs end to end between scramp's client and scramp's server; PLAIN and OAUTHBEARER tokens are
built by hand from their RFCs, the server answers as Kafka's SaslServer implementations give them.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

import pytest
import scramp
from sasl_tokens import oauthbearer_response, plain_token, unsecured_jwt

from sluice.protocol.sasl_exchange import FOLLOWABLE_MECHANISMS, SaslExchange, SaslOutcome

PENDING, SUCCEEDED, FAILED = SaslOutcome.PENDING, SaslOutcome.SUCCEEDED, SaslOutcome.FAILED
SASL_AUTHENTICATION_FAILED = 58
ILLEGAL_SASL_STATE = 34
OAUTH_ERROR_CHALLENGE = json.dumps(
    {"status": "invalid_token", "scope": "", "openid-configuration": ""}
).encode()


def _oauth(claims: dict[str, object]) -> bytes:
    return oauthbearer_response(unsecured_jwt(claims))


class ScramPair:
    """A scramp client and a scramp server that knows `alice` with password `alice-secret`."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        server_mechanism = scramp.ScramMechanism(mechanism)
        credentials = server_mechanism.make_auth_info("alice-secret", iteration_count=4096)
        self.client = scramp.ScramClient([mechanism], username, password)
        self.server = server_mechanism.make_server(lambda _username: credentials)

    def messages(self) -> Iterator[bytes]:
        """client-first, server-first, client-final, server-final, as bytes."""
        client_first = self.client.get_client_first()
        yield client_first.encode()
        self.server.set_client_first(client_first)
        server_first = self.server.get_server_first()
        yield server_first.encode()
        self.client.set_server_first(server_first)
        client_final = self.client.get_client_final()
        yield client_final.encode()
        # On a bad proof scramp raises but records the error: get_server_final then answers e=<error>.
        with contextlib.suppress(scramp.ScramException):
            self.server.set_client_final(client_final)
        yield self.server.get_server_final().encode()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"])
def test_known_mechanisms_are_followable(mechanism: str) -> None:
    exchange = SaslExchange(mechanism)
    assert exchange.mechanism == mechanism
    assert exchange.followable
    assert mechanism in FOLLOWABLE_MECHANISMS
    assert exchange.principal is None
    assert exchange.outcome is PENDING


@pytest.mark.parametrize("mechanism", ["GSSAPI", "AWS_MSK_IAM", "plain", "SCRAM-SHA-1", ""])
def test_other_mechanisms_are_not_followable(mechanism: str) -> None:
    assert not SaslExchange(mechanism).followable


# --- PLAIN -----------------------------------------------------------------------------------------


def test_plain_succeeds_on_the_first_answer_without_error() -> None:
    exchange = SaslExchange("PLAIN")
    exchange.client_token(plain_token("alice"))
    assert exchange.principal == "alice"
    assert exchange.outcome is PENDING
    assert exchange.server_token(b"") is SUCCEEDED
    assert exchange.outcome is SUCCEEDED


def test_plain_principal_is_the_authzid_when_given() -> None:
    exchange = SaslExchange("PLAIN")
    exchange.client_token(plain_token("alice", authzid="alice-admin"))
    assert exchange.principal == "alice-admin"


def test_plain_fails_on_an_error_code() -> None:
    exchange = SaslExchange("PLAIN")
    exchange.client_token(plain_token("alice", password="wrong"))
    assert exchange.server_token(b"", SASL_AUTHENTICATION_FAILED) is FAILED
    assert exchange.principal == "alice"  # still only a claim; the outcome says it was refused


def test_garbage_plain_token_leaves_no_principal_but_the_outcome_is_still_followed() -> None:
    exchange = SaslExchange("PLAIN")
    exchange.client_token(b"no NULs in here")
    assert exchange.principal is None
    assert exchange.server_token(b"") is SUCCEEDED


# --- SCRAM -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_succeeds_on_server_final_with_verifier(mechanism: str) -> None:
    client_first, server_first, client_final, server_final = ScramPair(
        mechanism, "alice", "alice-secret"
    ).messages()
    exchange = SaslExchange(mechanism)
    exchange.client_token(client_first)
    assert exchange.principal == "alice"
    assert exchange.server_token(server_first) is PENDING
    exchange.client_token(client_final)
    assert exchange.principal == "alice"  # the client-final message does not rename anyone
    assert server_final.startswith(b"v=")
    assert exchange.server_token(server_final) is SUCCEEDED


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_fails_on_server_final_with_error(mechanism: str) -> None:
    client_first, server_first, client_final, server_final = ScramPair(mechanism, "alice", "wrong").messages()
    exchange = SaslExchange(mechanism)
    exchange.client_token(client_first)
    assert exchange.server_token(server_first) is PENDING
    exchange.client_token(client_final)
    assert server_final.startswith(b"e=")
    assert exchange.server_token(server_final) is FAILED


def test_scram_fails_when_kafka_answers_the_bad_proof_with_an_error_code() -> None:
    client_first, server_first, client_final, _ = ScramPair("SCRAM-SHA-256", "alice", "wrong").messages()
    exchange = SaslExchange("SCRAM-SHA-256")
    exchange.client_token(client_first)
    exchange.server_token(server_first)
    exchange.client_token(client_final)
    assert exchange.server_token(b"", SASL_AUTHENTICATION_FAILED) is FAILED


def test_scram_fails_on_an_error_to_the_client_first_message() -> None:
    exchange = SaslExchange("SCRAM-SHA-512")
    exchange.client_token(ScramPair("SCRAM-SHA-512", "nobody", "x").client.get_client_first().encode())
    assert exchange.principal == "nobody"
    assert exchange.server_token(b"", SASL_AUTHENTICATION_FAILED) is FAILED


def test_scram_escaped_username_becomes_the_principal() -> None:
    exchange = SaslExchange("SCRAM-SHA-256")
    exchange.client_token(ScramPair("SCRAM-SHA-256", "team=a,b", "pw").client.get_client_first().encode())
    assert exchange.principal == "team=a,b"


def test_scram_server_final_that_is_neither_verifier_nor_error_fails() -> None:
    exchange = SaslExchange("SCRAM-SHA-256")
    exchange.client_token(b"n,,n=alice,r=abc")
    assert exchange.server_token(b"r=abcdef,s=c2FsdA==,i=4096") is PENDING
    exchange.client_token(b"c=biws,r=abcdef,p=cHJvb2Y=")
    assert exchange.server_token(b"x=surprise") is FAILED


# --- OAUTHBEARER -----------------------------------------------------------------------------------


def test_oauthbearer_succeeds_on_an_empty_answer() -> None:
    exchange = SaslExchange("OAUTHBEARER")
    exchange.client_token(_oauth({"sub": "alice", "exp": 2_000_000_000}))
    assert exchange.principal == "alice"
    assert exchange.server_token(b"") is SUCCEEDED


def test_oauthbearer_principal_claim_is_configurable() -> None:
    exchange = SaslExchange("OAUTHBEARER", principal_claim="client_id")
    exchange.client_token(_oauth({"sub": "0f3a", "client_id": "billing-service"}))
    assert exchange.principal == "billing-service"
    assert exchange.server_token(b"") is SUCCEEDED


def test_oauthbearer_error_challenge_then_failure() -> None:
    exchange = SaslExchange("OAUTHBEARER")
    exchange.client_token(_oauth({"sub": "alice"}))
    assert exchange.server_token(OAUTH_ERROR_CHALLENGE) is PENDING
    exchange.client_token(b"\x01")  # the client's acknowledgement (RFC 7628 §3.2.3)
    assert exchange.principal == "alice"
    assert exchange.server_token(b"", SASL_AUTHENTICATION_FAILED) is FAILED


def test_oauthbearer_after_a_challenge_nothing_can_succeed() -> None:
    # The legacy framing has no error codes: whatever follows a challenge is a failure (RFC 7628 §3.2.3).
    exchange = SaslExchange("OAUTHBEARER")
    exchange.client_token(_oauth({"sub": "alice"}))
    assert exchange.server_token(OAUTH_ERROR_CHALLENGE) is PENDING
    exchange.client_token(b"\x01")
    assert exchange.server_token(b"") is FAILED


def test_oauthbearer_with_a_non_string_claim_succeeds_without_principal() -> None:
    exchange = SaslExchange("OAUTHBEARER")
    exchange.client_token(_oauth({"sub": 12345}))
    assert exchange.principal is None
    assert exchange.server_token(b"") is SUCCEEDED  # the filter decides what a nameless success means


# --- mechanisms Sluice cannot follow ---------------------------------------------------------------


def test_gssapi_stays_pending_until_an_error() -> None:
    exchange = SaslExchange("GSSAPI")
    exchange.client_token(b"\x60\x82\x02\x00kerberos-ap-req")
    assert exchange.principal is None
    assert exchange.server_token(b"\x60\x81ap-rep") is PENDING
    exchange.client_token(b"")
    assert exchange.server_token(b"") is PENDING
    assert exchange.server_token(b"", SASL_AUTHENTICATION_FAILED) is FAILED


# --- after the end ---------------------------------------------------------------------------------


def test_a_succeeded_exchange_stays_succeeded() -> None:
    exchange = SaslExchange("PLAIN")
    exchange.client_token(plain_token("alice"))
    assert exchange.server_token(b"") is SUCCEEDED
    exchange.client_token(plain_token("mallory"))
    assert exchange.principal == "alice"
    assert exchange.server_token(b"", ILLEGAL_SASL_STATE) is SUCCEEDED
    assert exchange.outcome is SUCCEEDED


def test_a_failed_exchange_stays_failed() -> None:
    exchange = SaslExchange("SCRAM-SHA-256")
    exchange.client_token(b"n,,n=alice,r=abc")
    assert exchange.server_token(b"", SASL_AUTHENTICATION_FAILED) is FAILED
    assert exchange.server_token(b"r=abcdef,s=c2FsdA==,i=4096") is FAILED
    assert exchange.server_token(b"v=c2lnbmF0dXJl") is FAILED


def test_only_the_first_client_token_names_the_principal() -> None:
    exchange = SaslExchange("PLAIN")
    exchange.client_token(b"garbage")
    exchange.client_token(plain_token("alice"))
    assert exchange.principal is None


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "OAUTHBEARER", "GSSAPI"])
@pytest.mark.parametrize("token", [b"", b"\x00", b"\x01", b"\xff" * 64, b"n,,", b"=" * 10])
def test_client_token_never_raises_on_garbage(mechanism: str, token: bytes) -> None:
    exchange = SaslExchange(mechanism)
    exchange.client_token(memoryview(token))
    assert exchange.principal is None
