"""The client side of PLAIN and SCRAM: RFC 7677's exchange to the byte, scramp's server as the other side,
and every way a server message can be refused, without a secret in the error."""

from __future__ import annotations

import base64

import pytest
from scramp import ScramMechanism

from sluice.protocol.sasl_client import (
    SaltParams,
    SaslClientError,
    ScramClient,
    plain_token,
    salt_password,
)


def test_plain_token_has_an_empty_authzid() -> None:
    assert plain_token("alice", "pw é") == b"\0alice\0pw \xc3\xa9"


def test_rfc_7677_scram_sha_256_example() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.client_first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    params = client.server_first(server_first)
    assert params == SaltParams(base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="), 4096)
    final = client.client_final(salt_password(client.hash_name, "pencil", params))
    assert final == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    client.server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    assert client.complete


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("username", ["alice", "a=b,c"])
def test_against_scramp_as_the_server(mechanism: str, username: str) -> None:
    scram = ScramMechanism(mechanism)
    info = scram.make_auth_info("pw", iteration_count=4096)
    server = scram.make_server(lambda user: info if user == username else None)
    client = ScramClient(mechanism, username)
    server.set_client_first(client.client_first().decode())
    params = client.server_first(server.get_server_first().encode())
    server.set_client_final(client.client_final(salt_password(client.hash_name, "pw", params)).decode())
    client.server_final(server.get_server_final().encode())
    assert client.complete


def started(nonce: str = "abc") -> ScramClient:
    return ScramClient("SCRAM-SHA-256", "alice", nonce=nonce)


@pytest.mark.parametrize(
    ("server_first", "fragment"),
    [
        (b"r=xyz123,s=c2FsdA==,i=4096", "does not extend"),
        (b"r=abc,s=c2FsdA==,i=4096", "does not extend"),  # no server part at all
        (b"r=abcdef,s=c2FsdA==,i=1000", "iterations"),
        (b"r=abcdef,s=c2FsdA==,i=1000000", "iterations"),
        (b"r=abcdef,s=!!!,i=4096", "not base64"),
        (b"r=abcdef,i=4096", "lacks"),
        (b"e=unknown-user", "unknown-user"),
        (b"garbage", "malformed"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_a_bad_server_first_message_is_refused(server_first: bytes, fragment: str) -> None:
    with pytest.raises(SaslClientError, match=fragment):
        started().server_first(server_first)


def test_a_server_that_does_not_know_the_password_is_caught() -> None:
    client = started()
    params = client.server_first(b"r=abcdef,s=c2FsdA==,i=4096")
    client.client_final(salt_password(client.hash_name, "pw", params))
    with pytest.raises(SaslClientError, match="does not match"):
        client.server_final(b"v=" + base64.b64encode(b"\0" * 32))
    assert not client.complete


def test_a_server_error_is_repeated_only_when_it_is_a_known_word() -> None:
    client = started()
    client.server_first(b"r=abcdef,s=c2FsdA==,i=4096")
    with pytest.raises(SaslClientError) as caught:
        client.server_final(b"e=Some Text With the-password-maybe")
    assert "the-password" not in str(caught.value) and "unrecognised error" in str(caught.value)
