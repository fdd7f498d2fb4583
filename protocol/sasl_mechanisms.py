"""The principal a client claims in its first SASL token, for PLAIN, SCRAM-SHA-* and OAUTHBEARER.

Nothing here verifies anything: the broker authenticates, and the caller trusts a claimed principal only
after the broker has answered success (see protocol.sasl_exchange). Parsing is nevertheless strict about
structure, so garbage yields SaslTokenError rather than a made-up principal.

Tokens carry passwords, SCRAM proofs and bearer tokens: a SaslTokenError says which part was wrong and
never quotes any of the token's content.
"""

from __future__ import annotations

import base64
import binascii
import json
import re

from sluice.protocol.errors import ProtocolError

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
OAUTHBEARER = "OAUTHBEARER"

__all__ = [
    "OAUTHBEARER",
    "PLAIN",
    "SCRAM_SHA_256",
    "SCRAM_SHA_512",
    "SaslTokenError",
    "oauthbearer_principal",
    "plain_principal",
    "scram_principal",
]

# RFC 5801 gs2-cbind-flag: "n", "y" or "p=" cb-name. Kafka itself only accepts "n"; a broker will reject
# the others, but they are well-formed and carry a readable name, so they parse.
_CB_NAME = re.compile(r"[A-Za-z0-9.-]+")
_KV_KEY = re.compile(r"[A-Za-z]+")
# RFC 6750 credentials: "Bearer" 1*SP b64token. '=' is accepted anywhere so that padded JWT parts parse.
_BEARER = re.compile(r"([A-Za-z]+) +([-_~+/.A-Za-z0-9=]+)")
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")
_KV_SEPARATOR = "\x01"


class SaslTokenError(ProtocolError):
    """A SASL token that does not have the structure its mechanism defines."""

    __slots__ = ()

    def __init__(self, detail: str) -> None:
        super().__init__("bad_sasl_token", detail)


def plain_principal(token: bytes) -> str:
    """RFC 4616 `[authzid] NUL authcid NUL passwd`: the authzid if non-empty, else the authcid.

    Kafka's PlainSaslServer rejects an authzid that differs from the authcid, so after a successful
    exchange both choices agree.
    """
    parts = bytes(token).split(b"\x00")
    if len(parts) != 3:
        raise SaslTokenError(f"PLAIN: expected 3 NUL-separated parts, found {len(parts)}")
    authzid, authcid, _password = parts
    if not authcid:
        raise SaslTokenError("PLAIN: empty authentication id")
    return _utf8(authzid or authcid, "PLAIN: " + ("authorization id" if authzid else "authentication id"))


def scram_principal(client_first: bytes) -> str:
    """The unescaped username (`n=`) of an RFC 5802 client-first-message.

    The gs2 header's authzid (`a=`), if any, is checked for well-formedness but does not win: Kafka's
    ScramSaslServer authenticates the username and rejects an authzid different from it, so the
    username is the principal of every exchange the broker accepts.
    """
    text = _utf8(client_first, "SCRAM: client-first-message")
    _authzid, bare = _split_gs2_header(text, "SCRAM")
    attributes = bare.split(",")
    if attributes[0].startswith("m="):  # reserved-mext: the server must fail it, but it is well-formed
        attributes = attributes[1:]
    if len(attributes) < 2 or not attributes[0].startswith("n="):
        raise SaslTokenError("SCRAM: no username attribute")
    if not attributes[1].startswith("r=") or len(attributes[1]) == 2:
        raise SaslTokenError("SCRAM: no nonce attribute")
    return _unescape_saslname(attributes[0][2:], "SCRAM: username")


def oauthbearer_principal(initial_response: bytes, claim: str = "sub") -> str:
    """The `claim` of the JWT in an RFC 7628 client initial response, read without verification.

    Layout: gs2-header, \\x01, `key=value\\x01` pairs (one of them `auth=Bearer <jwt>`), \\x01. The JWT's
    signature may be empty (unsecured JWTs, alg none) and its parts may omit base64url padding. The claim
    must be a non-empty string. As for SCRAM, a gs2 authzid does not win: Kafka's OAuthBearerSaslServer
    rejects one that differs from the token's principal.
    """
    text = _utf8(initial_response, "OAUTHBEARER: client initial response")
    _authzid, rest = _split_gs2_header(text, "OAUTHBEARER")
    if not rest.startswith(_KV_SEPARATOR) or not rest.endswith(_KV_SEPARATOR * 2) or len(rest) < 2:
        raise SaslTokenError("OAUTHBEARER: key-value pairs not framed by \\x01 ... \\x01\\x01")
    pairs = rest[1:-2].split(_KV_SEPARATOR) if len(rest) > 2 else []
    auth: str | None = None
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not _KV_KEY.fullmatch(key):
            raise SaslTokenError("OAUTHBEARER: malformed key-value pair")
        if key == "auth":
            if auth is not None:
                raise SaslTokenError("OAUTHBEARER: more than one auth pair")
            auth = value
    if auth is None:
        raise SaslTokenError("OAUTHBEARER: no auth pair")
    bearer = _BEARER.fullmatch(auth)
    if bearer is None or bearer.group(1).lower() != "bearer":
        raise SaslTokenError("OAUTHBEARER: auth is not 'Bearer <token>'")
    return _jwt_claim(bearer.group(2), claim)


