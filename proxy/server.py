"""The proxy process: listeners, background services, and a clean shutdown.

One bootstrap listener forwards to any upstream bootstrap server; one listener per broker node id
forwards to that node. Broker listeners are opened for every node the proxy learns of, whether from its own
start-up Metadata request (the discovery service) or from an answer it rewrites for a client.

Background work runs as services (`proxy/services.py`), started in `_services()` order after the bootstrap
listener opens and stopped in reverse after the client connections have drained: the metrics endpoint,
the proxy's own Kafka client, broker discovery (which uses the client) and the idle-sensor sweep.
"""

from __future__ import annotations

import asyncio
import random
import signal
import socket

from sluice.config.errors import ConfigError
from sluice.config.model import ProxyConfig

from .brokers import Address, BrokerDirectory
from .connection import ClientSide, ConnectionRegistry, SessionSettings
from .discovery import BrokerDiscovery
from .filters import ApiVersionsClampFactory, BrokerAddressRewriteFactory, FilterChain, FilterFactory
from .filters.client_quotas import ClientQuotasFactory
from .filters.mutation_quotas import MutationQuotasFactory
from .filters.quota_metrics import MutationRates, QuotaCollector, ThrottleStats
from .filters.sasl_inspector import SaslInspectorFactory
from .filters.topic_cache import TopicCache
from .kafka_client import KafkaClient
from .log import get_logger
from .metrics import ProxyMetrics, metrics_registry
from .metrics_http import MetricsEndpoint
from .sensor_sweep import SensorSweep
from .services import Service, Services
from .tls import UpstreamTlsTarget, certificate_principal, listener_context, upstream_context

_log = get_logger("sluice.server")

BOOTSTRAP = "bootstrap"


