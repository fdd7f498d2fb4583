"""The validated `client:` section: how the proxy's own Kafka client identifies and authenticates itself.

The proxy's own client (proxy/kafka_client/) carries discovery, the quota store and the usage stream. It
reaches the brokers like client connections do (`upstream.bootstrap`, `tls.upstream`) but authenticates
as itself, with the credentials here. The password is a `Secret`: its repr and str never show it, so it
cannot reach a log line or an exception message by accident.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field

DEFAULT_CLIENT_ID = "sluice"
DEFAULT_REQUEST_TIMEOUT_S = 30.0
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class Secret:
    """A string that does not print itself. `reveal()` is the one way to read it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash(Secret)


@dataclass(frozen=True, slots=True)
class ClientSasl:
    """`client.sasl.*`: the mechanism and the proxy's own user name and password."""

    mechanism: str  # one of SASL_MECHANISMS
    username: str
    password: Secret = field(repr=False)


@dataclass(frozen=True, slots=True)
class ClientSettings:
    client_id: str = DEFAULT_CLIENT_ID
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    sasl: ClientSasl | None = None  # None: the proxy's own connections do not authenticate
