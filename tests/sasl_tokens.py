"""Client SASL tokens built by hand for tests: PLAIN (RFC 4616) and OAUTHBEARER initial responses
(RFC 7628) around unsecured JWTs (no crypto: Sluice never verifies a token, the broker does). SCRAM
messages come from the `scramp` package instead."""

from __future__ import annotations

import base64
import json


def b64url(raw: bytes, pad: bool = False) -> str:
    encoded = base64.urlsafe_b64encode(raw).decode()
    return encoded if pad else encoded.rstrip("=")


def unsecured_jwt(payload: object, signature: bytes = b"", pad: bool = False, header: object = None) -> str:
    """header.payload.signature, base64url; the header says alg none unless given."""
    header = {"alg": "none"} if header is None else header
    parts = (json.dumps(header).encode(), json.dumps(payload).encode(), signature)
    return ".".join(b64url(part, pad) for part in parts)


def oauthbearer_response(jwt: str, gs2: str = "n,,", extensions: str = "") -> bytes:
    return f"{gs2}\x01{extensions}auth=Bearer {jwt}\x01\x01".encode()


def plain_token(authcid: str, password: str = "pw", authzid: str = "") -> bytes:
    return f"{authzid}\x00{authcid}\x00{password}".encode()
