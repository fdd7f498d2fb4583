"""The user behind a TLS client certificate, named the way a Kafka broker names it.

Kafka takes the certificate subject as Java's `X500Principal.getName()` renders it (RFC 2253) and runs it
through `ssl.principal.mapping.rules` (config/principal_mapping.py). `rfc2253_name(subject)` renders a
subject that `cryptography`'s x509 read from the certificate's DER, sans-IO.

What Java prints, and so what rules written for Kafka expect (sun.security.x509.AVA/RDN):

* RDNs last-to-first, joined by ','; the AVAs of a multi-valued RDN in certificate order (DER's sorted
  SET order), joined by '+';
* keywords only for CN C L ST O OU STREET DC UID; every other attribute as its dotted OID with '#' and the
  lower-case hex of the value's DER encoding (emailAddress is `1.2.840.113549.1.9.1=#16...`);
* in string values a backslash before each of , = + < > # ; " \\ (Java escapes '=' and '#' everywhere,
  beyond RFC 2253's minimum), NUL as \\00, and a backslash before leading or trailing spaces and CRs.

`cryptography` keeps each value's ASN.1 string type as the certificate wrote it (UTF8String,
PrintableString, IA5String, BMPString...), so the '#' hex is the certificate's own DER of the value, not
a guess from the attribute's standard. Its `rfc4514_string()` is not used: RFC 4514 escapes less than Java
and prints non-keyword attributes as text, not as '#' hex.
"""

from __future__ import annotations

from cryptography import x509
from cryptography.x509.oid import NameOID

__all__ = ["rfc2253_name"]

# The attributes Java's X500Principal.getName() names by keyword (RFC 2253's list plus UID).
_KEYWORDS = {
    NameOID.COMMON_NAME: "CN",
    NameOID.COUNTRY_NAME: "C",
    NameOID.LOCALITY_NAME: "L",
    NameOID.STATE_OR_PROVINCE_NAME: "ST",
    NameOID.ORGANIZATION_NAME: "O",
    NameOID.ORGANIZATIONAL_UNIT_NAME: "OU",
    NameOID.STREET_ADDRESS: "STREET",
    NameOID.DOMAIN_COMPONENT: "DC",
    NameOID.USER_ID: "UID",
}

_ESCAPED_EVERYWHERE = frozenset(',=+<>#;"\\')
_EDGE_WHITESPACE = frozenset(" \r")


def rfc2253_name(subject: x509.Name) -> str:
    """The subject as Java's `X500Principal.getName()` prints it (see the module docstring)."""
    return ",".join("+".join(_attribute(attribute) for attribute in rdn) for rdn in reversed(subject.rdns))


def _attribute(attribute: x509.NameAttribute[str | bytes]) -> str:
    keyword = _KEYWORDS.get(attribute.oid)
    if keyword is not None and isinstance(attribute.value, str):
        return f"{keyword}={_escape(attribute.value)}"
    return f"{attribute.oid.dotted_string}=#{_value_der(attribute).hex()}"


def _value_der(attribute: x509.NameAttribute[str | bytes]) -> bytes:
    """The value's DER (tag, length, contents) in the string type the certificate used: `cryptography`
    encodes a one-attribute Name from the parsed attribute, which kept that type."""
    # Name ::= SEQUENCE OF RDN; RDN ::= SET OF AttributeTypeAndValue; ATV ::= SEQUENCE { OID, value }.
    der = x509.Name([attribute]).public_bytes()
    atv_start, atv_end = _contents(der, _contents(der, _contents(der, 0)[0])[0])
    oid_end = _contents(der, atv_start)[1]
    return der[oid_end:atv_end]


def _contents(der: bytes, at: int) -> tuple[int, int]:
    """Where the contents of the DER element at `at` start and end (one-byte tags: universal types)."""
    first = der[at + 1]
    if first < 0x80:
        return at + 2, at + 2 + first
    count = first & 0x7F
    start = at + 2 + count
    return start, start + int.from_bytes(der[at + 2 : start], "big")


def _escape(value: str) -> str:
    chars = ["\\00" if c == "\0" else "\\" + c if c in _ESCAPED_EVERYWHERE else c for c in value]
    lead = 0
    while lead < len(chars) and chars[lead] in _EDGE_WHITESPACE:
        lead += 1
    trail = len(chars)
    while trail > lead and chars[trail - 1] in _EDGE_WHITESPACE:
        trail -= 1
    return "".join("\\" + c if i < lead or i >= trail else c for i, c in enumerate(chars))
