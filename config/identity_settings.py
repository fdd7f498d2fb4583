"""The validated `tls:` and `sasl:` sections: how clients reach the proxy, how the proxy reaches the brokers,
and how a client's identity is read (spec §2.4, §8.7). Build them with `config.load_config`."""

from __future__ import annotations

from dataclasses import dataclass, field

from sluice.config.principal_mapping import PrincipalMappingRules

DEFAULT_PRINCIPAL_CLAIM = "sub"  # Kafka's sasl.oauthbearer.sub.claim.name default


@dataclass(frozen=True, slots=True)
class ListenerTls:
    """TLS termination for clients: `tls.listener.*`. With `client_ca`, clients must present a certificate."""

    cert: str
    key: str
    client_ca: str | None = None


@dataclass(frozen=True, slots=True)
class UpstreamTls:
    """TLS to the brokers: `tls.upstream.*`. `ca` None trusts the system's CAs; `server_hostname` None
    sends (and verifies) each broker's own host name."""

    ca: str | None = None
    server_hostname: str | None = None
    verify: bool = True  # hostname verification, Kafka's ssl.endpoint.identification.algorithm=https


@dataclass(frozen=True, slots=True)
class TlsSettings:
    listener: ListenerTls | None = None
    upstream: UpstreamTls | None = None  # None: plaintext to the brokers
    principal_mapping_rules: PrincipalMappingRules = field(
        default_factory=lambda: PrincipalMappingRules.default
    )


# Kafka's sasl.server.max.receive.size default: the largest frame a broker reads before authentication.
SASL_MAX_RECEIVE_BYTES = 512 * 1024
DEFAULT_UNAUTHENTICATED_FRAME_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class SaslSettings:
    oauthbearer_principal_claim: str = DEFAULT_PRINCIPAL_CLAIM
    # The brokers' listener requires SASL: before a connection authenticates, frames over
    # `max_receive_bytes` are refused (Kafka's sasl.server.max.receive.size), as is a frame that takes
    # longer than `unauthenticated_frame_timeout_s` to arrive.
    required: bool = False
    max_receive_bytes: int = SASL_MAX_RECEIVE_BYTES
    unauthenticated_frame_timeout_s: float = DEFAULT_UNAUTHENTICATED_FRAME_TIMEOUT_S
