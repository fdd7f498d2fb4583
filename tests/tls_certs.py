"""A throw-away certificate authority for TLS tests, made in the test with `cryptography`.

    ca = TestCA(tmp_path)
    server_cert, server_key = ca.issue("proxy", common_name="localhost")
    alice_cert, alice_key = ca.issue("alice", common_name="alice", subject_extra={"O": "Sluice"}, client=True)
    context = ca.server_context(server_cert, server_key, client_ca=True)

Keys are EC P-256 (fast to make). Files are PEM: `<name>.pem` (certificate) and `<name>.key`
(unencrypted PKCS#8), so librdkafka (`ssl.ca.location`, `ssl.certificate.location`, `ssl.key.location`),
aiokafka and Python's ssl module all read them.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Keywords accepted in `subject_extra`, as in RFC 4514 strings.
SUBJECT_KEYWORDS: dict[str, x509.ObjectIdentifier] = {
    "C": NameOID.COUNTRY_NAME,
    "ST": NameOID.STATE_OR_PROVINCE_NAME,
    "L": NameOID.LOCALITY_NAME,
    "STREET": NameOID.STREET_ADDRESS,
    "O": NameOID.ORGANIZATION_NAME,
    "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
    "DC": NameOID.DOMAIN_COMPONENT,
    "UID": NameOID.USER_ID,
    "emailAddress": NameOID.EMAIL_ADDRESS,
    "serialNumber": NameOID.SERIAL_NUMBER,
    "title": NameOID.TITLE,
}
_VALIDITY = datetime.timedelta(days=2)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )


class TestCA:
    """A CA whose certificate and issued certificates live in `directory`."""

    __test__ = False  # not a pytest test class

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._key = _new_key()
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Sluice Test CA")])
        now = datetime.datetime.now(datetime.UTC)
        self._certificate = (
            x509.CertificateBuilder()
            .subject_name(self._name)
            .issuer_name(self._name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=False,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.ca_path = self.directory / "ca.pem"
        self.ca_path.write_bytes(self._certificate.public_bytes(serialization.Encoding.PEM))

    def issue(
        self,
        name: str,
        *,
        common_name: str,
        subject_extra: dict[str, str | list[str]] | None = None,
        dns: list[str] | None = None,
        ips: list[str] | None = None,
        client: bool = False,
    ) -> tuple[Path, Path]:
        """Issue a certificate; returns (PEM certificate path, PEM key path).

        The subject is `subject_extra` (keywords of SUBJECT_KEYWORDS, in dict order; a list value
        repeats the attribute) followed by CN, so in RFC 2253 order CN comes first. A server certificate
        (the default) has SANs `dns` (default ["localhost"]) and `ips` (default ["127.0.0.1"]) and
        serverAuth; a client certificate (`client=True`) has clientAuth and no SANs.
        """
        attributes: list[x509.NameAttribute] = []
        for keyword, value in (subject_extra or {}).items():
            oid = SUBJECT_KEYWORDS.get(keyword)
            if oid is None:
                raise ValueError(
                    f"subject_extra: unknown keyword {keyword!r}, expected one of {list(SUBJECT_KEYWORDS)}"
                )
            for item in [value] if isinstance(value, str) else value:
                attributes.append(x509.NameAttribute(oid, item))
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        return self.issue_subject(name, x509.Name(attributes), dns=dns, ips=ips, client=client)

    def issue_subject(
        self,
        name: str,
        subject: x509.Name,
        *,
        dns: list[str] | None = None,
        ips: list[str] | None = None,
        client: bool = False,
    ) -> tuple[Path, Path]:
        """`issue` with a subject built by the caller (multi-valued RDNs, any attribute order)."""
        key = _new_key()
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False
            )
        )
        if client:
            builder = builder.add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
            )
        else:
            names: list[x509.GeneralName] = [
                x509.DNSName(host) for host in (["localhost"] if dns is None else dns)
            ]
            names += [
                x509.IPAddress(ipaddress.ip_address(ip)) for ip in (["127.0.0.1"] if ips is None else ips)
            ]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
            builder = builder.add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
        certificate = builder.sign(self._key, hashes.SHA256())
        cert_path = self.directory / f"{name}.pem"
        key_path = self.directory / f"{name}.key"
        cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        _write_key(key_path, key)
        return cert_path, key_path

    def server_context(self, cert: Path, key: Path, *, client_ca: bool = False) -> ssl.SSLContext:
        """A TLS 1.2+ server context; with `client_ca` it requires a client certificate from this CA."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(cert, key)
        if client_ca:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(cafile=self.ca_path)
        return context

    def client_context(self, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
        """A TLS 1.2+ client context trusting this CA (hostname checked), optionally with a client cert."""
        context = ssl.create_default_context(cafile=self.ca_path)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if cert is not None:
            context.load_cert_chain(cert, key)
        return context
