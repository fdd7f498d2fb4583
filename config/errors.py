"""The one error type a bad configuration raises."""

from __future__ import annotations

import reprlib


class _Missing:
    """Stands in for the value of a required key that was not given."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<missing>"


MISSING = _Missing()

# Values come from users and fuzzers; a 50 MB string must not become a 50 MB error message.
_short = reprlib.Repr()
_short.maxstring = 120
_short.maxother = 120
_short.maxlist = _short.maxtuple = _short.maxdict = _short.maxset = 8
_short.maxlevel = 3


class ConfigError(Exception):
    """A configuration problem: the key, the value found there and what was expected.

    Loading stops at the first problem; the CLI turns it into exit code 2.
    """

    def __init__(self, key: str, value: object, expected: str) -> None:
        self.key = key
        self.value = value
        self.expected = expected
        super().__init__(f"config error: {key}={_short.repr(value)}: expected {expected}")

    def __reduce__(self) -> tuple[type[ConfigError], tuple[str, object, str]]:
        # The default would call __init__ with the formatted message alone.
        return (type(self), (self.key, self.value, self.expected))
