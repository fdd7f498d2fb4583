"""The user behind a TLS client certificate, named the way a Kafka broker names it.

Kafka takes the certificate subject as Java's `X500Principal.getName()` renders it (RFC 2253) and runs it
through `ssl.principal.mapping.rules`. This module does both, sans-IO:

* `rfc2253_name(subject)` renders the subject that Python's `SSLSocket.getpeercert()` returns;
* `PrincipalMappingRules` parses and applies the rules.

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

Rule syntax differences from Kafka (`SslPrincipalMapper`), all deliberate:

* patterns are Python `re` syntax, which agrees with Java's for what mapping rules use (classes, groups,
  lazy quantifiers, anchors); Java-only constructs (`(?<name>...)`, `\\p{...}`) are a ValueError;
* a `$n` naming a group the pattern does not have is literal text (Kafka means the same, but crashes when
  the pattern has no groups at all); a `$` not followed by a group reference, a dangling `\\` or a line
  break inside a rule is a ValueError at parse time instead of a failure at authentication time.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Iterable, Sequence
from typing import ClassVar

__all__ = ["NoMatchingRule", "PrincipalMappingRules", "rfc2253_name"]

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


class NoMatchingRule(ValueError):
    """No mapping rule matched the certificate's name; Kafka fails the authentication."""


class _Rule:
    """One `RULE:pattern/replacement/[LU]` (or DEFAULT when `pattern` is None)."""

    __slots__ = ("case", "pattern", "replacement", "text")

    def __init__(self, text: str, pattern: re.Pattern[str] | None, replacement: str, case: str) -> None:
        self.text = text
        self.pattern = pattern
        self.replacement = replacement
        self.case = case

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        result = _replace_all(self.pattern, self.replacement, dn)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result


class PrincipalMappingRules:
    """Kafka's `ssl.principal.mapping.rules`: the first rule whose pattern matches the whole name wins."""

    default: ClassVar[PrincipalMappingRules]

    def __init__(self, rules: Iterable[_Rule]) -> None:
        self._rules = tuple(rules)

    @classmethod
    def parse(cls, rules: str | list[str]) -> PrincipalMappingRules:
        """Parse rules, either Kafka's one comma-separated string or a list with one rule per item.

        In the string form commas may appear inside a rule's pattern and replacement: a rule runs from
        `RULE:` to the first comma after its closing '/' and optional L/U, and empty entries are ignored
        (Kafka's splitting). Raises ValueError quoting the bad rule and saying what was expected.
        """
        if isinstance(rules, str):
            texts = [text for text in _split(rules) if text]
        elif isinstance(rules, list) and all(isinstance(rule, str) for rule in rules):
            texts = [rule.strip() for rule in rules]
        else:
            raise ValueError(f"mapping rules must be a string or a list of strings, not {rules!r}")
        return cls(_parse_rule(text) for text in texts)

    def apply(self, dn: str) -> str:
        for rule in self._rules:
            principal = rule.apply(dn)
            if principal is not None:
                return principal
        raise NoMatchingRule(f"no mapping rule matches {dn!r} (rules: {self})")

    @property
    def rules(self) -> tuple[str, ...]:
        """Each rule's text as written (after splitting), for logs and config dumps."""
        return tuple(rule.text for rule in self._rules)

    def __str__(self) -> str:
        return ", ".join(self.rules) if self._rules else "none"

    def __repr__(self) -> str:
        return f"PrincipalMappingRules({list(self.rules)!r})"


_EXPECTED = "expected DEFAULT or RULE:pattern/replacement/ with an optional L or U after the last '/'"
_LINE_BREAKS = frozenset("\n\r\x85\u2028\u2029")


def _split(rules: str) -> list[str]:
    """Kafka's splitting of the one-string form into rule texts (blank entries kept as '')."""
    texts: list[str] = []
    pos, size = 0, len(rules)
    while pos < size:
        while pos < size and rules[pos].isspace():
            pos += 1
        start = pos
        if rules.startswith("RULE:", pos):
            closing = _closing_slash(rules, pos + len("RULE:"))
            if closing is not None:
                # The rule's own text may hold commas; it ends at the first comma after its last '/'.
                pos = closing + 1
        comma = rules.find(",", pos)
        end = size if comma < 0 else comma
        texts.append(rules[start:end].rstrip())
        pos = end + 1
    return texts


def _closing_slash(text: str, pos: int) -> int | None:
    """Index of the '/' that closes `pattern/replacement/` starting at `pos`, or None if there is none.

    A backslash escapes the character after it (so `\\/` is no separator), except a line break."""
    slashes = 0
    while pos < len(text):
        char = text[pos]
        if char == "\\":
            if pos + 1 >= len(text) or text[pos + 1] in _LINE_BREAKS:
                return None
            pos += 2
            continue
        if char == "/":
            slashes += 1
            if slashes == 2:
                return pos
        pos += 1
    return None