def _jwt_claim(jwt: str, claim: str) -> str:
    parts = jwt.split(".")
    if len(parts) != 3:
        raise SaslTokenError(f"OAUTHBEARER: JWT has {len(parts)} dot-separated parts, expected 3")
    header_part, payload_part, signature_part = parts
    _json_object(_base64url(header_part, "header"), "header")
    payload = _json_object(_base64url(payload_part, "payload"), "payload")
    if signature_part:
        _base64url(signature_part, "signature")
    value = payload.get(claim)
    if value is None:
        raise SaslTokenError(f"OAUTHBEARER: JWT has no {claim!r} claim")
    if not isinstance(value, str):
        raise SaslTokenError(f"OAUTHBEARER: JWT claim {claim!r} is not a string")
    if not value:
        raise SaslTokenError(f"OAUTHBEARER: JWT claim {claim!r} is empty")
    return value


def _base64url(part: str, what: str) -> bytes:
    """RFC 7515 base64url, padding optional (RFC 7515 omits it, some encoders keep it)."""
    unpadded = part.rstrip("=")
    padding = len(part) - len(unpadded)
    if not part or not _BASE64URL.fullmatch(unpadded) or padding > 2 or len(unpadded) % 4 == 1:
        raise SaslTokenError(f"OAUTHBEARER: JWT {what} is not base64url")
    if padding and len(part) % 4:
        raise SaslTokenError(f"OAUTHBEARER: JWT {what} has wrong base64url padding")
    try:
        return base64.urlsafe_b64decode(unpadded + "=" * (-len(unpadded) % 4))
    except (binascii.Error, ValueError):
        raise SaslTokenError(f"OAUTHBEARER: JWT {what} is not base64url") from None


def _json_object(raw: bytes, what: str) -> dict[str, object]:
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):  # JSONDecodeError is a ValueError
        raise SaslTokenError(f"OAUTHBEARER: JWT {what} is not UTF-8 JSON") from None
    if not isinstance(value, dict):
        raise SaslTokenError(f"OAUTHBEARER: JWT {what} is not a JSON object")
    return value


def _split_gs2_header(text: str, mechanism: str) -> tuple[str | None, str]:
    """Split an RFC 5801 gs2-header off a message: (the unescaped authzid or None, the rest)."""
    flag, comma, rest = text.partition(",")
    if not comma:
        raise SaslTokenError(f"{mechanism}: no gs2 header")
    if flag not in ("n", "y") and not (flag.startswith("p=") and _CB_NAME.fullmatch(flag[2:])):
        raise SaslTokenError(f"{mechanism}: bad gs2 channel-binding flag")
    authz, comma, rest = rest.partition(",")
    if not comma:
        raise SaslTokenError(f"{mechanism}: gs2 header not terminated")
    if not authz:
        return None, rest
    if not authz.startswith("a="):
        raise SaslTokenError(f"{mechanism}: bad gs2 authzid")
    return _unescape_saslname(authz[2:], f"{mechanism}: authzid"), rest


def _unescape_saslname(escaped: str, what: str) -> str:
    """RFC 5802 saslname: '=2C' is ',' and '=3D' is '='; any other '=' is an error.

    The escapes are matched in upper case only, as Kafka's parser does (a broker rejects '=2c').
    """
    if not escaped:
        raise SaslTokenError(f"{what} is empty")
    if "\x00" in escaped:
        raise SaslTokenError(f"{what} contains NUL")
    first, *escapes = escaped.split("=")
    unescaped = [first]
    for piece in escapes:
        if piece.startswith("2C"):
            unescaped.append("," + piece[2:])
        elif piece.startswith("3D"):
            unescaped.append("=" + piece[2:])
        else:
            raise SaslTokenError(f"{what} has an '=' not followed by 2C or 3D")
    return "".join(unescaped)


def _utf8(raw: bytes, what: str) -> str:
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise SaslTokenError(f"{what} is not UTF-8") from None
