"""Certificate subjects rendered as Java's X500Principal.getName() and Kafka's ssl.principal.mapping.rules.

The rule cases are those of Kafka's SslPrincipalMapperTest; the rendering is checked against real
certificates (made with `cryptography`, read back through a real TLS handshake) and against Java's escaping.
"""

from __future__ import annotations

import contextlib
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID
from hypothesis import given
from hypothesis import strategies as st
from tls_certs import TestCA

from protocol.ssl_principal import NoMatchingRule, PrincipalMappingRules, rfc2253_name

# ---------------------------------------------------------------- rendering: synthetic subjects


def test_rdns_come_out_last_first_with_rfc2253_keywords() -> None:
    subject = (
        (("countryName", "US"),),
        (("stateOrProvinceName", "MD"),),
        (("localityName", "Fulton"),),
        (("organizationName", "mycp"),),
        (("organizationalUnitName", "SME"),),
        (("commonName", "Duke"),),
    )
    assert rfc2253_name(subject) == "CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US"


def test_street_dc_and_uid_have_keywords_too() -> None:
    subject = (
        (("domainComponent", "com"),),
        (("domainComponent", "example"),),
        (("streetAddress", "1 Main St"),),
        (("userId", "u42"),),
    )
    assert rfc2253_name(subject) == "UID=u42,STREET=1 Main St,DC=example,DC=com"


def test_a_multi_valued_rdn_keeps_its_certificate_order_joined_by_plus() -> None:
    subject = ((("organizationName", "Org"),), (("commonName", "duke"), ("userId", "42")))
    assert rfc2253_name(subject) == "CN=duke+UID=42,O=Org"


@pytest.mark.parametrize(
    ("value", "rendered"),
    [
        ("Tkac, Adam", r"Tkac\, Adam"),
        ("R+D", r"R\+D"),
        ('say "hi"', r"say \"hi\""),
        ("back\\slash", r"back\\slash"),
        ("<tag>", r"\<tag\>"),
        ("a;b", r"a\;b"),
        # Java escapes '=' and '#' anywhere (RFC 2253 allows escaping more than it requires).
        ("a=b", r"a\=b"),
        ("#1", r"\#1"),
        ("x#y", r"x\#y"),
        (" lead", r"\ lead"),
        ("trail ", r"trail\ "),
        ("  both  ", r"\ \ both\ \ "),
        ("in side", "in side"),
        ("nul\0", r"nul\00"),
        ("\rcr", "\\\rcr"),
        ("   ", r"\ \ \ "),
        ("café", "café"),
        ("", ""),
    ],
)
def test_values_are_escaped_as_java_does(value: str, rendered: str) -> None:
    assert rfc2253_name(((("commonName", value),),)) == f"CN={rendered}"


def test_email_address_is_an_oid_with_the_hex_of_its_ia5string() -> None:
    subject = ((("emailAddress", "duke@sun.com"),), (("commonName", "Duke"),))
    # IA5String tag 0x16, length 12, then the ASCII bytes: what Java prints for EMAILADDRESS.
    assert rfc2253_name(subject) == "CN=Duke,1.2.840.113549.1.9.1=#160c64756b654073756e2e636f6d"


def test_printable_string_attributes_use_tag_0x13() -> None:
    assert rfc2253_name(((("serialNumber", "1234"),),)) == "2.5.4.5=#130431323334"


def test_directory_string_attributes_are_rendered_as_utf8string() -> None:
    assert rfc2253_name(((("title", "Boss"),),)) == "2.5.4.12=#0c04426f7373"


def test_a_long_value_gets_a_long_form_der_length() -> None:
    value = "x" * 200
    assert rfc2253_name(((("title", value),),)) == "2.5.4.12=#0c81c8" + "78" * 200


def test_a_non_ascii_value_of_a_printable_attribute_falls_back_to_utf8string() -> None:
    assert rfc2253_name(((("serialNumber", "é"),),)) == "2.5.4.5=#0c02c3a9"


def test_attributes_outside_the_table_are_resolved_through_openssl_or_taken_as_dotted_oids() -> None:
    assert rfc2253_name(((("postalAddress", "x"),),)) == "2.5.4.16=#0c0178"
    assert rfc2253_name(((("1.2.3.4", "x"),),)) == "1.2.3.4=#0c0178"


def test_an_attribute_name_nobody_knows_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="notAnAttribute"):
        rfc2253_name(((("notAnAttribute", "x"),),))


# ---------------------------------------------------------------- rendering: real certificates