def _parse_rule(text: str) -> _Rule:
    if text == "DEFAULT":
        return _Rule(text, None, "", "")
    if any(char in _LINE_BREAKS for char in text):
        raise ValueError(f"invalid mapping rule {text!r}: a rule cannot span lines; {_EXPECTED}")
    if not text.startswith("RULE:"):
        raise ValueError(f"invalid mapping rule {text!r}: {_EXPECTED}")
    closing = _closing_slash(text, len("RULE:"))
    if closing is None:
        raise ValueError(f"invalid mapping rule {text!r}: {_EXPECTED}")
    case = text[closing + 1 :]
    if case not in ("", "L", "U"):
        raise ValueError(
            f"invalid mapping rule {text!r}: unexpected {case!r} after the last '/'; {_EXPECTED}"
        )
    body = text[len("RULE:") : closing]
    middle = _closing_slash_of_pattern(body)
    pattern_text, replacement = body[:middle], body[middle + 1 :]
    try:
        pattern = re.compile(pattern_text)
    except (re.error, OverflowError, RecursionError) as exc:  # the last two: huge counts, deep nesting
        raise ValueError(f"invalid mapping rule {text!r}: bad pattern ({exc})") from None
    _check_replacement(text, replacement, pattern)
    return _Rule(text, pattern, replacement, case)


def _closing_slash_of_pattern(body: str) -> int:
    pos = 0
    while body[pos] != "/":
        pos += 2 if body[pos] == "\\" else 1
    return pos


def _check_replacement(rule: str, replacement: str, pattern: re.Pattern[str]) -> None:
    pos = 0
    while pos < len(replacement):
        char = replacement[pos]
        if char == "\\":
            if pos + 1 >= len(replacement):
                raise ValueError(f"invalid mapping rule {rule!r}: the replacement ends with a lone '\\'")
            pos += 2
        elif char == "$":
            reference = _GROUP_REFERENCE.match(replacement, pos)
            if reference is None:
                raise ValueError(
                    f"invalid mapping rule {rule!r}: '$' in the replacement must be followed by a group "
                    "number or {name}; write \\$ for a literal '$'"
                )
            name = reference.group("name")
            if name is not None and name not in pattern.groupindex:
                raise ValueError(f"invalid mapping rule {rule!r}: the pattern has no group named {name!r}")
            pos = reference.end()
        else:
            pos += 1


_GROUP_REFERENCE = re.compile(r"\$(?:(?P<digits>[0-9]+)|\{(?P<name>[A-Za-z][A-Za-z0-9]*)\})")


def _replace_all(pattern: re.Pattern[str], replacement: str, text: str) -> str:
    """Java's `String.replaceAll`, which Kafka applies once the pattern matched the whole name.

    Not `re.sub`: after an empty match Java moves on one character, where Python retries the same place
    for a non-empty match, so unanchored patterns that can match the empty string differ ("ab" with
    `(.*?)` -> `x$1` gives "xaxbx" in Java). Like Java, `(.*)` on "ab" also replaces the empty match at
    the end: anchor patterns with ^ and $ as Kafka's documentation does."""
    out: list[str] = []
    copied = search_from = 0
    while search_from <= len(text):
        match = pattern.search(text, search_from)
        if match is None:
            break
        out += (text[copied : match.start()], _expand(replacement, match))
        copied = match.end()
        search_from = match.end() + 1 if match.end() == match.start() else match.end()
    out.append(text[copied:])
    return "".join(out)


def _expand(replacement: str, match: re.Match[str]) -> str:
    """Java's Matcher replacement syntax: `$n` and `${name}` insert groups, `\\x` is a literal x.

    Like Java, `$12` means group 12 only if the pattern has 12 groups, else group 1 then '2'; a first
    digit above the group count is left as literal text (Kafka's escapeLiteralBackReferences)."""
    groups = match.re.groups
    out: list[str] = []
    pos = 0
    while pos < len(replacement):
        char = replacement[pos]
        if char == "\\":
            out.append(replacement[pos + 1])
            pos += 2
            continue
        if char != "$":
            out.append(char)
            pos += 1
            continue
        reference = _GROUP_REFERENCE.match(replacement, pos)
        assert reference is not None  # checked at parse time
        name = reference.group("name")
        if name is not None:
            out.append(match.group(name) or "")
            pos = reference.end()
            continue
        digits = reference.group("digits")
        number = int(digits[0])
        if number > groups:
            out.append("$" + digits[0])
            pos += 2
            continue
        used = 1
        while used < len(digits) and number * 10 + int(digits[used]) <= groups:
            number = number * 10 + int(digits[used])
            used += 1
        out.append(match.group(number) or "")
        pos += 1 + used
    return "".join(out)


PrincipalMappingRules.default = PrincipalMappingRules([_Rule("DEFAULT", None, "", "")])
