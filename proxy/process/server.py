"""The proxy process: listeners, background services, and a clean shutdown.

One bootstrap listener forwards to any upstream bootstrap server; one listener per broker node id
forwards to that node. Broker listeners are opened for every node the proxy learns of, whether from its own
start-up Metadata request (the discovery service) or from an answer it rewrites for a client.

Background work runs as services (`proxy/services.py`), started in `_services()` order after the bootstrap
listener opens and stopped in reverse after the client connections have drained: the metrics endpoint,
the proxy's own Kafka client, broker discovery (which uses the client) and the idle-sensor sweep.

Why this module is long: it wires every part of the proxy together (filters, services, listeners and
their failures, signals); what has logic of its own lives beside it (proxy/listeners/listeners.py,
proxy/process/listener_failures.py, proxy/process/signals.py, proxy/services.py).
"""

from __future__ import annotations

import asyncio
import random
import socket
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from sluice.config.errors import ConfigError
from sluice.config.model import ProxyConfig
from sluice.config.protocol_settings import UnvettedApis
from sluice.config.quota_settings import AdminMode
from sluice.proxy.control_plane.quota_state import QuotaState

from ..cluster.broker_limits import BrokerLimits
from ..cluster.broker_nodes import BrokerNodes, listener_name
from ..cluster.brokers import Address, BrokerDirectory, ListenerUnavailable
from ..cluster.discovery import BrokerDiscovery
from ..cluster.topic_cache import TopicCache
from ..control_plane.broker_shield_ticks import ShieldTicker
from ..control_plane.quota_admin import QuotaAdministration, StoreRecord
from ..control_plane.quota_reload import QuotaReloader
from ..control_plane.quota_store_service import FOLLOW_MIN_WAIT_MS, FOLLOW_WAIT_MS, QuotaStoreService
from ..control_plane.sensor_sweep import SensorSweep
from ..data_path.broker_load import BrokerLoads
from ..data_path.connection import ClientSide, ConnectionRegistry, SessionSettings
from ..data_path.filter_chain import FilterChain
from ..data_path.peer_watch import PeerWatch
from ..data_path.request_memory import RequestMemory
from ..filter_api.contract import FilterFactory
from ..filters import ApiVersionsClampFactory, BrokerAddressRewriteFactory
from ..filters.broker_shield import BrokerShieldFactory
from ..filters.client_quotas import ClientQuotasFactory
from ..filters.mutation_quotas import MutationQuotasFactory
from ..filters.quota_admin import QuotaAdminFactory
from ..filters.sasl_inspector import SaslInspectorFactory
from ..filters.topic_quotas import TopicQuotasFactory
from ..filters.unadvertised_requests import UnadvertisedRequestsFactory
from ..kafka_client import KafkaClient
from ..listeners.accepting import Accepting, Listener
from ..listeners.listeners import PendingServer, bind_listening_socket, format_address
from ..listeners.tls import UpstreamTlsTarget, certificate_principal, listener_context, upstream_context
from ..observability.broker_shield_metrics import BrokerShieldCollector
from ..observability.log import get_logger
from ..observability.metrics import ProxyCollector, ProxyMetrics
from ..observability.metrics_http import MetricsEndpoint
from ..observability.quota_metrics import MutationRates, QuotaCollector, ThrottleStats
from ..observability.throttle_episodes import ThrottleEpisodes
from ..services import Service, Services
from ..usage_plane.usage_plane import UsagePlane
from ..wake_grid import ms_to_boundary, wall_clock_ms
from .listener_failures import EntityOverflowLog, ListenerFailures
from .memory_return import MemoryReturn
from .periodic import Periodic
from .signals import install_signal_handlers

_log = get_logger("sluice.server")

BOOTSTRAP = "bootstrap"
# Scrapes come one at a time from a few Prometheus servers: asyncio's own backlog, as before.
_METRICS_BACKLOG = 100


