"""The characters one position of a regular expression can read, as code-point ranges, for
config/regex_backtracking.py: what matters there is whether two positions can read the same character.

Where this cannot be exact it gives a superset, so that two positions are never wrongly told apart: the
Unicode classes (\\d, \\w, \\s and their negations) hold their ASCII members and every non-ASCII character,
a negated class holds every non-ASCII character, and ignoring case adds the other case of ASCII letters
and, for any other letter, every non-ASCII character.
"""

from __future__ import annotations

from collections.abc import Iterable
from re import _constants as c  # type: ignore[attr-defined]  # typeshed types only the deprecated sre_constants

__all__ = ["ANY_CHAR", "Ranges", "char_ranges", "class_ranges", "complement", "meet"]

Ranges = tuple[tuple[int, int], ...]
_MAX_CHAR = 0x10FFFF
ANY_CHAR: Ranges = ((0, _MAX_CHAR),)
_NON_ASCII: Ranges = ((0x80, _MAX_CHAR),)
_DIGIT, _WORD, _SPACE, _LINEBREAK = (
    ((48, 57),),
    ((48, 57), (65, 90), (95, 95), (97, 122)),
    ((9, 13), (28, 32)),
    ((10, 10),),
)
# The ASCII members of each class, and whether the class is their complement.
_CATEGORIES: dict[object, tuple[Ranges, bool]] = {}
for _members, _names in (
    (_DIGIT, ("DIGIT", "UNI_DIGIT")),
    (_WORD, ("WORD", "UNI_WORD", "LOC_WORD")),
    (_SPACE, ("SPACE", "UNI_SPACE")),
    (_LINEBREAK, ("LINEBREAK", "UNI_LINEBREAK")),
):
    for _name in _names:
        _CATEGORIES[getattr(c, f"CATEGORY_{_name}")] = (_members, False)
        _negated = _name.replace("_", "_NOT_", 1) if "_" in _name else f"NOT_{_name}"
        _CATEGORIES[getattr(c, f"CATEGORY_{_negated}")] = (_members, True)


def char_ranges(code: int, ignore_case: bool) -> Ranges:
    """One literal character (with its other case when case is ignored)."""
    char = chr(code)
    if ignore_case and char.lower() != char.upper():
        if code >= 0x80:
            return _NON_ASCII
        return _union([(ord(char.lower()),) * 2, (ord(char.upper()),) * 2])
    return ((code, code),)


def class_ranges(items: Iterable[tuple[object, object]], ignore_case: bool, ascii_only: bool) -> Ranges:
    """A character class, `[...]`, from the items re's parser made of it."""
    negate = False
    parts: list[tuple[int, int]] = []
    wide = False  # the class may hold non-ASCII characters that cannot be told apart here
    for op, arg in items:
        if op is c.NEGATE:
            negate = True
        elif op is c.LITERAL:
            assert isinstance(arg, int)  # a code point
            parts.extend(char_ranges(arg, ignore_case))
        elif op is c.RANGE:
            assert isinstance(arg, tuple)  # of two code points
            low, high = arg
            parts.append((low, high))
            if ignore_case:
                parts.extend(_other_case(low, high))
        elif op is c.CATEGORY:
            members, negated = _CATEGORIES[arg]
            parts.extend(complement(members) if negated else members)
            wide = not ascii_only
    ranges = _union(parts)
    if negate:
        ranges = complement(ranges)
        wide = True  # the complement of a superset is no superset: take every non-ASCII character
    return _union([*ranges, *_NON_ASCII]) if wide else ranges


def meet(x: Ranges, y: Ranges) -> bool:
    """Whether some character is in both."""
    i = j = 0
    while i < len(x) and j < len(y):
        if x[i][1] < y[j][0]:
            i += 1
        elif y[j][1] < x[i][0]:
            j += 1
        else:
            return True
    return False


def complement(ranges: Ranges) -> Ranges:
    out: list[tuple[int, int]] = []
    at = 0
    for low, high in ranges:
        if low > at:
            out.append((at, low - 1))
        at = high + 1
    if at <= _MAX_CHAR:
        out.append((at, _MAX_CHAR))
    return tuple(out)


def _union(parts: list[tuple[int, int]]) -> Ranges:
    merged: list[tuple[int, int]] = []
    for low, high in sorted(parts):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return tuple(merged)


def _other_case(low: int, high: int) -> list[tuple[int, int]]:
    """The other case of the ASCII letters in low..high; any non-ASCII character for the rest."""
    out: list[tuple[int, int]] = []
    for start, end, shift in ((65, 90, 32), (97, 122, -32)):
        lo, hi = max(low, start), min(high, end)
        if lo <= hi:
            out.append((lo + shift, hi + shift))
    if high >= 0x80:
        out.extend(_NON_ASCII)
    return out
