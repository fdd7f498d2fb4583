"""Principal extraction from client SASL tokens: protocol/sasl_mechanisms.py.

PLAIN and OAUTHBEARER tokens are built by hand from their RFCs; SCRAM client-first messages come from
the `scramp` SCRAM implementation.
"""

from __future__ import annotations

import json

import pytest
import scramp
from sasl_tokens import b64url as _b64url
from sasl_tokens import oauthbearer_response as _oauth
from sasl_tokens import unsecured_jwt as _jwt

from sluice.protocol.errors import ProtocolError
from sluice.protocol.sasl_mechanisms import (
    SaslTokenError,
    oauthbearer_principal,
    plain_principal,
    scram_principal,
)

PASSWORD = "s3cr3t-p4ssw0rd"


def _scram_first(username: str, mechanism: str = "SCRAM-SHA-256") -> bytes:
    return scramp.ScramClient([mechanism], username, PASSWORD).get_client_first().encode()


def _assert_rejected(parse: object, token: bytes, *secrets: str) -> SaslTokenError:
    with pytest.raises(SaslTokenError) as raised:
        parse(token)  # type: ignore[operator]
    error = raised.value
    assert error.reason == "bad_sasl_token"
    for secret in secrets:
        assert secret not in str(error)
    return error


def test_sasl_token_error_is_a_protocol_error() -> None:
    error = SaslTokenError("PLAIN: something")
    assert isinstance(error, ProtocolError)
    assert (error.reason, error.detail) == ("bad_sasl_token", "PLAIN: something")


# --- PLAIN -----------------------------------------------------------------------------------------


def test_plain_without_authzid_is_the_authcid() -> None:
    assert plain_principal(b"\x00alice\x00" + PASSWORD.encode()) == "alice"


def test_plain_authzid_wins_over_authcid() -> None:
    assert plain_principal(b"admin\x00alice\x00" + PASSWORD.encode()) == "admin"


def test_plain_is_utf8() -> None:
    assert plain_principal("\x00jörg\x00pw".encode()) == "jörg"


def test_plain_accepts_memoryview() -> None:
    assert plain_principal(memoryview(b"\x00bob\x00pw")) == "bob"  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("token", "what"),
    [
        (b"alice" + PASSWORD.encode(), "found 1"),
        (b"\x00alice", "found 2"),
        (b"\x00alice\x00" + PASSWORD.encode() + b"\x00extra", "found 4"),
        (b"\x00\x00" + PASSWORD.encode(), "empty authentication id"),
        (b"\x00\xff\xfe\x00" + PASSWORD.encode(), "authentication id is not UTF-8"),
        (b"\xc3\x28\x00alice\x00" + PASSWORD.encode(), "authorization id is not UTF-8"),
    ],
)
def test_malformed_plain_is_rejected_without_the_password(token: bytes, what: str) -> None:
    error = _assert_rejected(plain_principal, token, PASSWORD)
    assert what in error.detail


# --- SCRAM -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_username_from_scramp_client_first(mechanism: str) -> None:
    assert scram_principal(_scram_first("alice", mechanism)) == "alice"


@pytest.mark.parametrize("username", ["a,b", "a=b", "=2C", ",=,=", "x=3Dy", "üser,1=2"])
def test_scram_escapes_round_trip(username: str) -> None:
    token = _scram_first(username)
    assert b"=2C" in token or b"=3D" in token  # scramp did escape it
    assert scram_principal(token) == username


def test_scram_unescapes_by_hand() -> None:
    assert scram_principal(b"n,,n=al=2Cice=3D=3D,r=abc") == "al,ice=="


def test_scram_authzid_is_checked_but_the_username_wins() -> None:
    # Kafka's ScramSaslServer fails an exchange whose authzid differs from the username, so the username
    # is what a successful exchange authenticated.
    assert scram_principal(b"n,a=admin=2C1,n=alice,r=abc") == "alice"
    assert scram_principal(b"n,a=alice,n=alice,r=abc") == "alice"


def test_scram_accepts_other_channel_binding_flags_and_reserved_mext() -> None:
    assert scram_principal(b"y,,n=alice,r=abc") == "alice"
    assert scram_principal(b"p=tls-server-end-point,,n=alice,r=abc") == "alice"
    assert scram_principal(b"n,,m=ext,n=alice,r=abc") == "alice"
    assert scram_principal(b"n,,n=alice,r=abc,x=extension") == "alice"


