"""Certificate subjects rendered as Java's X500Principal.getName(), as Kafka's mapping rules see them.

The rendering is checked against real certificates (made with `cryptography`, read back through a real TLS
handshake) and against Java's escaping. The rules themselves: tests/config/test_principal_mapping.py.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.name import _ASN1Type
from cryptography.x509.oid import NameOID
from hypothesis import given
from hypothesis import strategies as st
from tls_certs import TestCA

from sluice.config.principal_mapping import PrincipalMappingRules
from sluice.protocol.ssl_principal import rfc2253_name

# ---------------------------------------------------------------- rendering: synthetic subjects

Attribute = tuple[x509.ObjectIdentifier, str] | tuple[x509.ObjectIdentifier, str, _ASN1Type]


def subject(*rdns: Attribute | list[Attribute]) -> x509.Name:
    """A Name from RDNs in certificate order, each one attribute or a list (a multi-valued RDN); an
    attribute may name its string type, else cryptography's default for the OID is used."""
    return x509.Name(
        [
            x509.RelativeDistinguishedName(
                [x509.NameAttribute(*attribute) for attribute in (rdn if isinstance(rdn, list) else [rdn])]
            )
            for rdn in rdns
        ]
    )


def test_rdns_come_out_last_first_with_rfc2253_keywords() -> None:
    name = subject(
        (NameOID.COUNTRY_NAME, "US"),
        (NameOID.STATE_OR_PROVINCE_NAME, "MD"),
        (NameOID.LOCALITY_NAME, "Fulton"),
        (NameOID.ORGANIZATION_NAME, "mycp"),
        (NameOID.ORGANIZATIONAL_UNIT_NAME, "SME"),
        (NameOID.COMMON_NAME, "Duke"),
    )
    assert rfc2253_name(name) == "CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US"


def test_street_dc_and_uid_have_keywords_too() -> None:
    name = subject(
        (NameOID.DOMAIN_COMPONENT, "com"),
        (NameOID.DOMAIN_COMPONENT, "example"),
        (NameOID.STREET_ADDRESS, "1 Main St"),
        (NameOID.USER_ID, "u42"),
    )
    assert rfc2253_name(name) == "UID=u42,STREET=1 Main St,DC=example,DC=com"


def test_a_multi_valued_rdn_keeps_its_order_joined_by_plus() -> None:
    name = subject(
        (NameOID.ORGANIZATION_NAME, "Org"), [(NameOID.COMMON_NAME, "duke"), (NameOID.USER_ID, "42")]
    )
    assert rfc2253_name(name) == "CN=duke+UID=42,O=Org"


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
    assert rfc2253_name(subject((NameOID.ORGANIZATION_NAME, value))) == f"O={rendered}"


def test_email_address_is_an_oid_with_the_hex_of_its_ia5string() -> None:
    name = subject((NameOID.EMAIL_ADDRESS, "duke@sun.com"), (NameOID.COMMON_NAME, "Duke"))
    # IA5String tag 0x16, length 12, then the ASCII bytes: what Java prints for EMAILADDRESS.
    assert rfc2253_name(name) == "CN=Duke,1.2.840.113549.1.9.1=#160c64756b654073756e2e636f6d"


def test_printable_string_attributes_use_tag_0x13() -> None:
    assert rfc2253_name(subject((NameOID.SERIAL_NUMBER, "1234"))) == "2.5.4.5=#130431323334"


def test_directory_string_attributes_in_utf8string_use_tag_0x0c() -> None:
    assert rfc2253_name(subject((NameOID.TITLE, "Boss"))) == "2.5.4.12=#0c04426f7373"


@pytest.mark.parametrize(
    ("string_type", "der_hex"),
    [
        # The string type the certificate chose, not the one the attribute's standard suggests.
        (_ASN1Type.PrintableString, "1304426f7373"),
        (_ASN1Type.BMPString, "1e080042006f00730073"),
        (_ASN1Type.UniversalString, "1c10000000420000006f0000007300000073"),
        (_ASN1Type.T61String, "1404426f7373"),
    ],
)
def test_a_directory_string_in_another_string_type_renders_as_the_certificate_encoded_it(
    string_type: _ASN1Type, der_hex: str
) -> None:
    assert rfc2253_name(subject((NameOID.TITLE, "Boss", string_type))) == f"2.5.4.12=#{der_hex}"


def test_a_long_value_gets_a_long_form_der_length() -> None:
    value = "x" * 200
    assert rfc2253_name(subject((NameOID.TITLE, value))) == "2.5.4.12=#0c81c8" + "78" * 200


def test_attributes_without_a_keyword_are_dotted_oids() -> None:
    assert rfc2253_name(subject((NameOID.POSTAL_ADDRESS, "x"))) == "2.5.4.16=#0c0178"
    assert rfc2253_name(subject((x509.ObjectIdentifier("1.2.3.4"), "x"))) == "1.2.3.4=#0c0178"


# ---------------------------------------------------------------- rendering: real certificates


def _peer_subject(ca: TestCA, client_cert: Path, client_key: Path) -> x509.Name:
    """The client certificate's subject read from the DER the server's SSLObject.getpeercert() hands over
    after a real TLS handshake (in memory, no sockets), as proxy/listeners/tls.py reads it."""
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
    der = server.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).subject


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


def test_a_real_bmpstring_title_renders_in_its_own_string_type(tmp_path: Path) -> None:
    # OpenSSL's getpeercert() text loses the string type; a rendering from it would print UTF8String
    # (#0c04426f7373), which a mapping rule written against Kafka's principal would not match.
    ca = TestCA(tmp_path)
    name = subject((NameOID.COMMON_NAME, "alice"), (NameOID.TITLE, "Boss", _ASN1Type.BMPString))
    cert, key = ca.issue_subject("client", name, client=True)
    assert rfc2253_name(_peer_subject(ca, cert, key)) == "2.5.4.12=#1e080042006f00730073,CN=alice"


@given(
    st.lists(
        st.tuples(
            st.sampled_from([NameOID.ORGANIZATIONAL_UNIT_NAME, NameOID.ORGANIZATION_NAME, NameOID.USER_ID]),
            st.text(max_size=20),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_the_default_rule_gives_back_exactly_the_rendered_name(
    attributes: list[tuple[x509.ObjectIdentifier, str]],
) -> None:
    name = rfc2253_name(subject(*attributes))
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
