"""Hypothesis fuzzing of the SASL token parsers, the SASL body codecs and the exchange state machine.

Properties: every parser and decoder either answers or raises the one typed error (ProtocolError, of
which SaslTokenError is a kind); the exchange never raises; SCRAM usernames survive escaping; and no
error message ever quotes a password or a token.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable

import scramp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sasl_tokens import b64url

from sluice.protocol.errors import ProtocolError
from sluice.protocol.sasl import (
    decode_authenticate_request,
    decode_authenticate_response,
    decode_handshake_request,
    decode_handshake_response,
    encode_authenticate_request,
    encode_authenticate_response,
)
from sluice.protocol.sasl_exchange import SaslExchange, SaslOutcome
from sluice.protocol.sasl_mechanisms import (
    SaslTokenError,
    oauthbearer_principal,
    plain_principal,
    scram_principal,
)

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

PARSERS: list[Callable[[bytes], str]] = [plain_principal, scram_principal, oauthbearer_principal]
DECODERS = [
    decode_handshake_request,
    decode_handshake_response,
    decode_authenticate_request,
    decode_authenticate_response,
]
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI"]


# Bytes that look like the start of a real token, so that fuzzing reaches past the first check.
_PREFIXES = [
    b"",
    b"n,,",
    b"n,,n=",
    b"n,a=",
    b"y,,",
    b"\x00",
    b"n,,\x01auth=Bearer ",
    b"n,,\x01auth=Bearer e30.",
]
_SYMBOLS = b"\x00\x01,=.-_ nrpmayBearerauth23CD"
token_bytes = st.one_of(
    st.binary(max_size=200),
    st.builds(
        lambda prefix, body: prefix + body,
        st.sampled_from(_PREFIXES),
        st.lists(st.sampled_from(list(_SYMBOLS)), max_size=60).map(bytes) | st.binary(max_size=60),
    ),
)


_name_parts = st.text(alphabet=st.sampled_from(list("ab,=23CDcé\x00\x01")), max_size=8)
near_valid_tokens = st.one_of(
    st.builds(lambda z, c, p: f"{z}\x00{c}\x00{p}".encode(), _name_parts, _name_parts, _name_parts),
    st.builds(
        lambda flag, a, n, r: f"{flag},{a},n={n},r={r}".encode(),
        st.sampled_from(["n", "y", "p=tls-unique", "x", ""]),
        st.sampled_from(["", "a=", "a=x=2C", "a=b=2"]),
        _name_parts,
        _name_parts,
    ),
)


@st.composite
def jwt_like_tokens(draw: st.DrawFn) -> bytes:
    """OAUTHBEARER initial responses whose JWT parts are valid base64url of arbitrary (often JSON) bytes."""
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=10),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
        max_leaves=8,
    )
    payload = draw(
        st.one_of(
            st.fixed_dictionaries({"sub": st.text(max_size=8)}, optional={"x": json_values}),
            st.dictionaries(st.sampled_from(["sub", "iss", "x"]), json_values, max_size=3),
        ).map(lambda claims: json.dumps(claims).encode())
        | st.binary(max_size=40)
    )
    header = draw(st.sampled_from([b'{"alg":"none"}', b'{"alg":"none"}', b"{}", b"[]", b"", b"{"]))
    signature = draw(st.binary(max_size=8))
    return f"n,,\x01auth=Bearer {b64url(header)}.{b64url(payload)}.{b64url(signature)}\x01\x01".encode()


@FUZZ
@given(token=token_bytes | near_valid_tokens | jwt_like_tokens())
def test_parsers_return_a_principal_or_raise_sasl_token_error(token: bytes) -> None:
    for parse in PARSERS:
        try:
            principal = parse(token)
        except SaslTokenError as error:
            assert error.reason == "bad_sasl_token"
        else:
            assert isinstance(principal, str)
            assert principal


@FUZZ
@given(version=st.integers(-1, 4), body=st.binary(max_size=80))
def test_decoders_return_or_raise_protocol_error(version: int, body: bytes) -> None:
    for decode in DECODERS:
        with contextlib.suppress(ProtocolError):  # anything else fails the test
            decode(version, body)


@FUZZ
@given(
    version=st.integers(0, 2),
    error_code=st.integers(-(2**15), 2**15 - 1),
    message=st.none() | st.text(max_size=20),
    auth_bytes=st.binary(max_size=40),
    lifetime=st.integers(0, 2**63 - 1),
    cut=st.integers(0, 200),
)
def test_mangled_authenticate_responses_decode_or_raise_protocol_error(
    version: int, error_code: int, message: str | None, auth_bytes: bytes, lifetime: int, cut: int
) -> None:
    body = encode_authenticate_response(version, error_code, message, auth_bytes, lifetime)
    assert decode_authenticate_response(version, body).auth_bytes == auth_bytes
    for mangled in (body[: cut % (len(body) + 1)], body + bytes([cut % 256]), body[cut % len(body) :]):
        with contextlib.suppress(ProtocolError):  # anything else fails the test
            decode_authenticate_response(version, mangled)


_events = st.lists(
    st.tuples(
        st.booleans(),  # True: a client token; False: a server answer
        token_bytes
        | near_valid_tokens
        | jwt_like_tokens()
        | st.sampled_from([b"", b"v=abc", b"e=invalid-proof", b"{}"]),
        st.sampled_from([0, 0, 0, 58, 34]),
    ),
    max_size=6,
)


@FUZZ
@given(mechanism=st.sampled_from(MECHANISMS), claim=st.sampled_from(["sub", "x", ""]), events=_events)
def test_exchange_never_raises_and_its_outcome_is_final(
    mechanism: str, claim: str, events: list[tuple[bool, bytes, int]]
) -> None:
    exchange = SaslExchange(mechanism, principal_claim=claim)
    previous = SaslOutcome.PENDING
    for from_client, token, error_code in events:
        if from_client:
            exchange.client_token(token)
            continue
        outcome = exchange.server_token(token, error_code)
        assert outcome is exchange.outcome
        if previous is not SaslOutcome.PENDING:
            assert outcome is previous
        elif error_code:
            assert outcome is SaslOutcome.FAILED
        if not exchange.followable:
            assert outcome is not SaslOutcome.SUCCEEDED
        previous = outcome
    assert exchange.principal is None or (isinstance(exchange.principal, str) and exchange.principal)


# Printable ASCII plus a few letters SASLprep leaves alone, so that scramp sends the name unchanged.
_saslprep_stable = st.text(
    alphabet=st.sampled_from([chr(c) for c in range(0x21, 0x7F)] + list(",,==äöüßé€")),
    min_size=1,
    max_size=20,
)


@FUZZ
@given(username=_saslprep_stable)
def test_scram_usernames_round_trip_through_scramp_escaping(username: str) -> None:
    client_first = scramp.ScramClient(["SCRAM-SHA-256"], username, "pw").get_client_first().encode()
    assert scram_principal(client_first) == username


@FUZZ
@given(username=st.text(min_size=1, max_size=30).filter(lambda name: "\x00" not in name))
def test_scram_escape_round_trips_for_any_username(username: str) -> None:
    escaped = username.replace("=", "=3D").replace(",", "=2C")
    assert scram_principal(f"n,a={escaped},n={escaped},r=nonce".encode()) == username


# Distinctive, so that finding it in an error message cannot be a coincidence of fixed wording.
secrets = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=6, max_size=16).map(
    lambda text: "S3CRET" + text
)


def _mangle(token: bytes, position: int, junk: bytes) -> list[bytes]:
    cut = position % (len(token) + 1)
    return [token, token[:cut], token[:cut] + junk + token[cut:], token[:cut] + junk, junk + token[cut:]]


def _error_texts(token: bytes) -> list[str]:
    texts = []
    for parse in PARSERS:
        try:
            parse(token)
        except ProtocolError as error:
            texts.append(str(error))
    for version in (0, 1, 2):
        for body in (token, encode_authenticate_request(version, token)[:-1]):
            for decode in DECODERS:
                try:
                    decode(version, body)
                except ProtocolError as error:
                    texts.append(str(error))
    return texts


@FUZZ
@given(secret=secrets, user=st.text(max_size=8), position=st.integers(0, 500), junk=st.binary(max_size=6))
def test_no_error_message_quotes_a_password(secret: str, user: str, position: int, junk: bytes) -> None:
    plain = f"\x00{user}\x00{secret}".encode()
    scram_final = f"c=biws,r=nonce,p={secret}".encode()
    for token in [*_mangle(plain, position, junk), *_mangle(scram_final, position, junk)]:
        for text in _error_texts(token):
            assert secret not in text


@FUZZ
@given(
    secret=secrets,
    position=st.integers(0, 500),
    junk=st.binary(max_size=6),
    claim=st.sampled_from(["sub", "x"]),
)
def test_no_error_message_quotes_a_bearer_token(secret: str, position: int, junk: bytes, claim: str) -> None:
    payload = b64url(json.dumps({"sub": secret, "x": [secret]}).encode())
    jwt = f"{b64url(b'{}')}.{payload}.{b64url(secret.encode())}"
    token = f"n,,\x01auth=Bearer {jwt}\x01\x01".encode()
    for mangled in _mangle(token, position, junk):
        try:
            oauthbearer_principal(mangled, claim)
        except ProtocolError as error:
            assert secret not in str(error)
            assert payload not in str(error)
        for text in _error_texts(mangled):
            assert secret not in text
            assert payload not in text