@pytest.mark.parametrize(
    ("token", "what"),
    [
        (b"n,,n=al=2cice,r=abc", "'=' not followed by 2C or 3D"),  # lower case: Kafka rejects it too
        (b"n,,n=al=ice,r=abc", "'=' not followed by 2C or 3D"),
        (b"n,,n=alice=,r=abc", "'=' not followed by 2C or 3D"),
        (b"n,,n=alice=2,r=abc", "'=' not followed by 2C or 3D"),
        (b"n,a=x=4,n=alice,r=abc", "authzid has an '='"),
        (b"n,,n=,r=abc", "username is empty"),
        (b"n,,n=al\x00ice,r=abc", "contains NUL"),
        (b"n,,r=abc,n=alice", "no username"),
        (b"n,,n=alice", "no username"),
        (b"n,,n=alice,r=", "no nonce"),
        (b"n,,n=alice,s=abc", "no nonce"),
        (b"x,,n=alice,r=abc", "channel-binding flag"),
        (b"p=,,n=alice,r=abc", "channel-binding flag"),
        (b"n,b=alice,n=alice,r=abc", "bad gs2 authzid"),
        (b"n", "no gs2 header"),
        (b"n,a=alice", "gs2 header not terminated"),
        (b"n,,n=\xffalice,r=abc", "not UTF-8"),
        (b"", "no gs2 header"),
        (b"c=biws,r=abc,p=" + PASSWORD.encode(), "channel-binding flag"),  # a client-final message
    ],
)
def test_malformed_scram_is_rejected(token: bytes, what: str) -> None:
    error = _assert_rejected(scram_principal, token, PASSWORD)
    assert what in error.detail


# --- OAUTHBEARER -----------------------------------------------------------------------------------


def test_oauthbearer_sub_of_an_unsecured_jwt() -> None:
    # librdkafka's unsecured JWT: alg none, empty signature, no padding.
    assert oauthbearer_principal(_oauth(_jwt({"sub": "alice", "iat": 1}))) == "alice"


def test_oauthbearer_with_signature_authzid_and_extensions() -> None:
    jwt = _jwt({"sub": "bob"}, signature=b"\x01\x02\x03\x04\x05", header={"alg": "RS256", "typ": "JWT"})
    token = _oauth(jwt, gs2="n,a=bob,", extensions="traceId=123\x01")
    assert oauthbearer_principal(token) == "bob"


def test_oauthbearer_claim_wins_over_gs2_authzid() -> None:
    # Kafka's OAuthBearerSaslServer fails an exchange whose authzid differs from the token's principal.
    assert oauthbearer_principal(_oauth(_jwt({"sub": "carol"}), gs2="n,a=mallory,")) == "carol"


@pytest.mark.parametrize(
    "payload", [{"sub": "alice"}, {"sub": "al"}, {"sub": "ali"}, {"sub": "alic", "x": 1}]
)
def test_oauthbearer_padded_and_unpadded_base64url(payload: dict[str, object]) -> None:
    unpadded, padded = _jwt(payload), _jwt(payload, signature=b"sig", pad=True)
    assert "=" in padded or len(json.dumps(payload)) % 3 == 0
    assert oauthbearer_principal(_oauth(unpadded)) == payload["sub"]
    assert oauthbearer_principal(_oauth(padded)) == payload["sub"]


def test_oauthbearer_payload_using_base64url_specific_characters() -> None:
    # '?>' encodes to 'Pz4' in standard base64 and keeps '-'/'_' out only by luck; force both characters.
    payload = {"sub": "dave", "blob": "\u00fb\u00ff\u00fe?>"}
    encoded = _b64url(json.dumps(payload, ensure_ascii=False).encode())
    assert "-" in encoded or "_" in encoded
    jwt = f"{_b64url(b'{}')}.{encoded}."
    assert oauthbearer_principal(_oauth(jwt)) == "dave"


def test_oauthbearer_custom_claim() -> None:
    token = _oauth(_jwt({"sub": "svc-123", "preferred_username": "erin"}))
    assert oauthbearer_principal(token, claim="preferred_username") == "erin"
    assert oauthbearer_principal(token) == "svc-123"


def test_oauthbearer_scheme_is_case_insensitive() -> None:
    token = b"n,,\x01auth=bearer " + _jwt({"sub": "frank"}).encode() + b"\x01\x01"
    assert oauthbearer_principal(token) == "frank"