def _peer_subject(ca: TestCA, client_cert: Path, client_key: Path) -> tuple:
    """The client certificate's subject as the server's SSLObject.getpeercert() reports it after a
    real TLS handshake (in memory, no sockets)."""
    server_cert, server_key = ca.issue("server", common_name="localhost")
    server_context = ca.server_context(server_cert, server_key, client_ca=True)
    client_context = ca.client_context(client_cert, client_key)
    server_in, server_out, client_in, client_out = (ssl.MemoryBIO() for _ in range(4))
    server = server_context.wrap_bio(server_in, server_out, server_side=True)
    client = client_context.wrap_bio(client_in, client_out, server_hostname="localhost")
    done = {"server": False, "client": False}
    for _ in range(20):
        for name, side in (("client", client), ("server", server)):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        server_in.write(client_out.read())
        client_in.write(server_out.read())
        if all(done.values()):
            break
    assert all(done.values()), "the in-memory TLS handshake did not finish"
    peer = server.getpeercert()
    assert peer is not None
    return peer["subject"]


def _certificate_subject(path: Path) -> x509.Name:
    return x509.load_pem_x509_certificate(path.read_bytes()).subject


@pytest.mark.parametrize(
    "extra",
    [
        {"C": "US", "ST": "MD", "L": "Fulton", "O": "Acme, Inc.", "OU": "R+D"},
        {"DC": ["com", "example"], "OU": " lead", "O": "trail "},
        {"O": 'quote " and \\ backslash', "OU": "<angle>;semi"},
    ],
)
def test_a_real_client_certificate_renders_as_cryptography_renders_rfc4514(
    tmp_path: Path, extra: dict[str, str | list[str]]
) -> None:
    ca = TestCA(tmp_path)
    cert, key = ca.issue("client", common_name="alice", subject_extra=extra, client=True)
    subject = _peer_subject(ca, cert, key)
    # For CN/O/OU/C/L/ST/DC, and values without '=' or an inner '#', RFC 4514 and Java's RFC 2253 agree.
    assert rfc2253_name(subject) == _certificate_subject(cert).rfc4514_string()


def test_a_real_multi_valued_rdn_renders_in_certificate_order(tmp_path: Path) -> None:
    ca = TestCA(tmp_path)
    name = x509.Name(
        [
            x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Org")]),
            x509.RelativeDistinguishedName(
                [
                    x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "Eng"),
                    x509.NameAttribute(NameOID.COMMON_NAME, "alice"),
                ]
            ),
        ]
    )
    cert, key = ca.issue_subject("client", name, client=True)
    rendered = rfc2253_name(_peer_subject(ca, cert, key))
    # DER sorts a SET by the members' encodings: OU=Eng (30 0a ...) before CN=alice (30 0c ...).
    assert rendered == "OU=Eng+CN=alice,O=Org"
    assert rendered == _certificate_subject(cert).rfc4514_string()


def test_a_real_email_address_renders_as_the_der_in_the_certificate(tmp_path: Path) -> None:
    ca = TestCA(tmp_path)
    cert, key = ca.issue(
        "client", common_name="alice", subject_extra={"emailAddress": "alice@example.com"}, client=True
    )
    rendered = rfc2253_name(_peer_subject(ca, cert, key))
    keyword_part, email_part = rendered.split(",")
    assert keyword_part == "CN=alice"
    oid, _, hex_value = email_part.partition("=#")
    assert oid == "1.2.840.113549.1.9.1"
    der_name = _certificate_subject(cert).public_bytes()
    # The emailAddress OID's DER, then the value's DER exactly as the certificate holds it.
    email_oid_der = bytes.fromhex("06092a864886f70d010901")
    assert email_oid_der + bytes.fromhex(hex_value) in der_name


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


@given(
    st.lists(
        st.tuples(st.sampled_from(["commonName", "organizationName", "userId"]), st.text(max_size=20)),
        min_size=1,
        max_size=4,
    )
)
def test_the_default_rule_gives_back_exactly_the_rendered_name(attributes: list[tuple[str, str]]) -> None:
    subject = tuple((attribute,) for attribute in attributes)
    name = rfc2253_name(subject)
    assert PrincipalMappingRules.default.apply(name) == name
    assert _unescaped_count(name, ",") == len(attributes) - 1
    assert _unescaped_count(name, "+") == 0


def _unescaped_count(name: str, char: str) -> int:
    """How many times `char` occurs in `name` other than escaped by a backslash."""
    count, pos = 0, 0
    while pos < len(name):
        if name[pos] == "\\":
            pos += 2
            continue
        count += name[pos] == char
        pos += 1
    return count
