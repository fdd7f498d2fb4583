"""The user behind a TLS client certificate, named the way a Kafka broker names it.

Kafka takes the certificate subject as Java's `X500Principal.getName()` renders it (RFC 2253) and runs it
through `ssl.principal.mapping.rules` (config/principal_mapping.py). `rfc2253_name(subject)` renders the
subject that Python's `SSLSocket.getpeercert()` returns, sans-IO.

What Java prints, and so what rules written for Kafka expect (sun.security.x509.AVA/RDN):

* RDNs last-to-first, joined by ','; the AVAs of a multi-valued RDN in certificate order, joined by '+';
* keywords only for CN C L ST O OU STREET DC UID; every other attribute as its dotted OID with '#' and the
  lower-case hex of the value's DER encoding (emailAddress is `1.2.840.113549.1.9.1=#16...`);
* in string values a backslash before each of , = + < > # ; " \\ (Java escapes '=' and '#' everywhere,
  beyond RFC 2253's minimum), NUL as \\00, and a backslash before leading or trailing spaces and CRs.

One approximation: getpeercert() hands over attribute values as text, without their ASN.1 string type, so
the DER of a non-keyword attribute is rebuilt from the type its standard prescribes (PrintableString for
serialNumber, dnQualifier, jurisdictionCountryName; IA5String for emailAddress) and UTF8String for
DirectoryString attributes (title, givenName, surname, ...), which is what OpenSSL and `cryptography`
write by default. A certificate that chose another string type for one of those renders differently.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Sequence

__all__ = ["rfc2253_name"]

# OpenSSL long name -> the RFC 2253 keyword Java prints for it.
_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}

_UTF8_STRING = 0x0C
_PRINTABLE_STRING = 0x13
_IA5_STRING = 0x16

# OpenSSL long name -> (OID, the DER string type its standard prescribes, or UTF8String for the
# DirectoryString attributes). Names missing here are resolved through OpenSSL's own object table.
_NON_KEYWORD_ATTRIBUTES = {
    "emailAddress": ("1.2.840.113549.1.9.1", _IA5_STRING),
    "serialNumber": ("2.5.4.5", _PRINTABLE_STRING),
    "dnQualifier": ("2.5.4.46", _PRINTABLE_STRING),
    "jurisdictionCountryName": ("1.3.6.1.4.1.311.60.2.1.3", _PRINTABLE_STRING),
    "surname": ("2.5.4.4", _UTF8_STRING),
    "givenName": ("2.5.4.42", _UTF8_STRING),
    "initials": ("2.5.4.43", _UTF8_STRING),
    "generationQualifier": ("2.5.4.44", _UTF8_STRING),
    "title": ("2.5.4.12", _UTF8_STRING),
    "pseudonym": ("2.5.4.65", _UTF8_STRING),
    "name": ("2.5.4.41", _UTF8_STRING),
    "description": ("2.5.4.13", _UTF8_STRING),
    "postalCode": ("2.5.4.17", _UTF8_STRING),
    "businessCategory": ("2.5.4.15", _UTF8_STRING),
    "organizationIdentifier": ("2.5.4.97", _UTF8_STRING),
    "jurisdictionLocalityName": ("1.3.6.1.4.1.311.60.2.1.1", _UTF8_STRING),
    "jurisdictionStateOrProvinceName": ("1.3.6.1.4.1.311.60.2.1.2", _UTF8_STRING),
}

_DOTTED_OID = re.compile(r"[0-2](\.[0-9]+)+")
_ESCAPED_EVERYWHERE = frozenset(',=+<>#;"\\')
_EDGE_WHITESPACE = frozenset(" \r")


def rfc2253_name(subject: Sequence[Sequence[tuple[str, str]]]) -> str:
    """The subject as Java's `X500Principal.getName()` prints it (see the module docstring).

    `subject` is `getpeercert()["subject"]`: RDNs in certificate order, each a tuple of
    (OpenSSL long name, value). Raises ValueError for an attribute name OpenSSL does not know either.
    """
    return ",".join("+".join(_attribute(name, value) for name, value in rdn) for rdn in reversed(subject))


def _attribute(name: str, value: str) -> str:
    keyword = _KEYWORDS.get(name)
    if keyword is not None:
        return f"{keyword}={_escape(value)}"
    oid, tag = _non_keyword_attribute(name)
    return f"{oid}=#{_der_string(tag, value).hex()}"


def _non_keyword_attribute(name: str) -> tuple[str, int]:
    known = _NON_KEYWORD_ATTRIBUTES.get(name)
    if known is not None:
        return known
    if _DOTTED_OID.fullmatch(name):  # OpenSSL had no name for it
        return name, _UTF8_STRING
    try:
        # The stdlib's view of OpenSSL's object table: the OID of any long name OpenSSL can print.
        return ssl._ASN1Object.fromname(name).oid, _UTF8_STRING
    except (ValueError, AttributeError):
        raise ValueError(f"unknown certificate subject attribute {name!r}") from None


def _der_string(tag: int, value: str) -> bytes:
    if tag == _UTF8_STRING:
        data = value.encode("utf-8")
    else:
        try:
            data = value.encode("ascii")
        except UnicodeEncodeError:  # then it cannot have been a PrintableString or IA5String
            tag, data = _UTF8_STRING, value.encode("utf-8")
    return bytes([tag]) + _der_length(len(data)) + data


def _der_length(length: int) -> bytes:
    if length < 0x80:
        return bytes([length])
    octets = length.to_bytes((length.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(octets)]) + octets


def _escape(value: str) -> str:
    chars = ["\\00" if c == "\0" else "\\" + c if c in _ESCAPED_EVERYWHERE else c for c in value]
    lead = 0
    while lead < len(chars) and chars[lead] in _EDGE_WHITESPACE:
        lead += 1
    trail = len(chars)
    while trail > lead and chars[trail - 1] in _EDGE_WHITESPACE:
        trail -= 1
    return "".join("\\" + c if i < lead or i >= trail else c for i, c in enumerate(chars))
