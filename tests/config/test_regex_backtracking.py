"""The exponential-backtracking check on patterns (config/regex_backtracking.py): patterns a backtracking
matcher can spend exponential time on are found, unambiguous and polynomial ones pass."""

from __future__ import annotations

import pytest

from sluice.config.errors import ConfigError
from sluice.config.load import load_config
from sluice.config.principal_mapping import PrincipalMappingRules
from sluice.config.regex_backtracking import MAX_STEPS, TooComplex, exponential_backtracking

EXPONENTIAL = [
    r"(a+)+",
    r"(a*)*",
    r"(a|a)*",
    r"(a|ab|b)*",
    r"^CN=(\w+\s?)+$",  # 24 letters and a "!" took 1.2 s here; each more letter doubles it
    r"(\d+)*$",
    r"(\s*\w+)*!",
    r"(x+x+)+y",
    r"(.*,)*$",
    r"(?=(a+)+b)a",  # inside a lookahead
    r"((?i:a)|A)+",  # ignoring case, both branches read "a"
    r"(?:[a-z]|[a-z])*$",  # re factors it into [a-z](?:|): two empty ways after each letter
    r"(é|[^,])+$",  # a literal non-ASCII character inside a negated class
    r"(a|a){30}",  # a bounded repeat can be exponential in its bound: it counts as a loop
    r"(\w+)*(\1)",
]
POLYNOMIAL_OR_LINEAR = [
    r"(\w+,)*",  # a separator makes each round's text unique
    r"(a|ab)*c",
    r"^CN=([^,]+),OU=eng,.*$",
    # Kafka's documented example: polynomial at worst, not exponential.
    r"^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$",
    r"(\d{1,3}\.){3}\d{1,3}",
    r".*.*=",
    r"^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$",
    r"[^,]+(,[^,]+)*",
    r"(\w|\d)+$",  # re turns the alternation into one class: one way per character
    r"(a|b?)+$",  # a round that reads nothing ends the loop in re
    r"(?:(?!,).)+",
]


@pytest.mark.parametrize("pattern", EXPONENTIAL)
def test_patterns_that_backtrack_exponentially_are_found(pattern: str) -> None:
    assert exponential_backtracking(pattern) is not None


@pytest.mark.parametrize("pattern", POLYNOMIAL_OR_LINEAR)
def test_patterns_with_one_way_per_text_pass(pattern: str) -> None:
    assert exponential_backtracking(pattern) is None


def test_a_pattern_too_large_to_check_says_so() -> None:
    pattern = "(?:" + "|".join(f"[^{chr(i)}]{chr(i)}" for i in range(0x100, 0x500)) + ")*"
    with pytest.raises(TooComplex, match=str(MAX_STEPS)):
        exponential_backtracking(pattern)


def test_a_mapping_rule_that_backtracks_exponentially_is_refused_naming_the_key() -> None:
    with pytest.raises(ValueError, match="exponentially many ways"):
        PrincipalMappingRules.parse(r"RULE:^CN=(\w+\s?)+$/$1/,DEFAULT")
    with pytest.raises(ConfigError) as raised:
        load_config(
            overrides={
                "listen": "127.0.0.1:9092",
                "upstream.bootstrap": "kafka:9092",
                "tls.principal_mapping_rules": [r"RULE:^CN=(\w+\s?)+,O=x$/$1/L", "DEFAULT"],
            }
        )
    assert raised.value.key == "tls.principal_mapping_rules"
    assert "exponentially" in raised.value.expected
