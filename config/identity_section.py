"""Turn the raw `tls:` and `sasl:` mappings into TlsSettings and SaslSettings, or raise ConfigError naming the
key. Only paths and names are checked here; the files are read when the proxy builds its TLS contexts
(proxy/listeners/tls.py), which names the file that fails."""

from __future__ import annotations

from sluice.config.errors import MISSING, ConfigError
from sluice.config.identity_settings import (
    DEFAULT_PRINCIPAL_CLAIM,
    DEFAULT_UNAUTHENTICATED_FRAME_TIMEOUT_S,
    SASL_MAX_RECEIVE_BYTES,
    ListenerTls,
    SaslSettings,
    TlsSettings,
    UpstreamTls,
)
from sluice.config.principal_mapping import PrincipalMappingRules
from sluice.config.values import parse_bool, parse_int, parse_number, parse_section, value_at

TLS_KEYS = ("listener", "upstream", "principal_mapping_rules")
LISTENER_KEYS = ("cert", "key", "client_ca")
UPSTREAM_KEYS = ("enabled", "ca", "server_hostname", "verify")
SASL_KEYS = ("oauthbearer", "required", "max_receive_bytes", "unauthenticated_frame_timeout_s")
OAUTHBEARER_KEYS = ("principal_claim",)


def _path(raw: object, key: str) -> str:
    if isinstance(raw, str) and raw.strip():
        return raw.strip()
    raise ConfigError(key, raw, "a file path (PEM)")


def _name(raw: object, key: str, what: str) -> str:
    if isinstance(raw, str) and raw.strip():
        return raw.strip()
    raise ConfigError(key, raw, what)


def parse_tls_section(raw: object, key: str = "tls") -> TlsSettings:
    section = parse_section(raw, key, TLS_KEYS)
    return TlsSettings(
        listener=_listener(value_at(section, "listener"), f"{key}.listener"),
        upstream=_upstream(value_at(section, "upstream"), f"{key}.upstream"),
        principal_mapping_rules=_mapping_rules(
            value_at(section, "principal_mapping_rules"), f"{key}.principal_mapping_rules"
        ),
    )


def _listener(raw: object, key: str) -> ListenerTls | None:
    section = parse_section(raw, key, LISTENER_KEYS)
    if not section:
        return None
    cert, private_key = value_at(section, "cert"), value_at(section, "key")
    if cert is MISSING or private_key is MISSING:
        missing = "cert" if cert is MISSING else "key"
        raise ConfigError(f"{key}.{missing}", MISSING, "a file path (PEM): TLS needs both cert and key")
    client_ca = value_at(section, "client_ca")
    return ListenerTls(
        cert=_path(cert, f"{key}.cert"),
        key=_path(private_key, f"{key}.key"),
        client_ca=None if client_ca is MISSING else _path(client_ca, f"{key}.client_ca"),
    )


def _upstream(raw: object, key: str) -> UpstreamTls | None:
    section = parse_section(raw, key, UPSTREAM_KEYS)
    enabled = value_at(section, "enabled")
    others = [name for name in UPSTREAM_KEYS[1:] if value_at(section, name) is not MISSING]
    if enabled is MISSING and others:
        # A CA without `enabled` would silently mean plaintext, SASL passwords in clear included.
        raise ConfigError(
            f"{key}.enabled", MISSING, f"true or false: {key}.{others[0]} is set, so say whether TLS is on"
        )
    if enabled is MISSING or not parse_bool(enabled, f"{key}.enabled"):
        return None
    ca, hostname, verify = (
        value_at(section, "ca"),
        value_at(section, "server_hostname"),
        value_at(section, "verify"),
    )
    return UpstreamTls(
        ca=None if ca is MISSING else _path(ca, f"{key}.ca"),
        server_hostname=None
        if hostname is MISSING
        else _name(hostname, f"{key}.server_hostname", "a host name to send as SNI and verify"),
        verify=True if verify is MISSING else parse_bool(verify, f"{key}.verify"),
    )


def _mapping_rules(raw: object, key: str) -> PrincipalMappingRules:
    if raw is MISSING:
        return PrincipalMappingRules.default
    if not isinstance(raw, str | list) or (
        isinstance(raw, list) and not all(isinstance(r, str) for r in raw)
    ):
        raise ConfigError(key, raw, "Kafka's ssl.principal.mapping.rules: a string or a list of rules")
    try:
        rules = PrincipalMappingRules.parse(raw)
    except ValueError as exc:
        raise ConfigError(key, raw, f"Kafka's ssl.principal.mapping.rules syntax: {exc}") from None
    if not rules.rules:
        # Kafka would refuse every certificate; leave the key out for the default (the whole name).
        raise ConfigError(key, raw, "at least one rule, such as DEFAULT")
    return rules


def parse_sasl_section(raw: object, key: str = "sasl") -> SaslSettings:
    section = parse_section(raw, key, SASL_KEYS)
    oauthbearer = parse_section(value_at(section, "oauthbearer"), f"{key}.oauthbearer", OAUTHBEARER_KEYS)
    claim = value_at(oauthbearer, "principal_claim")
    required = value_at(section, "required")
    receive = value_at(section, "max_receive_bytes")
    timeout = value_at(section, "unauthenticated_frame_timeout_s")
    return SaslSettings(
        oauthbearer_principal_claim=DEFAULT_PRINCIPAL_CLAIM
        if claim is MISSING
        else _name(claim, f"{key}.oauthbearer.principal_claim", "the name of a JWT claim, such as sub"),
        required=False if required is MISSING else parse_bool(required, f"{key}.required"),
        max_receive_bytes=SASL_MAX_RECEIVE_BYTES
        if receive is MISSING
        else parse_int(receive, f"{key}.max_receive_bytes", 1024, 2**31 - 1),
        unauthenticated_frame_timeout_s=DEFAULT_UNAUTHENTICATED_FRAME_TIMEOUT_S
        if timeout is MISSING
        else parse_number(timeout, f"{key}.unauthenticated_frame_timeout_s", at_least=0.1, at_most=3600),
    )
