"""The validated configuration. Build it with `config.load_config`, which checks every rule."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from sluice.config.client_settings import ClientSettings
from sluice.config.errors import MISSING, ConfigError
from sluice.config.identity_settings import SaslSettings, TlsSettings
from sluice.config.protocol_settings import ProtocolSettings
from sluice.config.quota_settings import QuotaSettings
from sluice.config.usage_settings import FleetSettings, UsageSettings

MAX_PORT = 65535
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024
DEFAULT_IDLE_TIMEOUT_S = 600.0
DEFAULT_SHUTDOWN_TIMEOUT_S = 30.0
# Linux's default net.core.somaxconn since 5.4, which caps it anyway; Kafka's socket.listen.backlog.size
# is 50, too few for a fleet of clients reconnecting at once through one proxy.
DEFAULT_LISTEN_BACKLOG = 4096
DEFAULT_MAX_BUFFERED_REQUEST_BYTES = 256 * 1024 * 1024
# Descriptors kept for the process's own work (its Kafka client, quota store, usage plane, metrics,
# listeners): client connections may not take them.
DEFAULT_RESERVED_OPEN_FILES = 128
MAX_RESERVED_OPEN_FILES = 1_000_000
MAX_LISTEN_BACKLOG = 65535


def _empty_mapping() -> Mapping[int, int]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class HostPort:
    host: str  # IPv6 addresses are kept without brackets
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class LogConfig:
    level: str = "info"  # debug | info | warning | error
    format: str = "json"  # json | console


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    listen: HostPort
    upstream_bootstrap: tuple[HostPort, ...]
    advertised_host: str
    broker_port_base: int  # node N gets its own listener on broker_port_base + N, unless ...
    broker_ports: Mapping[int, int] = field(default_factory=_empty_mapping, hash=False)  # ... listed here
    upstream_bind_address: str | None = None  # the local IP connections to the brokers come from
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    listen_backlog: int = DEFAULT_LISTEN_BACKLOG  # accept queue of every listener
    # Open files kept for the process's own work: the listeners pause rather than take them.
    reserved_open_files: int = DEFAULT_RESERVED_OPEN_FILES
    # upstream.max_in_flight_bytes_per_broker: bytes of requests in flight toward each broker, all
    # connections together (None: the brokers' queued.max.request.bytes, or 256 MiB).
    max_in_flight_bytes_per_broker: int | None = None
    # upstream.learn_limits: ask the brokers for socket.request.max.bytes and queued.max.request.bytes.
    learn_broker_limits: bool = True
    # All connections together may hold this many bytes of requests still arriving (Kafka's
    # queued.max.request.bytes): a connection whose next frame does not fit stops being read.
    max_buffered_request_bytes: int = DEFAULT_MAX_BUFFERED_REQUEST_BYTES
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
    shutdown_timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S  # how long SIGTERM waits for in-flight requests
    metrics_listen: HostPort | None = None
    log: LogConfig = LogConfig()
    quota: QuotaSettings = field(default_factory=QuotaSettings)
    tls: TlsSettings = field(default_factory=TlsSettings)
    sasl: SaslSettings = field(default_factory=SaslSettings)
    usage: UsageSettings = field(default_factory=UsageSettings)
    fleet: FleetSettings = field(default_factory=FleetSettings)
    client: ClientSettings = field(default_factory=ClientSettings)  # the proxy's own Kafka client
    protocol: ProtocolSettings = field(default_factory=ProtocolSettings)  # what clients may use of it

    def __post_init__(self) -> None:
        # Read-only copies, so a config shared between tasks cannot be changed behind their backs.
        object.__setattr__(self, "upstream_bootstrap", tuple(self.upstream_bootstrap))
        object.__setattr__(self, "broker_ports", MappingProxyType(dict(self.broker_ports)))

    def broker_port(self, node_id: int) -> int:
        """The port the proxy listens on for broker `node_id`: broker_ports first, else base + node_id.

        Node ids are only known once the cluster answers, so a derived port that is out of range or
        taken by another listener is reported here, as a ConfigError asking for a broker_ports entry.
        """
        explicit = self.broker_ports.get(node_id)
        if explicit is not None:
            return explicit
        key = f"broker_ports.{node_id}"
        if node_id < 0:
            raise ConfigError(key, node_id, "a non-negative broker node id")
        port = self.broker_port_base + node_id
        taken_by = None
        if port > MAX_PORT:
            taken_by = f"beyond {MAX_PORT}"
        elif port == self.listen.port:
            taken_by = "the listen port"
        elif self.metrics_listen is not None and port == self.metrics_listen.port:
            taken_by = "the metrics port"
        elif port in self.broker_ports.values():
            taken_by = "an explicit broker_ports entry"
        if taken_by is not None:
            raise ConfigError(
                key, MISSING, f"an explicit port: broker_port_base + {node_id} = {port} is {taken_by}"
            )
        return port