@pytest.mark.parametrize(
    ("payload", "what"),
    [
        ({"sub": 42}, "not a string"),
        ({"sub": ["alice"]}, "not a string"),
        ({"sub": None}, "no 'sub' claim"),
        ({"iss": "idp"}, "no 'sub' claim"),
        ({"sub": ""}, "is empty"),
        (["sub", "alice"], "not a JSON object"),
    ],
)
def test_oauthbearer_claim_must_be_a_non_empty_string(payload: object, what: str) -> None:
    error = _assert_rejected(oauthbearer_principal, _oauth(_jwt(payload)))
    assert what in error.detail


def test_oauthbearer_missing_custom_claim_is_named() -> None:
    error = _assert_rejected(lambda t: oauthbearer_principal(t, claim="upn"), _oauth(_jwt({"sub": "x"})))
    assert "'upn'" in error.detail


_GOOD_JWT = _jwt({"sub": "alice", "secret": "tok3n-s3cr3t"})
_GOOD_HEADER, _GOOD_PAYLOAD, _ = _GOOD_JWT.split(".")


@pytest.mark.parametrize(
    ("token", "what"),
    [
        (_oauth(_GOOD_JWT).replace(b"\x01\x01", b"\x01"), "framed"),
        (_oauth(_GOOD_JWT)[:-1], "framed"),
        (_oauth(_GOOD_JWT).replace(b"n,,\x01", b"n,,"), "framed"),
        (b"n,,\x01\x01", "no auth pair"),
        (b"n,,\x01host=x\x01\x01", "no auth pair"),
        (_oauth(_GOOD_JWT, extensions="auth=Bearer x.y.z\x01"), "more than one auth"),
        (_oauth(_GOOD_JWT, extensions="\x01"), "malformed key-value"),
        (_oauth(_GOOD_JWT, extensions="k3y=v\x01"), "malformed key-value"),
        (_oauth(_GOOD_JWT, extensions="novalue\x01"), "malformed key-value"),
        (_oauth(_GOOD_JWT).replace(b"Bearer", b"Basic"), "not 'Bearer"),
        (_oauth(_GOOD_JWT).replace(b"Bearer ", b"Bearer"), "not 'Bearer"),
        (_oauth(_GOOD_JWT).replace(b"Bearer ", b"Bearer \t"), "not 'Bearer"),
        (_oauth(f"{_GOOD_HEADER}.{_GOOD_PAYLOAD}"), "2 dot-separated parts"),
        (_oauth(f"{_GOOD_JWT}.x.y"), "5 dot-separated parts"),
        (_oauth(f".{_GOOD_PAYLOAD}."), "header is not base64url"),
        (_oauth(f"{_GOOD_HEADER}..sig"), "payload is not base64url"),
        (
            _oauth(f"{_GOOD_HEADER}.{_GOOD_PAYLOAD}x."),
            "payload is not base64url",
        ),  # length 4n+1
        (_oauth(f"{_GOOD_HEADER}.{_GOOD_PAYLOAD}===."), "payload is not base64url"),
        (_oauth(f"{_GOOD_HEADER}.{_GOOD_PAYLOAD}=."), "padding"),
        (_oauth(f"{_GOOD_HEADER}.{_GOOD_PAYLOAD}.a+b/"), "signature is not base64url"),
        (_oauth(f"{_b64url(b'not json')}.{_GOOD_PAYLOAD}."), "header is not UTF-8 JSON"),
        (_oauth(f"{_b64url(b'[1]')}.{_GOOD_PAYLOAD}."), "header is not a JSON object"),
        (_oauth(f"{_GOOD_HEADER}.{_b64url(bytes([0xFF, 0xFE]))}."), "payload is not UTF-8 JSON"),
        (_oauth(f"{_GOOD_HEADER}.{_b64url(b'[' * 100_000)}."), "payload is not UTF-8 JSON"),
        (_oauth(_GOOD_JWT, gs2="n,a=,"), "authzid is empty"),
        (_oauth(_GOOD_JWT, gs2="n,"), "gs2 header not terminated"),
        (b"\x01", "no gs2 header"),
        (b"\xff" + _oauth(_GOOD_JWT), "not UTF-8"),
    ],
)
def test_malformed_oauthbearer_is_rejected_without_the_token(token: bytes, what: str) -> None:
    error = _assert_rejected(oauthbearer_principal, token, "tok3n-s3cr3t", _GOOD_PAYLOAD)
    assert what in error.detail


def test_the_payload_checks_pass_for_the_good_token() -> None:
    # Guards the table above: each malformed case differs from a token that parses.
    assert oauthbearer_principal(_oauth(_GOOD_JWT)) == "alice"
