"""Broker discovery: the proxy's own Kafka client learns the cluster's brokers at start-up, so a listener
exists for every broker before any client is told about it.

`BrokerDiscovery` is a service. It asks for Metadata through the proxy's own client (with the proxy's own
TLS and SASL credentials) and advertises each broker in the directory, which opens its listener. Until a
broker answers it tries again every `retry_s`; once a client's Metadata answer has taught the directory the
brokers (a cluster the proxy cannot authenticate to, but its clients can), it stops trying.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from ..kafka_client import KafkaClient, KafkaClientError
from ..observability.log import get_logger

if TYPE_CHECKING:
    from collections.abc import Callable

    from .brokers import BrokerDirectory, ListenerUnavailable

_log = get_logger("sluice.discovery")
DISCOVERY_RETRY_S = 5.0
_ATTEMPT_TIMEOUT_S = 5.0


class BrokerDiscovery:
    name = "broker_discovery"

    def __init__(
        self,
        client: KafkaClient,
        directory: BrokerDirectory,
        *,
        retry_s: float = DISCOVERY_RETRY_S,
        attempt_timeout_s: float = _ATTEMPT_TIMEOUT_S,
        on_startup_failure: Callable[[list[ListenerUnavailable]], None] | None = None,
    ) -> None:
        """`on_startup_failure` gets the nodes this discovery found whose listeners cannot open."""
        self._client = client
        self._directory = directory
        self._retry_s = retry_s
        self._attempt_timeout_s = attempt_timeout_s
        self._on_startup_failure = on_startup_failure
        self._task: asyncio.Task[None] | None = None
        self.done = asyncio.Event()  # set once the brokers are known, from us or from a client

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._discover())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _discover(self) -> None:
        while True:
            if self._directory.known_nodes():
                _log.info("brokers_learnt_from_clients", brokers=len(self._directory.known_nodes()))
                break
            try:
                answer = await self._client.metadata(timeout_s=self._attempt_timeout_s)
            except KafkaClientError as exc:
                _log.warning("discovery_failed", error=str(exc))
                await asyncio.sleep(self._retry_s)
                continue
            _log.info(
                "brokers_discovered", brokers={n: f"{b.host}:{b.port}" for n, b in answer.brokers.items()}
            )
            failed = [
                node_id
                for node_id, broker in answer.brokers.items()
                if self._directory.advertise(node_id, broker.host, broker.port) is None
            ]
            if failed and self._on_startup_failure is not None:
                unavailable = self._directory.unavailable()
                self._on_startup_failure(
                    [unavailable[node_id] for node_id in failed if node_id in unavailable]
                )
            break
        self.done.set()
