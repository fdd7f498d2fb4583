"""Kafka's `ssl.principal.mapping.rules`: how a TLS client certificate's name (RFC 2253, rendered by
protocol/ssl_principal.py) becomes the user. `PrincipalMappingRules.parse` reads the rules (a ValueError
quotes a bad rule), `apply` maps a name: the first rule whose pattern matches the whole name wins,
DEFAULT keeps the name, and no match raises NoMatchingRule (Kafka fails the authentication).

Rule syntax differences from Kafka (`SslPrincipalMapper`), all deliberate:

* patterns are Python `re` syntax, which agrees with Java's for what mapping rules use (classes, groups,
  lazy quantifiers, anchors); Java-only constructs (`(?<name>...)`, `\\p{...}`) are a ValueError;
* a `$n` naming a group the pattern does not have is literal text (Kafka means the same, but crashes when
  the pattern has no groups at all); a `$` not followed by a group reference, a dangling `\\` or a line
  break inside a rule is a ValueError at parse time instead of a failure at authentication time;
* a pattern that can backtrack exponentially (`(a+)+`, `(\\w+\\s?)+`: config/regex_backtracking.py) is a
  ValueError: Java and Python alike would spend hours on one certificate name that fails to match it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import ClassVar

from sluice.config.regex_backtracking import TooComplex, exponential_backtracking

__all__ = ["NoMatchingRule", "PrincipalMappingRules"]


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
        backtracking = exponential_backtracking(pattern_text)
    except (re.error, OverflowError, RecursionError) as exc:  # the last two: huge counts, deep nesting
        raise ValueError(f"invalid mapping rule {text!r}: bad pattern ({exc})") from None
    except TooComplex as exc:
        raise ValueError(f"invalid mapping rule {text!r}: a pattern too large to check ({exc})") from None
    if backtracking is not None:
        raise ValueError(
            f"invalid mapping rule {text!r}: the pattern can match one name in exponentially many ways "
            f"(a repetition around {backtracking} can read the same text in two ways, as (a+)+ or (a|a)* "
            "do), so a certificate name that fails to match could take the matcher hours; write each "
            "repeated part so that it can match a given text in one way only"
        )
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
