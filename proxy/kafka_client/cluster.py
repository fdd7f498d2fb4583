"""The client's view of the cluster: its brokers, where partitions lead, and one pool of connections.

Connections are keyed by (node id, lane). A lane keeps slow requests from holding up quick ones: a broker
answers one connection's requests in order, so a Fetch that long-polls for half a second would delay a
Produce queued behind it. Fetches go on a lane of their own per topic; everything else on "main".
Bootstrap servers are only used to find the brokers: every other request goes to a node by id, as
Kafka's clients do. Two callers asking for the same connection at once share one connect.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from sluice.config.client_settings import ClientSasl
from sluice.protocol.client_requests import (
    METADATA,
    BrokerInfo,
    MetadataAnswer,
    TopicInfo,
    decode_metadata,
    encode_metadata_request,
)
from sluice.protocol.errors import ProtocolError

from .connection import BrokerConnection, open_broker_connection
from .errors import (
    UNKNOWN_TOPIC_OR_PARTITION,
    BrokerUnavailable,
    ClientClosed,
    KafkaClientError,
    KafkaErrorCode,
    from_code,
)

if TYPE_CHECKING:
    from sluice.proxy.listeners.tls import UpstreamTlsTarget

MAIN_LANE = "main"
T = TypeVar("T")
_Key = tuple[int | str, str]  # (node id, or "host:port" for a bootstrap server; lane)


class Cluster:
    def __init__(
        self,
        bootstrap: Sequence[tuple[str, int]],
        *,
        client_id: str,
        tls: UpstreamTlsTarget | None,
        sasl: ClientSasl | None,
        connect_timeout_s: float,
        bind_address: str | None = None,
        request_timeout_s: float,
    ) -> None:
        if not bootstrap:
            raise ValueError("the client needs at least one bootstrap server")
        self.bootstrap = list(bootstrap)
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.controller_id = -1
        self._tls = tls
        self._bind_address = bind_address
        self._sasl = sasl
        self._connect_timeout_s = connect_timeout_s
        self._connections: dict[_Key, BrokerConnection] = {}
        self._connecting: dict[_Key, asyncio.Task[BrokerConnection]] = {}
        self._closed = False

    # ---- connections ----------------------------------------------------------------------------

    async def connection_to(self, node_id: int, lane: str = MAIN_LANE) -> BrokerConnection:
        broker = self.brokers.get(node_id)
        if broker is None:
            raise BrokerUnavailable(f"node {node_id} is not in the cluster's metadata")
        return await self._connection((node_id, lane), broker.host, broker.port, f"node {node_id}")

    async def any_connection(self) -> BrokerConnection:
        """An open connection to any broker: one already open, else the known brokers, else the bootstrap
        servers (in a random order, as Kafka's clients spread their first connections)."""
        self._check_open()
        loop = asyncio.get_running_loop()
        for (_, lane), connection in list(self._connections.items()):
            if lane == MAIN_LANE and connection.usable(loop.time()):
                return connection
        candidates: list[tuple[_Key, str, int, str]] = [
            ((node, MAIN_LANE), b.host, b.port, f"node {node}") for node, b in self.brokers.items()
        ]
        random.shuffle(candidates)
        servers = [((f"{h}:{p}", MAIN_LANE), h, p, f"bootstrap {h}:{p}") for h, p in self.bootstrap]
        random.shuffle(servers)
        last: KafkaClientError | None = None
        for key, host, port, label in candidates + servers:
            try:
                return await self._connection(key, host, port, label)
            except BrokerUnavailable as exc:
                last = exc
        raise last or BrokerUnavailable("no broker to connect to")

    async def _connection(self, key: _Key, host: str, port: int, label: str) -> BrokerConnection:
        self._check_open()
        loop = asyncio.get_running_loop()
        connection = self._connections.get(key)
        if connection is not None:
            if connection.usable(loop.time()):
                return connection
            del self._connections[key]
            connection.close()  # lost or past its SASL session lifetime; requests on it are retried
        task = self._connecting.get(key)
        if task is None:
            task = loop.create_task(
                open_broker_connection(
                    host,
                    port,
                    client_id=self.client_id,
                    tls=self._tls,
                    bind_address=self._bind_address,
                    sasl=self._sasl,
                    timeout_s=self._connect_timeout_s,
                    label=label,
                )
            )
            self._connecting[key] = task
            task.add_done_callback(lambda done: self._connected(key, done))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled() and self._closed:
                raise ClientClosed("the proxy's Kafka client is stopped") from None
            raise

    def _connected(self, key: _Key, task: asyncio.Task[BrokerConnection]) -> None:
        if self._connecting.get(key) is task:
            del self._connecting[key]
        if task.cancelled() or task.exception() is not None:
            return
        connection = task.result()
        if self._closed:
            connection.close()
        else:
            self._connections[key] = connection

    def forget(self, connection: BrokerConnection) -> None:
        """Drop a connection that failed a request, so the next one reconnects."""
        for key, known in list(self._connections.items()):
            if known is connection:
                del self._connections[key]
        connection.close()

    # ---- metadata -------------------------------------------------------------------------------

    async def refresh(self, topics: Sequence[str] | None, allow_auto_create: bool = False) -> MetadataAnswer:
        """Ask any broker for the brokers and `topics` (None: every topic) and remember the answer."""
        connection = await self.any_connection()
        version = connection.version_for(METADATA, "Metadata")
        body = encode_metadata_request(version, topics, allow_auto_create)
        try:
            answer = decode_metadata(
                version, await connection.request(METADATA, version, body, self.request_timeout_s)
            )
        except BrokerUnavailable:
            self.forget(connection)
            raise
        except ProtocolError as exc:
            self.forget(connection)
            raise BrokerUnavailable(f"{connection.label}: malformed Metadata answer ({exc.reason})") from None
        if answer.brokers:
            self.brokers = answer.brokers
        self.controller_id = answer.controller_id
        for name, topic in answer.topics.items():
            self.topics[name] = topic
        return answer

    def leader_for(self, topic: str, partition: int) -> int | None:
        info = self.topics.get(topic)
        entry = info.partitions.get(partition) if info is not None else None
        if entry is None or entry.error_code or entry.leader_id < 0:
            return None
        return entry.leader_id

    def invalidate(self, topic: str) -> None:
        self.topics.pop(topic, None)

    async def known_partitions(self, topic: str) -> list[int]:
        info = self.topics.get(topic)
        if info is None:
            await self.refresh([topic])
            info = self.topics.get(topic)
        if info is None or info.error_code:
            raise from_code(info.error_code if info else UNKNOWN_TOPIC_OR_PARTITION, f"Metadata for {topic}")
        return sorted(info.partitions)

    async def leader_connection(self, topic: str, partition: int, lane: str = MAIN_LANE) -> BrokerConnection:
        """A connection to the partition's leader, asking Metadata first if the leader is unknown."""
        leader = self.leader_for(topic, partition)
        if leader is None:
            await self.refresh([topic])
            leader = self.leader_for(topic, partition)
        if leader is None:
            info = self.topics.get(topic)
            entry = info.partitions.get(partition) if info is not None else None
            code = entry.error_code if entry is not None and entry.error_code else None
            if code is None:
                code = info.error_code if info is not None and info.error_code else UNKNOWN_TOPIC_OR_PARTITION
            raise from_code(code, f"leader of {topic}-{partition}")
        return await self.connection_to(leader, lane)

    def partition_error(
        self, code: int, where: str, topic: str, message: str | None = None
    ) -> KafkaErrorCode:
        """The error a partition answered; if it says the leader moved, the topic is looked up again."""
        error = from_code(code, where, message)
        if error.stale_metadata:
            self.invalidate(topic)
        return error

    # ---- requests -------------------------------------------------------------------------------

    async def call(
        self,
        connection: BrokerConnection,
        api_key: int,
        what: str,
        encode: Callable[[int], bytes],
        decode: Callable[[int, memoryview], T],
        extra_wait_s: float = 0.0,
    ) -> T:
        """One request on `connection` at the newest version both sides speak. A lost connection or a
        malformed answer drops the connection (the next call reconnects) and raises BrokerUnavailable."""
        version = connection.version_for(api_key, what)
        try:
            body = await connection.request(
                api_key, version, encode(version), self.request_timeout_s + extra_wait_s
            )
            return decode(version, body)
        except BrokerUnavailable:
            self.forget(connection)
            raise
        except ProtocolError as exc:
            self.forget(connection)
            raise BrokerUnavailable(f"{connection.label}: malformed {what} answer ({exc.reason})") from None

    # ---- life cycle -----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed("the proxy's Kafka client is stopped")

    def close(self) -> None:
        self._closed = True
        for task in self._connecting.values():
            task.cancel()
        self._connecting.clear()
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()
