"""`--command-config FILE`: how a command-line tool reaches a cluster, from Kafka client properties.

The file is a Java properties file as kafka-configs.sh's `--command-config` takes (`key=value` lines, `#`
comments), read for the keys a Python client can honour. Both spellings an operator may already have work:
Java's (`sasl.jaas.config`, `ssl.truststore.location` with `ssl.truststore.type=PEM`) and librdkafka's
(`sasl.username`, `sasl.password`, `ssl.ca.location`):

* `security.protocol`: PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL;
* `sasl.mechanism`: PLAIN (default), SCRAM-SHA-256 or SCRAM-SHA-512, with `sasl.username` and
  `sasl.password`, or `sasl.jaas.config` holding `username="..." password="..."`;
* `ssl.ca.location` (or `ssl.truststore.location` of type PEM): the CA certificates, PEM; default: the
  system's; `ssl.endpoint.identification.algorithm`: `https` (default) checks the broker's host name,
  empty or `none` does not;
* `client.id` and `request.timeout.ms`.

Any other key is refused, naming it (a key silently ignored would be a TLS or SASL setting not applied).
A JKS trust store cannot be read without Java: the error says to give the CA as a PEM file. The password
becomes a `Secret` at once, so it never reaches a message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sluice.config.client_settings import SASL_MECHANISMS, ClientSasl, Secret
from sluice.config.errors import ConfigError
from sluice.config.identity_settings import UpstreamTls

from ..listeners.tls import UpstreamTlsTarget, upstream_context

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_CLIENT_ID = "sluice-quotas"
DEFAULT_REQUEST_TIMEOUT_S = 30.0
_KNOWN = frozenset(
    {
        "security.protocol",
        "sasl.mechanism",
        "sasl.username",
        "sasl.password",
        "sasl.jaas.config",
        "ssl.ca.location",
        "ssl.truststore.location",
        "ssl.truststore.type",
        "ssl.endpoint.identification.algorithm",
        "client.id",
        "request.timeout.ms",
    }
)
# Java's rule: the key ends at the first `=`, `:` or blank; the value is the rest of the line.
_PROPERTY = re.compile(r"([^=:\s]+)\s*[=:]?\s*(.*)")
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class ConnectSettings:
    """What a tool's Kafka client needs: TLS (None: plaintext), SASL (None: none), its id and timeout."""

    tls: UpstreamTlsTarget | None = None
    sasl: ClientSasl | None = None
    client_id: str = DEFAULT_CLIENT_ID
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S


def read_properties(path: Path) -> dict[str, str]:
    """A Java properties file's `key=value` (or `key: value`) lines; blanks and `#`/`!` comments skipped."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError("--command-config", str(path), f"a readable file ({exc.strerror})") from None
    properties: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and line[0] not in "#!":
            found = _PROPERTY.match(line)
            assert found is not None  # the pattern matches any line
            key, value = found.groups()
            properties[key] = value.strip()
    return properties


def connect_settings(properties: dict[str, str]) -> ConnectSettings:
    """The settings the properties give; ConfigError naming the key for anything wrong or unsupported."""
    for key in properties:
        if key not in _KNOWN:
            # Not its value: an unknown key may hold a password (ssl.keystore.password).
            raise ConfigError(key, "[hidden]", f"one of the keys read here: {', '.join(sorted(_KNOWN))}")
    protocol = properties.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise ConfigError("security.protocol", protocol, f"one of {', '.join(PROTOCOLS)}")
    tls = _tls(properties) if protocol in ("SSL", "SASL_SSL") else None
    sasl = _sasl(properties) if protocol.startswith("SASL_") else None
    timeout_ms = properties.get("request.timeout.ms", str(int(DEFAULT_REQUEST_TIMEOUT_S * 1000)))
    if not timeout_ms.isdigit() or int(timeout_ms) == 0:
        raise ConfigError("request.timeout.ms", timeout_ms, "a whole number of milliseconds above 0")
    return ConnectSettings(
        tls, sasl, properties.get("client.id") or DEFAULT_CLIENT_ID, int(timeout_ms) / 1000
    )


def _tls(properties: dict[str, str]) -> UpstreamTlsTarget:
    ca = properties.get("ssl.ca.location")
    store = properties.get("ssl.truststore.location")
    if store is not None and ca is None:
        kind = properties.get("ssl.truststore.type", "JKS").upper()
        if kind != "PEM":
            raise ConfigError(
                "ssl.truststore.type",
                kind,
                "PEM (a JKS trust store needs Java: give the CA certificates in a PEM file, ssl.ca.location)",
            )
        ca = store
    check = properties.get("ssl.endpoint.identification.algorithm", "https").lower()
    if check not in ("https", "", "none"):
        raise ConfigError("ssl.endpoint.identification.algorithm", check, "https, none or empty")
    try:
        context = upstream_context(UpstreamTls(ca=ca, verify=check == "https"))
    except ConfigError as exc:  # named after the proxy's own key (tls.upstream.ca): name ours
        key = "ssl.ca.location" if "ssl.ca.location" in properties else "ssl.truststore.location"
        raise ConfigError(key, exc.value, exc.expected) from None
    return UpstreamTlsTarget(context, None)


def _sasl(properties: dict[str, str]) -> ClientSasl:
    mechanism = properties.get("sasl.mechanism", "PLAIN").upper()
    if mechanism not in SASL_MECHANISMS:
        raise ConfigError("sasl.mechanism", mechanism, f"one of {', '.join(SASL_MECHANISMS)}")
    username = properties.get("sasl.username")
    password = properties.get("sasl.password")
    jaas = properties.get("sasl.jaas.config")
    if jaas is not None and (username is None or password is None):
        options = {name: value.replace('\\"', '"') for name, value in _JAAS_OPTION.findall(jaas)}
        username = username if username is not None else options.get("username")
        password = password if password is not None else options.get("password")
    if not username or password is None:
        # Never the value: sasl.jaas.config holds the password.
        raise ConfigError(
            "sasl.username",
            "[hidden]",
            'a user and password: sasl.username and sasl.password, or sasl.jaas.config with username="..." '
            'password="..."',
        )
    return ClientSasl(mechanism, username, Secret(password))
