"""Kafka's ssl.principal.mapping.rules: the cases of Kafka's SslPrincipalMapperTest, then our own."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.config.principal_mapping import NoMatchingRule, PrincipalMappingRules

# ---------------------------------------------------------------- mapping rules: Kafka's cases

KAFKA_VALID_RULES = [
    "DEFAULT",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
    "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
    "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
    "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
]


@pytest.mark.parametrize("rules", KAFKA_VALID_RULES)
def test_kafkas_valid_rules_parse(rules: str) -> None:
    assert PrincipalMappingRules.parse(rules).rules


@pytest.mark.parametrize(
    "rules",
    [
        "default",
        "DEFAUL",
        "DEFAULT/L",
        "DEFAULT/U",
        "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
        "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
    ],
)
def test_kafkas_invalid_rules_are_value_errors_that_quote_the_rule_and_say_what_is_expected(
    rules: str,
) -> None:
    with pytest.raises(ValueError, match="expected DEFAULT or RULE:pattern/replacement/") as caught:
        PrincipalMappingRules.parse(rules)
    assert "invalid mapping rule '" in str(caught.value)


def test_kafkas_mapper_cases() -> None:
    mapper = PrincipalMappingRules.parse(
        ", ".join(
            [
                "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
                "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
                "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
                "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
                "DEFAULT",
            ]
        )
    )
    assert mapper.apply("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.apply("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.apply("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.apply("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert mapper.apply("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"


@pytest.mark.parametrize(
    ("rules", "texts"),
    [
        ("", ()),
        ("DEFAULT", ("DEFAULT",)),
        ("RULE://", ("RULE://",)),
        ("RULE:/.*/", ("RULE:/.*/",)),
        ("RULE:/.*/L", ("RULE:/.*/L",)),
        ("RULE://,DEFAULT", ("RULE://", "DEFAULT")),
        ("  RULE:// ,  DEFAULT  ", ("RULE://", "DEFAULT")),
        ("  RULE:   /     / ,  DEFAULT  ", ("RULE:   /     /", "DEFAULT")),
        ("  RULE:  /     /U   ,DEFAULT  ", ("RULE:  /     /U", "DEFAULT")),
        (
            "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ",
            ("RULE:([A-Z]*)/$1/U", "RULE:([a-z]+)/$1/", "DEFAULT"),
        ),
        (",   , , ,      , , ,   ", ()),
        (",,RULE://,,,DEFAULT,,", ("RULE://", "DEFAULT")),
        (",  , RULE: /   /    ,,,   DEFAULT, ,   ", ("RULE: /   /", "DEFAULT")),
        ("     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,", ("RULE:   /  /U", "DEFAULT")),
        (r"RULE:\/\\\(\)\n\t/\/\//", (r"RULE:\/\\\(\)\n\t/\/\//",)),
        (r"RULE:\**\/+/*/L,RULE:\/*\**/**/", (r"RULE:\**\/+/*/L", r"RULE:\/*\**/**/")),
        (
            r"RULE:,RULE:,/,RULE:,\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,"
            r"RULE:, DEFAULT, /DEFAULT/,DEFAULT",
            (
                r"RULE:,RULE:,/,RULE:,\//U",
                "RULE:,/RULE:,/",
                "RULE:,RULE:,/L,RULE:,/L",
                "RULE:, DEFAULT, /DEFAULT/",
                "DEFAULT",
            ),
        ),
    ],
)
def test_rules_split_as_kafka_splits_them(rules: str, texts: tuple[str, ...]) -> None:
    assert PrincipalMappingRules.parse(rules).rules == texts


def test_commas_inside_patterns_and_replacements_belong_to_the_rule() -> None:
    mapper = PrincipalMappingRules.parse(
        r"RULE:,RULE:,/,RULE:,\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, /DEFAULT/,DEFAULT"
    )
    assert mapper.apply(",RULE:,") == ",RULE:,/"  # pattern ',RULE:,', replacement ',RULE:,\/', /U
    assert mapper.apply(",") == "RULE:,"
    assert mapper.apply(", DEFAULT, ") == "DEFAULT"
    assert mapper.apply("anything else") == "anything else"


def test_an_escaped_comma_in_the_name_can_be_captured() -> None:
    mapper = PrincipalMappingRules.parse(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.apply(r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz") == r"Tkac\, Adam"


# ---------------------------------------------------------------- mapping rules: our own cases


def test_the_default_rules_return_the_name_unchanged() -> None:
    assert PrincipalMappingRules.default.apply("CN=alice,O=Sluice") == "CN=alice,O=Sluice"
    assert PrincipalMappingRules.default.rules == ("DEFAULT",)


def test_no_matching_rule_is_a_typed_value_error_naming_the_name() -> None:
    mapper = PrincipalMappingRules.parse("RULE:^CN=([a-z]+)$/$1/")
    with pytest.raises(NoMatchingRule, match="CN=Bob,O=x") as caught:
        mapper.apply("CN=Bob,O=x")
    assert isinstance(caught.value, ValueError)


def test_an_empty_rule_set_matches_nothing_like_kafka() -> None:
    with pytest.raises(NoMatchingRule):
        PrincipalMappingRules.parse("").apply("CN=alice")


def test_the_pattern_must_match_the_whole_name() -> None:
    mapper = PrincipalMappingRules.parse("RULE:CN=([a-z]+)/$1/")
    assert mapper.apply("CN=alice") == "alice"
    with pytest.raises(NoMatchingRule):
        mapper.apply("CN=alice,O=Org")


def test_the_first_matching_rule_wins() -> None:
    mapper = PrincipalMappingRules.parse("RULE:^CN=(.*),O=A$/a-$1/, RULE:^CN=(.*),O=.*$/any-$1/, DEFAULT")
    assert mapper.apply("CN=x,O=A") == "a-x"
    assert mapper.apply("CN=x,O=B") == "any-x"
    assert mapper.apply("OU=x") == "OU=x"


def test_a_list_holds_one_rule_per_item_with_commas_kept_inside() -> None:
    mapper = PrincipalMappingRules.parse(["RULE:^CN=([^,]+),OU=(.*)$/$1 of $2/U", " DEFAULT "])
    assert mapper.rules == ("RULE:^CN=([^,]+),OU=(.*)$/$1 of $2/U", "DEFAULT")
    assert mapper.apply("CN=bob,OU=Eng,O=Org") == "BOB OF ENG,O=ORG"


def test_a_list_item_holding_two_rules_is_rejected_with_the_item_quoted() -> None:
    with pytest.raises(ValueError, match=r"'RULE:a/b/, DEFAULT'.*unexpected ', DEFAULT'"):
        PrincipalMappingRules.parse(["RULE:a/b/, DEFAULT"])


@pytest.mark.parametrize("bad", [["RULE:a/b/", 3], b"RULE:a/b/", None])
def test_rules_of_the_wrong_type_are_value_errors(bad: object) -> None:
    with pytest.raises(ValueError, match="must be a string or a list of strings"):
        PrincipalMappingRules.parse(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("rules", "reason"),
    [
        ("RULE:([a-z/x/", "bad pattern"),
        ("RULE:(?<name>a)/x/", "bad pattern"),
        ("RULE:a{99999999999}/x/", "bad pattern"),
        ("RULE:" + "(" * 5000 + ")" * 5000 + "/x/", "bad pattern"),
        ("RULE:(a)/$/", "followed by a group number"),
        ("RULE:(a)/cost $x/", "followed by a group number"),
        ("RULE:(a)/${who}/", "no group named 'who'"),
        ("RULE:(a)/x\\/", "expected DEFAULT or RULE"),
    ],
)
def test_bad_patterns_and_replacements_fail_at_parse_time(rules: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        PrincipalMappingRules.parse(rules)


def test_a_rule_spanning_lines_is_rejected() -> None:
    with pytest.raises(ValueError, match="cannot span lines"):
        PrincipalMappingRules.parse("RULE:a\nb/c/")


def test_line_breaks_between_rules_are_whitespace() -> None:
    assert PrincipalMappingRules.parse("RULE:a/b/,\n  DEFAULT\n").rules == ("RULE:a/b/", "DEFAULT")


@pytest.mark.parametrize(
    ("replacement", "principal"),
    [
        ("$1-$2", "a-b"),
        ("$12", "a2"),  # two groups: $12 is group 1 then '2', as in Java
        ("$3", "$3"),  # no group 3: literal, as Kafka's escapeLiteralBackReferences makes it
        ("$0", "a:b"),
        (r"\$1", "$1"),
        (r"a\\b", "a\\b"),
        ("${first}", "a"),
        ("<$2>", "<b>"),
    ],
)
def test_replacements_follow_java_syntax(replacement: str, principal: str) -> None:
    mapper = PrincipalMappingRules.parse([f"RULE:(?P<first>[a-z]):([a-z])/{replacement}/"])
    assert mapper.apply("a:b") == principal


def test_twelve_groups_make_12_one_reference() -> None:
    pattern = "".join(f"({c})" for c in "abcdefghijkl")
    assert PrincipalMappingRules.parse([f"RULE:{pattern}/$12$1/"]).apply("abcdefghijkl") == "la"


def test_a_group_that_did_not_take_part_inserts_nothing() -> None:
    assert PrincipalMappingRules.parse(["RULE:(a)?(b)/[$1$2]/"]).apply("b") == "[b]"


@pytest.mark.parametrize(
    ("rule", "name", "principal"),
    [
        # Kafka replaces with String.replaceAll once the pattern matched the whole name, so every match
        # is replaced; Java's answers for these unanchored patterns ("abc".replaceAll(".*", "X") is "XX").
        ("RULE:(.*?)/x$1/", "ab", "xaxbx"),
        ("RULE:.*/X/", "abc", "XX"),
        ("RULE:(.*)/<$1>/", "ab", "<ab><>"),
        ("RULE:^(.*)$/<$1>/", "ab", "<ab>"),
    ],
)
def test_every_match_is_replaced_as_java_replace_all_does(rule: str, name: str, principal: str) -> None:
    assert PrincipalMappingRules.parse([rule]).apply(name) == principal


def test_case_flags_apply_after_the_replacement() -> None:
    assert PrincipalMappingRules.parse("RULE:^(.*)$/Hi $1/L").apply("BoB") == "hi bob"
    assert PrincipalMappingRules.parse("RULE:^(.*)$/Hi $1/U").apply("BoB") == "HI BOB"


@given(st.text(max_size=60))
def test_parse_only_ever_raises_value_error(rules: str) -> None:
    try:
        mapper = PrincipalMappingRules.parse(rules)
    except ValueError:
        return
    with contextlib.suppress(NoMatchingRule):
        mapper.apply("CN=alice,O=Org")