def _bind_listening_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class SluiceServer:
    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        self.metrics = ProxyMetrics()
        self.registry = ConnectionRegistry(self.metrics)
        self.directory = BrokerDirectory(
            config.advertised_host, config.broker_port, self._open_broker_listener
        )
        self.quota_managers = config.quota.new_managers()
        self.throttle_stats = ThrottleStats()
        self.mutation_rates = MutationRates(config.quota.engine.controller_window)
        tls = config.tls
        # Built now, so an unreadable or mismatched file stops start-up naming it (a ConfigError).
        self._listener_ssl = listener_context(tls.listener) if tls.listener is not None else None
        self.upstream_tls = (
            UpstreamTlsTarget(upstream_context(tls.upstream), tls.upstream.server_hostname)
            if tls.upstream is not None
            else None
        )
        mtls = tls.listener is not None and tls.listener.client_ca is not None
        self.settings = SessionSettings(
            FilterChain(self._filters()),
            self.metrics,
            self.registry,
            config.max_frame_bytes,
            config.idle_timeout_s,
            upstream_tls=self.upstream_tls,
            client_principal=certificate_principal(tls.principal_mapping_rules) if mtls else None,
        )
        self._servers: dict[str, asyncio.AbstractServer] = {}
        self._pending_listeners: set[asyncio.Task[None]] = set()
        self._stop = asyncio.Event()
        self.kafka_client = KafkaClient(
            [(hp.host, hp.port) for hp in config.upstream_bootstrap],
            client_id=config.client.client_id,
            tls=self.upstream_tls,
            sasl=config.client.sasl,
            request_timeout_s=config.client.request_timeout_s,
        )
        self.services = Services(self._services())

    def _services(self) -> list[Service]:
        """The background services, in start order (each may use those before it); stopped in reverse."""
        services: list[Service] = []
        metrics_listen = self.config.metrics_listen
        if metrics_listen is not None:
            registry = metrics_registry(self.metrics)
            registry.register(
                QuotaCollector(self.quota_managers, self.throttle_stats, _loop_ms, self.mutation_rates)
            )
            services.append(MetricsEndpoint(registry, metrics_listen.host, metrics_listen.port))
        services += [
            self.kafka_client,
            BrokerDiscovery(self.kafka_client, self.directory),
            SensorSweep(self.quota_managers),
        ]
        return services

    def _filters(self) -> list[FilterFactory]:
        """The filter chain, in order. Each filter declares the API versions it can handle, and the
        ApiVersions clamp is computed from them. The quota filters are always in it: they ask the quota
        managers per request whether a quota applies, so quotas can come and go at run time."""
        quota = self.config.quota
        return [
            SaslInspectorFactory(self.config.sasl.oauthbearer_principal_claim),
            BrokerAddressRewriteFactory(self.directory),
            ApiVersionsClampFactory(),
            MutationQuotasFactory(
                self.quota_managers,
                quota.mutations,
                TopicCache(quota.mutations.num_partitions),
                self.throttle_stats,
                self.mutation_rates,
            ),
            # Last, so it patches throttle_time_ms into answers the other filters have already rewritten.
            ClientQuotasFactory(
                self.quota_managers, quota.throttle_mode, quota.fetch_throttle, self.throttle_stats
            ),
        ]

    # ---- listeners ------------------------------------------------------------------------------

    @property
    def listen_ports(self) -> dict[str, int]:
        ports: dict[str, int] = {}
        for name, server in self._servers.items():
            sockets = server.sockets
            if sockets:
                ports[name] = sockets[0].getsockname()[1]
        return ports

    def _bootstrap_candidates(self) -> list[Address]:
        bootstrap = [(hp.host, hp.port) for hp in self.config.upstream_bootstrap]
        # Spread new connections over the bootstrap servers; fall back to the others in order.
        start = random.randrange(len(bootstrap))
        return bootstrap[start:] + bootstrap[:start]

    def _node_candidates(self, node_id: int) -> list[Address]:
        address = self.directory.upstream_address(node_id)
        return [address] if address is not None else []

    async def _serve(self, name: str, sock: socket.socket, candidates) -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: ClientSide(self.settings, name, candidates), sock=sock, ssl=self._listener_ssl
        )
        self._servers[name] = server

    def _open_broker_listener(self, node_id: int) -> None:
        name = f"broker-{node_id}"
        if name in self._servers or self._stop.is_set():
            return
        try:
            port = self.config.broker_port(node_id)
        except ConfigError as exc:
            _log.error("listener_failed", node_id=node_id, error=str(exc))
            return
        try:
            sock = _bind_listening_socket(self.config.listen.host, port)
        except OSError as exc:
            _log.error("listener_failed", node_id=node_id, port=port, error=str(exc))
            return
        # The socket already listens, so clients told about it can connect while asyncio catches up.
        self._servers[name] = _PendingServer(sock)
        task = asyncio.get_running_loop().create_task(
            self._serve(name, sock, lambda: self._node_candidates(node_id))
        )
        self._pending_listeners.add(task)
        task.add_done_callback(self._pending_listeners.discard)
        self.metrics.broker_listeners += 1
        _log.info("listener_opened", node_id=node_id, host=self.config.listen.host, port=port)

    # ---- life cycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the bootstrap listener, then start the services; a service that fails to start closes the
        listener again and raises ServiceStartError."""
        cfg = self.config
        sock = _bind_listening_socket(cfg.listen.host, cfg.listen.port)
        await self._serve(BOOTSTRAP, sock, self._bootstrap_candidates)
        _log.info("listener_opened", node_id=None, host=cfg.listen.host, port=self.listen_ports[BOOTSTRAP])
        try:
            await self.services.start()
        except BaseException:
            self._stop.set()
            self._close_listeners()
            for conn in self.registry:  # clients accepted while the services started
                conn.close("start_failed")
            raise
        if cfg.metrics_listen is not None:
            _log.info("metrics_listening", host=cfg.metrics_listen.host, port=cfg.metrics_listen.port)

    def request_stop(self) -> None:
        self._stop.set()

    async def run_until_stopped(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        try:
            await self._stop.wait()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
        await self.shutdown()

    async def shutdown(self) -> None:
        """Stop accepting, let forwarded requests get their answers (bounded), then close everything."""
        self._stop.set()
        _log.info("shutdown_started", connections=len(self.registry))
        self._close_listeners()
        for conn in self.registry:
            conn.drain()
        try:
            await asyncio.wait_for(self.registry.wait_empty(), self.config.shutdown_timeout_s)
        except TimeoutError:
            for conn in self.registry:
                conn.close("shutdown_timeout", in_flight=conn.in_flight)
        # After the drain: a service (the usage publisher) may still record what the last requests did.
        await self.services.stop()
        _log.info("shutdown_complete")

    def _close_listeners(self) -> None:
        for task in list(self._pending_listeners):
            task.cancel()
        for server in self._servers.values():
            server.close()


def _loop_ms() -> int:
    return int(asyncio.get_running_loop().time() * 1000)


class _PendingServer:
    """Stands in for a broker listener between binding its socket and asyncio serving it."""

    def __init__(self, sock: socket.socket) -> None:
        self.sockets = (sock,)

    def close(self) -> None:
        self.sockets[0].close()
