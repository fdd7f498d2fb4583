"""The client side of PLAIN and SCRAM: RFC 7677's exchange to the byte, scramp's server as the other side,
Kafka's rules around scramp (iteration ceiling, no SASLprep), and every way a server message can be
refused, without a secret in the error."""

from __future__ import annotations

import base64

import pytest
from scramp import ScramMechanism

from sluice.protocol.sasl_client import MAX_ITERATIONS, SaslClientError, ScramClient, plain_token

SALT = base64.b64encode(b"sixteen-byte-slt").decode()  # scramp wants 12 bytes at least; Kafka writes more


def test_plain_token_has_an_empty_authzid() -> None:
    assert plain_token("alice", "pw é") == b"\0alice\0pw \xc3\xa9"


def test_rfc_7677_scram_sha_256_example() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.client_first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    client.server_first(
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    assert client.client_final() == (
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
    client = ScramClient(mechanism, username, "pw")
    server.set_client_first(client.client_first().decode())
    client.server_first(server.get_server_first().encode())
    server.set_client_final(client.client_final().decode())
    client.server_final(server.get_server_final().encode())
    assert client.complete


def test_a_wrong_password_makes_a_proof_the_server_refuses() -> None:
    scram = ScramMechanism("SCRAM-SHA-512")
    info = scram.make_auth_info("right", iteration_count=4096)
    server = scram.make_server(lambda user: info)
    client = ScramClient("SCRAM-SHA-512", "alice", "wrong")
    server.set_client_first(client.client_first().decode())
    client.server_first(server.get_server_first().encode())
    with pytest.raises(Exception, match="keys don't match"):
        server.set_client_final(client.client_final().decode())
    with pytest.raises(SaslClientError, match="invalid-proof"):
        client.server_final(server.get_server_final().encode())
    assert not client.complete


def started(nonce: str = "abc") -> ScramClient:
    return ScramClient("SCRAM-SHA-256", "alice", "pw", nonce=nonce)


@pytest.mark.parametrize(
    ("server_first", "fragment"),
    [
        (f"r=xyz123,s={SALT},i=4096", "nonce doesn't match"),
        (f"r=abc,s={SALT},i=4096", "longer than the client nonce"),  # no server part at all
        (f"r=abcdef,s={SALT},i=1000", "must not be < 4096"),
        (f"r=abcdef,s={SALT},i={MAX_ITERATIONS + 1}", "more than 16384 iterations"),
        (f"r=abcdef,s={SALT},i=4²", "only contain ASCII digits"),
        ("r=abcdef,s=!!!,i=4096", "Invalid base 64 encoding"),
        ("r=abcdef,s=c2FsdA==,i=4096", "at least 12 bytes"),
        ("r=abcdef,i=4096", "Malformed server first message"),
        ("e=unknown-user", "returned an error .unknown-user"),
        ("garbage", "Malformed server first message"),
    ],
)
def test_a_bad_server_first_message_is_refused(server_first: str, fragment: str) -> None:
    client = started()
    client.client_first()
    with pytest.raises(SaslClientError, match=fragment):
        client.server_first(server_first.encode())


def test_a_server_first_message_that_is_not_utf8_is_refused() -> None:
    client = started()
    client.client_first()
    with pytest.raises(SaslClientError, match="not UTF-8"):
        client.server_first(b"\xff\xfe")


def test_a_server_that_does_not_know_the_password_is_caught() -> None:
    client = started()
    client.client_first()
    client.server_first(f"r=abcdef,s={SALT},i=4096".encode())
    client.client_final()
    with pytest.raises(SaslClientError, match="signature doesn't match"):
        client.server_final(b"v=" + base64.b64encode(b"\0" * 32))
    assert not client.complete


def test_a_server_error_is_repeated_only_when_it_is_a_known_word() -> None:
    client = started()
    client.client_first()
    client.server_first(f"r=abcdef,s={SALT},i=4096".encode())
    client.client_final()
    with pytest.raises(SaslClientError) as caught:
        client.server_final(b"e=Some Text With the-password-maybe")
    assert "the-password" not in str(caught.value) and "invalid error" in str(caught.value)


def test_steps_out_of_order_are_refused() -> None:
    with pytest.raises(SaslClientError, match="server-first"):
        started().server_first(f"r=abcdef,s={SALT},i=4096".encode())


@pytest.mark.parametrize(
    ("username", "password", "named"),
    [
        ("alice", "ﬁ-ligature", "password"),  # SASLprep's NFKC maps it to "fi"
        ("alice", "tab\there", "password"),  # a control character SASLprep forbids
        ("al\u00adice", "pw", "username"),  # a soft hyphen SASLprep maps to nothing
    ],
)
def test_a_credential_saslprep_would_change_is_refused_without_quoting_it(
    username: str, password: str, named: str
) -> None:
    with pytest.raises(SaslClientError) as caught:
        ScramClient("SCRAM-SHA-256", username, password)
    assert f"the {named} has characters SASLprep" in str(caught.value)
    assert password not in str(caught.value) and username not in str(caught.value)