class SluiceServer:
    def __init__(self, config: ProxyConfig, *, reuse_port: bool = False) -> None:
        self.config = config
        self._reuse_port = reuse_port
        self.metrics = ProxyMetrics()
        self.request_memory = self.metrics.request_memory = RequestMemory(config.max_buffered_request_bytes)
        self.registry = ConnectionRegistry(self.metrics)
        # Every listener, paused while file descriptors run short (reserved_open_files).
        self.accepting = Accepting(config.reserved_open_files, lambda: len(self.registry))
        failures = ListenerFailures(self.metrics, lambda: self.directory, self._fail)
        self.directory = BrokerDirectory(
            config.advertised_host,
            self._open_broker_listener,
            on_unavailable=failures.unavailable,
            on_recovered=failures.recovered,
        )
        self._startup_listeners_failed = failures.at_start_up
        # Set when the proxy must stop with an error (a listener that cannot open at start-up).
        self.exit_code = 0
        # The quotas in force: the file's, with the store's on top; the engine follows them (quotas may
        # appear, change and go at run time: the filters read the managers' live rules per request).
        self.quota_state = QuotaState(config.quota)
        self.quota_managers = self.quota_state.live.managers
        self.quota_managers.report_overflows_to(
            EntityOverflowLog(lambda: self.quota_managers, config.quota.engine.max_entities)
        )
        self.throttle_stats = ThrottleStats(ThrottleEpisodes())
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
        self.kafka_client = KafkaClient(
            [(hp.host, hp.port) for hp in config.upstream_bootstrap],
            client_id=config.client.client_id,
            tls=self.upstream_tls,
            bind_address=config.upstream_bind_address,
            sasl=config.client.sasl,
            request_timeout_s=config.client.request_timeout_s,
        )
        self.topic_cache = TopicCache(config.quota.mutations.num_partitions)
        # Which broker a connection reaches, for the broker shield (and the usage records' broker).
        self.broker_nodes = BrokerNodes(self.directory.known_nodes)
        self.broker_shield = BrokerShieldFactory(
            self.quota_state.live, self.broker_nodes, self.throttle_stats
        )
        # Usage records and fleet quotas (docs/fleet.md): nothing at all unless usage.enabled.
        self.usage = (
            UsagePlane(
                config,
                self.quota_managers,
                self.kafka_client,
                self.topic_cache.name_of,
                self.broker_nodes,
                lambda: self.quota_state.live.brokers,
            )
            if config.usage.enabled
            else None
        )
        if self.usage is not None:  # the quota filters add their throttles, CPU time and mutations
            self.throttle_stats.usage = self.usage.recording
        self._stop = asyncio.Event()
        self.quota_store: QuotaStoreService | None = None
        if config.quota.admin is AdminMode.PROXY:
            self.quota_store = QuotaStoreService(
                self.kafka_client,
                self.quota_state,
                config.quota.store,
                follow_wait_ms=lambda: ms_to_boundary(wall_clock_ms(), FOLLOW_WAIT_MS, FOLLOW_MIN_WAIT_MS),
                stop_requested=self._stop,
            )
        self.settings = SessionSettings(
            FilterChain(self._filters()),
            self.metrics,
            self.registry,
            config.max_frame_bytes,
            config.idle_timeout_s,
            upstream_tls=self.upstream_tls,
            client_principal=certificate_principal(tls.principal_mapping_rules) if mtls else None,
            request_memory=self.request_memory,
            sasl_required=config.sasl if config.sasl.required else None,
            admission=self._admit,
            unproven_limits=config.sasl,
            broker_loads=BrokerLoads(config.max_in_flight_bytes_per_broker),
            upstream_bind_address=config.upstream_bind_address,
        )
        self.metrics.broker_loads = self.settings.broker_loads
        self._servers: dict[str, Listener | PendingServer] = {}
        self._pending_listeners: set[asyncio.Task[None]] = set()
        self._remove_signal_handlers: Callable[[], None] = lambda: None
        self.reloader = QuotaReloader(self.quota_state, config)
        self.services = Services(self._services())

    def _services(self) -> list[Service]:
        """The background services, in start order (each may use those before it); stopped in reverse."""
        services: list[Service] = []
        metrics_listen = self.config.metrics_listen
        if metrics_listen is not None:
            collectors = [
                ProxyCollector(self.metrics),
                self.accepting.collector(),
                QuotaCollector(self.quota_managers, self.throttle_stats, _loop_ms, self.mutation_rates),
            ]
            collectors.append(
                BrokerShieldCollector(
                    lambda: self.quota_state.live.brokers,
                    lambda: self.broker_shield.unattributed_bytes,
                    _loop_ms,
                )
            )
            if self.usage is not None:
                collectors.append(self.usage.collector())
            bind = partial(bind_listening_socket, backlog=_METRICS_BACKLOG)
            services.append(MetricsEndpoint(collectors, metrics_listen.host, metrics_listen.port, bind))
        discovery = BrokerDiscovery(
            self.kafka_client, self.directory, on_startup_failure=self._startup_listeners_failed
        )
        services += [self.kafka_client, discovery]
        if self.config.learn_broker_limits:
            services.append(
                BrokerLimits(
                    self.kafka_client,
                    self.directory.known_nodes,
                    self._cluster_request_max,
                    self._cluster_queued_max,
                )
            )
        if self.quota_store is not None:
            # After discovery, whose start returns at once: the store's first read (start-up waits for it,
            # briefly) then never delays the broker listeners.
            services.append(self.quota_store)
        services.append(SensorSweep(self.quota_state.live))
        services.append(MemoryReturn(self.registry))
        services.append(Periodic("throttle_episodes", 1.0, self.throttle_stats.sweep_episodes))
        shield_ticker = ShieldTicker(lambda: self.quota_state.live.brokers)
        services.append(Periodic("broker_shield", 1.0, shield_ticker.tick))
        if self.usage is not None:
            services += self.usage.services()
        return services

    def _filters(self) -> list[FilterFactory]:
        """The filter chain, in order. Each filter declares the API versions it can handle, and the
        ApiVersions clamp is computed from them. The quota filters are always in it: they ask the quota
        managers per request whether a quota applies, so quotas can come and go at run time."""
        quota = self.config.quota
        admin: list[FilterFactory] = []
        if quota.admin is AdminMode.PROXY:
            # Answers DescribeClientQuotas/AlterClientQuotas itself; alters are written to the store first.
            ready = self.quota_store.ready if self.quota_store is not None else None
            admin.append(
                QuotaAdminFactory(QuotaAdministration(self.quota_state), self._write_quota_store, ready)
            )
        # First: a request for what the ApiVersions clamp did not offer goes no further.
        hide = self.config.protocol.unvetted_apis is UnvettedApis.HIDE
        gate: list[FilterFactory] = [UnadvertisedRequestsFactory()] if hide else []
        return [
            *gate,
            SaslInspectorFactory(self.config.sasl.oauthbearer_principal_claim),
            BrokerAddressRewriteFactory(
                self.directory, self.metrics.addresses_rewritten, fetch_topics_read=self.usage is not None
            ),
            ApiVersionsClampFactory(self.config.protocol.unvetted_apis),
            *admin,
            MutationQuotasFactory(
                self.quota_managers,
                quota.mutations,
                self.topic_cache,
                self.throttle_stats,
                self.mutation_rates,
            ),
            # Before ClientQuotas: the larger of the two throttles is the request's, told by ClientQuotas.
            TopicQuotasFactory(self.quota_state.live, self.throttle_stats),
            # Last, so it patches throttle_time_ms into answers the other filters have already rewritten.
            ClientQuotasFactory(
                self.quota_managers,
                quota.throttle_mode,
                quota.fetch_throttle,
                self.throttle_stats,
                mute_scope=quota.mute_scope,
            ),
            # After the quota filters: it counts what was forwarded and what the client got.
            *(self.usage.filters() if self.usage is not None else ()),
            # Last: a Produce is charged to its broker, and timed, as it is forwarded (after any filter
            # that deferred it); the larger throttle of all is the request's, told by ClientQuotas. Only
            # when configured at start (adding it needs a restart): without it, it costs nothing.
            *((self.broker_shield,) if quota.broker_protection is not None else ()),
        ]

    def _cluster_request_max(self, size: int) -> None:
        """The brokers read requests up to `size` (socket.request.max.bytes): a larger one is refused."""
        if size < self.config.max_frame_bytes:
            self.settings.max_request_bytes = size
            self.settings.max_request_limit_name = "the brokers' socket.request.max.bytes"

    def _cluster_queued_max(self, size: int) -> None:
        """The brokers bound what they queue (queued.max.request.bytes): so does the load toward each."""
        if self.settings.broker_loads is not None:
            self.settings.broker_loads.learned(size)

    async def _write_quota_store(self, records: Sequence[StoreRecord]) -> int:
        assert self.quota_store is not None
        return await self.quota_store.write(records)

    def _admit(self, peername: object) -> int:
        """KIP-612 at accept time: 0 to serve a new connection, else how long to hold it before closing."""
        rates = self.quota_state.live.connections
        if not rates.enabled or not isinstance(peername, tuple):
            return 0
        return rates.record_connection(peername[0], _loop_ms())

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

    async def _serve(self, name: str, sock: socket.socket, candidates: Callable[[], list[Address]]) -> None:
        def connection() -> ClientSide:
            return ClientSide(self.settings, name, candidates)

        # Accepted here, not by loop.create_server: listeners must pause while descriptors run short.
        self._servers[name] = self.accepting.listen(sock, connection, self._listener_ssl)

    def _open_broker_listener(self, node_id: int) -> int:
        """Open node `node_id`'s listener and return its port, or raise ListenerUnavailable."""
        name = listener_name(node_id)
        host = self.config.listen.host
        if self._stop.is_set():
            raise ListenerUnavailable(node_id, host, "the proxy is stopping", config_error=False)
        try:
            port = self.config.broker_port(node_id)
        except ConfigError as exc:
            derived = format_address(host, self.config.broker_port_base + node_id)
            raise ListenerUnavailable(node_id, derived, str(exc), config_error=True) from None
        try:
            sock = bind_listening_socket(host, port, self.config.listen_backlog, self._reuse_port)
        except OSError as exc:
            where = format_address(host, port)
            raise ListenerUnavailable(node_id, where, str(exc), config_error=False) from None
        # The socket already listens, so clients told about it can connect while asyncio catches up.
        self._servers[name] = PendingServer(sock)
        task = asyncio.get_running_loop().create_task(
            self._serve(name, sock, lambda: self._node_candidates(node_id))
        )
        self._pending_listeners.add(task)
        task.add_done_callback(self._pending_listeners.discard)
        self.metrics.broker_listeners += 1
        _log.info("listener_opened", node_id=node_id, host=host, port=port)
        return port

    def _fail(self, exit_code: int, event: str, fields: dict[str, Any]) -> None:
        """Stop the proxy (with a drain) and exit with `exit_code`."""
        _log.error(event, exit_code=exit_code, **fields)
        if not self.exit_code:
            self.exit_code = exit_code
        self.request_stop()

    # ---- life cycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the bootstrap listener, then start the services; a service that fails to start closes the
        listener again and raises ServiceStartError."""
        cfg = self.config
        # First, so that no signal finds the default action (most of which end the process) while the
        # services start: the quota store's first read may take a moment.
        self._remove_signal_handlers = install_signal_handlers(
            asyncio.get_running_loop(), self.request_stop, self.request_reload, self.status
        )
        try:
            sock = bind_listening_socket(
                cfg.listen.host, cfg.listen.port, cfg.listen_backlog, self._reuse_port
            )
        except OSError:
            self._remove_signal_handlers()
            raise
        self.settings.peer_watch = PeerWatch.create(asyncio.get_running_loop())
        await self._serve(BOOTSTRAP, sock, self._bootstrap_candidates)
        _log.info("listener_opened", node_id=None, host=cfg.listen.host, port=self.listen_ports[BOOTSTRAP])
        try:
            await self.services.start()
        except BaseException:
            self._stop.set()
            self._close_listeners()
            for conn in self.registry:  # clients accepted while the services started
                conn.close("start_failed")
            self._remove_signal_handlers()
            raise
        self.accepting.count_own()  # the services' own descriptors are open now
        if cfg.metrics_listen is not None:
            _log.info("metrics_listening", host=cfg.metrics_listen.host, port=cfg.metrics_listen.port)
        if cfg.quota.admin is AdminMode.PROXY and cfg.quota.admin_principals.open:
            _log.warning(
                "quota_admin_open",
                detail="no quota.admin_principals: anyone who can connect may alter quotas, as on a Kafka "
                "cluster without an authorizer",
            )

    def request_stop(self) -> None:
        self._stop.set()

    def enable_reload(self, path: str | None, overrides: dict[str, object]) -> None:
        """Re-read `path` (with the start-up flags on top) on SIGHUP; without a file nothing is read."""
        self.reloader.source = (path, dict(overrides)) if path is not None else None

    def request_reload(self) -> None:
        """SIGHUP: re-read the configuration file; a valid one applies its quotas live, an invalid one is
        refused with the key named and the running configuration stays. No connection is touched."""
        try:
            self.reloader.reload()
        except Exception as exc:  # a reload must never take the proxy down
            _log.error("reload_failed", error_type=type(exc).__name__)

    def status(self) -> dict[str, object]:
        """What SIGQUIT logs."""
        return {
            "connections": len(self.registry),
            "brokers": len(self.directory.known_nodes()),
            "brokers_not_advertised": sorted(self.directory.unavailable()),
            "listeners": sorted(self._servers),
            "services": self.services.running,
        }

    async def run_until_stopped(self) -> int:
        """Serve until SIGTERM/SIGINT or a fatal error; return the exit code. Every other signal leaves
        the proxy serving (proxy/process/signals.py, installed by start()); SIGHUP reloads."""
        await self._stop.wait()
        await self.shutdown()
        return self.exit_code

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
        if self.settings.peer_watch is not None:
            self.settings.peer_watch.close()
            self.settings.peer_watch = None
        # After the drain: a service (the usage publisher) may still record what the last requests did.
        await self.services.stop()
        self._remove_signal_handlers()
        _log.info("shutdown_complete")

    def _close_listeners(self) -> None:
        for task in list(self._pending_listeners):
            task.cancel()
        for server in self._servers.values():
            server.close()
        self.accepting.close()


def _loop_ms() -> int:
    return int(asyncio.get_running_loop().time() * 1000)
