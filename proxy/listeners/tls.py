"""TLS contexts for the client listeners and the broker connections, and the user a client certificate
proves. Building a context reads the PEM files; a file that cannot be read, or a key that does not match
its certificate, stops start-up with a ConfigError naming the key and the file."""

from __future__ import annotations

import ssl
from collections.abc import Callable

from sluice.config.errors import ConfigError
from sluice.config.identity_settings import ListenerTls, UpstreamTls
from sluice.config.principal_mapping import PrincipalMappingRules

# Kafka's ssl.enabled.protocols default is TLSv1.2,TLSv1.3; older versions are refused.
_MINIMUM_VERSION = ssl.TLSVersion.TLSv1_2


def _problem(exc: BaseException) -> str:
    # OSError's str() carries the path too; strerror/reason alone keeps the message short and exact.
    return getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc) or type(exc).__name__


def _load_ca(context: ssl.SSLContext, path: str, key: str) -> None:
    try:
        context.load_verify_locations(cafile=path)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(key, path, f"a readable PEM file of CA certificates ({_problem(exc)})") from None


def listener_context(settings: ListenerTls, key: str = "tls.listener") -> ssl.SSLContext:
    """The server context clients connect with; with `client_ca` a client certificate is required (mTLS)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = _MINIMUM_VERSION
    for path, name in ((settings.cert, "cert"), (settings.key, "key")):
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            raise ConfigError(f"{key}.{name}", path, f"a readable PEM file ({_problem(exc)})") from None
    try:
        context.load_cert_chain(settings.cert, settings.key)
    except ssl.SSLError as exc:
        raise ConfigError(
            f"{key}.key",
            settings.key,
            f"the private key of the certificate in {settings.cert}, both PEM ({_problem(exc)})",
        ) from None
    if settings.client_ca is not None:
        _load_ca(context, settings.client_ca, f"{key}.client_ca")
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def upstream_context(settings: UpstreamTls, key: str = "tls.upstream") -> ssl.SSLContext:
    """The client context for broker connections: the CA (or the system's), hostname check per `verify`."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = _MINIMUM_VERSION
    if settings.ca is not None:
        _load_ca(context, settings.ca, f"{key}.ca")
    else:
        context.load_default_certs()
    # Like Kafka's ssl.endpoint.identification.algorithm="": the chain is still verified, the name is not.
    context.check_hostname = settings.verify
    return context


class UpstreamTlsTarget:
    """How one broker connection is wrapped: the context and the name sent as SNI and verified."""

    __slots__ = ("context", "server_hostname")

    def __init__(self, context: ssl.SSLContext, server_hostname: str | None) -> None:
        self.context = context
        self.server_hostname = server_hostname

    def hostname_for(self, host: str) -> str:
        return self.server_hostname or host


def certificate_principal(rules: PrincipalMappingRules) -> Callable[[object], str | None]:
    """A function from a client's transport to the user its certificate proves (None: no certificate).

    Kafka's default principal builder: the subject as an RFC 2253 name, mapped by
    ssl.principal.mapping.rules. A certificate no rule maps raises NoMatchingRule, and the connection is
    refused, as Kafka fails the authentication.
    """
    # Imported only where a listener asks for client certificates: cryptography's x509 costs about 14 MB
    # of resident memory that a proxy without mTLS need not carry.
    from cryptography import x509

    from sluice.protocol.ssl_principal import rfc2253_name

    def principal(transport: object) -> str | None:
        get_extra_info = getattr(transport, "get_extra_info", None)
        ssl_object = get_extra_info("ssl_object") if get_extra_info is not None else None
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if not der:
            return None
        # The DER, not getpeercert()'s text: only the DER keeps each value's string type, which the
        # '#' hex of a non-keyword attribute shows. OpenSSL has verified it against the CA already.
        return rules.apply(rfc2253_name(x509.load_der_x509_certificate(der).subject))

    return principal
