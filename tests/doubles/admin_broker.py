"""AdminBrokerDouble: a one-broker Kafka test double for the admin APIs librdkafka's mock cluster lacks.

    with AdminBrokerDouble(num_partitions=3, topics={"orders": 2}) as broker:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, api_version=(4, 0))
        admin.create_topics({"audit": {"num_partitions": 4, "replication_factor": 1}})
        assert broker.topics == {"orders": 2, "audit": 4}

It speaks ApiVersions, Metadata, DescribeConfigs (BROKER resources), CreateTopics, DeleteTopics and
CreatePartitions with a Kafka controller's per-topic semantics, and closes the connection on any other
API or malformed frame. Every answer is built by `protocol/` (message_codec over kafka-python's
generated codecs), never by hand. It runs its own asyncio loop in a background thread and binds
127.0.0.1 on a free port; leaving the `with` block stops it and closes every connection.

`topic_configs` keeps the configs each created topic was given (`cleanup.policy`, `retention.ms`, ...).

Every broker-side check it makes has a Kafka error code, in the order a KRaft controller makes them;
replication is single-broker, so any replication factor above 1 is INVALID_REPLICATION_FACTOR.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Callable
from types import TracebackType
from typing import Any

from doubles.loop_thread import LoopThread

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.errors import ProtocolError
from sluice.protocol.frames import FrameSplitter
from sluice.protocol.headers import RequestHeader, encode_response, parse_request_header
from sluice.protocol.message_codec import decode_request_body, encode_response_body
from sluice.protocol.topic_mutations import MutationRequest, decode_mutation_request

API_VERSIONS, METADATA, DESCRIBE_CONFIGS = 18, 3, 32
ADVERTISED_VERSIONS: dict[int, tuple[int, int]] = {
    METADATA: (0, 13),
    API_VERSIONS: (0, 3),
    ApiKey.CREATE_TOPICS: (0, 7),
    ApiKey.DELETE_TOPICS: (0, 6),
    DESCRIBE_CONFIGS: (0, 4),
    ApiKey.CREATE_PARTITIONS: (0, 3),
}
CLUSTER_ID = "admin-broker-double"

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC_EXCEPTION = 17
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_REQUEST = 42
UNKNOWN_TOPIC_ID = 100

BROKER_RESOURCE = 4
CONFIG_SOURCE_DEFAULT = 5
CONFIG_TYPE_INT = 3
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")

_Outcome = tuple[int, str | None]  # (error code, error message)


class AdminBrokerDouble:
    """One Kafka broker (and controller) on 127.0.0.1 answering the admin APIs; see the module doc."""

    def __init__(
        self,
        *,
        node_id: int = 0,
        num_partitions: int = 1,
        topics: dict[str, int] | None = None,
        broker_configs: dict[str, str] | None = None,
    ) -> None:
        """`broker_configs`: more broker configs DescribeConfigs reports (such as socket.request.max.bytes),
        besides num.partitions."""
        self.node_id = node_id
        self.num_partitions = num_partitions
        self.broker_configs = dict(broker_configs or {})
        self.topics: dict[str, int] = dict(topics or {})
        self.topic_ids: dict[str, bytes] = {name: uuid.uuid4().bytes for name in self.topics}
        self.topic_configs: dict[str, dict[str, str | None]] = {}  # the configs each created topic was given
        self.received: list[tuple[int, int, MutationRequest]] = []
        self.metadata_requests = 0
        self.describe_configs_requests = 0
        self.requests_seen: list[tuple[int, int]] = []  # (api_key, version) of every request, in order
        self.advertised: dict[int, tuple[int, int]] = dict(ADVERTISED_VERSIONS)  # what ApiVersions offers
        self.port = 0
        self.bootstrap = ""
        self._server: asyncio.AbstractServer | None = None
        self._loop_thread = LoopThread("admin-broker-double", self._open, self._close_everything)
        self._transports: set[asyncio.Transport] = set()
        self._stopping = False
        self._handlers: dict[int, Callable[[RequestHeader, memoryview], bytes]] = {
            API_VERSIONS: self._api_versions,
            METADATA: self._metadata,
            DESCRIBE_CONFIGS: self._describe_configs,
            ApiKey.CREATE_TOPICS: self._mutation,
            ApiKey.DELETE_TOPICS: self._mutation,
            ApiKey.CREATE_PARTITIONS: self._mutation,
        }

    # -- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> AdminBrokerDouble:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        self.port = self._loop_thread.start()
        self.bootstrap = f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._loop_thread.stop()

    async def _open(self) -> int:
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _BrokerConnection(self), "127.0.0.1", 0
        )
        return self._server.sockets[0].getsockname()[1]

    async def _close_everything(self) -> None:
        server = self._server
        assert server is not None
        self._stopping = True  # a connection accepted from here on is aborted as it is made
        server.close()
        for transport in list(self._transports):
            transport.abort()
        others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        await asyncio.gather(*others, return_exceptions=True)  # accepts in flight
        await server.wait_closed()
        await asyncio.sleep(0)  # aborted transports close their sockets in a callback

    # -- request handling ------------------------------------------------------------------------

    def answer(self, request_frame: memoryview) -> bytes | None:
        """The framed response to one framed request, or None to close the connection."""
        try:
            header = parse_request_header(request_frame)
        except ProtocolError:
            return None
        self.requests_seen.append((header.api_key, header.api_version))
        handler = self._handlers.get(header.api_key)
        if handler is None:
            return None
        low, high = self.advertised[header.api_key]
        if not low <= header.api_version <= high and header.api_key != API_VERSIONS:
            return None
        try:
            body = handler(header, request_frame[4 + header.size :])
        except ProtocolError:
            return None
        return encode_response(header.api_key, header.api_version, header.correlation_id, body)

    def _api_versions(self, header: RequestHeader, body: memoryview) -> bytes:
        version = header.api_version
        low, high = self.advertised[API_VERSIONS]
        if version > high:
            # Kafka answers a version it cannot parse with UNSUPPORTED_VERSION in v0, listing only its
            # own ApiVersions range so the client can retry with one it knows.
            return encode_response_body(
                API_VERSIONS,
                0,
                error_code=UNSUPPORTED_VERSION,
                api_keys=[{"api_key": API_VERSIONS, "min_version": low, "max_version": high}],
            )
        decode_request_body(API_VERSIONS, version, body)
        keys = [
            {"api_key": key, "min_version": low, "max_version": high}
            for key, (low, high) in sorted(self.advertised.items())
        ]
        return encode_response_body(API_VERSIONS, version, error_code=NONE, api_keys=keys, throttle_time_ms=0)

    def _metadata(self, header: RequestHeader, body: memoryview) -> bytes:
        version = header.api_version
        request = decode_request_body(METADATA, version, body)
        self.metadata_requests += 1
        if request.topics is None or (version == 0 and not request.topics):
            topics = [self._topic_metadata(name, version) for name in self.topics]
        else:
            topics = [self._requested_topic_metadata(entry, version) for entry in request.topics]
        return encode_response_body(
            METADATA,
            version,
            throttle_time_ms=0,
            brokers=[{"node_id": self.node_id, "host": "127.0.0.1", "port": self.port, "rack": None}],
            cluster_id=CLUSTER_ID,
            controller_id=self.node_id,
            topics=topics,
            error_code=NONE,
        )

    def _requested_topic_metadata(self, entry: Any, version: int) -> dict[str, Any]:
        name = entry.name
        if name is None:  # v12+ lookup by id
            raw_id = None if entry.topic_id is None else entry.topic_id.bytes
            name = next((topic for topic, tid in self.topic_ids.items() if tid == raw_id), None)
            if name is None:
                return {
                    "error_code": UNKNOWN_TOPIC_ID,
                    "name": None,
                    "topic_id": entry.topic_id,
                    "partitions": [],
                }
        if name not in self.topics:
            return {"error_code": UNKNOWN_TOPIC_OR_PARTITION, "name": name, "partitions": []}
        return self._topic_metadata(name, version)

    def _topic_metadata(self, name: str, version: int) -> dict[str, Any]:
        node = self.node_id
        partitions = [
            {
                "error_code": NONE,
                "partition_index": index,
                "leader_id": node,
                "leader_epoch": 0,
                "replica_nodes": [node],
                "isr_nodes": [node],
                "offline_replicas": [],
            }
            for index in range(self.topics[name])
        ]
        return {
            "error_code": NONE,
            "name": name,
            "topic_id": uuid.UUID(bytes=self.topic_ids[name]),
            "is_internal": False,
            "partitions": partitions,
        }

    def _describe_configs(self, header: RequestHeader, body: memoryview) -> bytes:
        version = header.api_version
        request = decode_request_body(DESCRIBE_CONFIGS, version, body)
        self.describe_configs_requests += 1
        results = [self._describe_resource(resource) for resource in request.resources or []]
        return encode_response_body(DESCRIBE_CONFIGS, version, throttle_time_ms=0, results=results)

    def _describe_resource(self, resource: Any) -> dict[str, Any]:
        result: dict[str, Any] = {
            "error_code": NONE,
            "error_message": None,
            "resource_type": resource.resource_type,
            "resource_name": resource.resource_name,
            "configs": [],
        }
        if resource.resource_type != BROKER_RESOURCE:
            result.update(error_code=INVALID_REQUEST, error_message="This double only describes brokers.")
        elif resource.resource_name == "":
            pass  # the cluster-wide dynamic defaults: none are set here
        elif resource.resource_name != str(self.node_id):
            result.update(
                error_code=INVALID_REQUEST,
                error_message=f"Unexpected broker id, expected {self.node_id} or empty string, "
                f"but received {resource.resource_name}",
            )
        else:
            known = {"num.partitions": str(self.num_partitions), **self.broker_configs}
            wanted = resource.configuration_keys
            result["configs"] = [
                {
                    "name": name,
                    "value": value,
                    "read_only": False,
                    "config_source": CONFIG_SOURCE_DEFAULT,
                    "is_default": True,
                    "is_sensitive": False,
                    "synonyms": [],
                    "config_type": CONFIG_TYPE_INT,
                }
                for name, value in known.items()
                if wanted is None or name in wanted
            ]
        return result

    def _mutation(self, header: RequestHeader, body: memoryview) -> bytes:
        api_key, version = header.api_key, header.api_version
        mutation = decode_mutation_request(api_key, version, body)
        self.received.append((api_key, version, mutation))
        if api_key == ApiKey.CREATE_TOPICS:
            request = decode_request_body(api_key, version, body)
            results = self._create_topics(request.topics, mutation.validate_only, version)
            return encode_response_body(api_key, version, throttle_time_ms=0, topics=results)
        if api_key == ApiKey.DELETE_TOPICS:
            results = self._delete_topics(mutation)
            return encode_response_body(api_key, version, throttle_time_ms=0, responses=results)
        results = self._create_partitions(mutation)
        return encode_response_body(api_key, version, throttle_time_ms=0, results=results)

    def _create_topics(self, topics: list[Any], validate_only: bool, version: int) -> list[dict[str, Any]]:
        names = [topic.name for topic in topics]
        results = []
        for topic in topics:
            if names.count(topic.name) > 1:
                outcome: _Outcome = (INVALID_REQUEST, "Duplicate topic name.")
                partitions = None
            else:
                outcome, partitions = self._check_new_topic(topic)
            result: dict[str, Any] = {
                "name": topic.name,
                "error_code": outcome[0],
                "error_message": outcome[1],
            }
            if outcome[0] == NONE and partitions is not None:
                topic_id = uuid.uuid4().bytes
                if not validate_only:
                    self.topics[topic.name] = partitions
                    self.topic_ids[topic.name] = topic_id
                    self.topic_configs[topic.name] = {c.name: c.value for c in topic.configs or []}
                result.update(
                    num_partitions=partitions,
                    replication_factor=1,
                    topic_id=None if validate_only else uuid.UUID(bytes=topic_id),
                )
            results.append(result)
        return results

    def _check_new_topic(self, topic: Any) -> tuple[_Outcome, int | None]:
        name = topic.name
        if not _LEGAL_TOPIC_NAME.fullmatch(name) or name in (".", ".."):
            return (INVALID_TOPIC_EXCEPTION, f"Topic name {name!r} is illegal."), None
        if name in self.topics:
            return (TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."), None
        if topic.assignments:
            if topic.num_partitions != -1 or topic.replication_factor != -1:
                return (
                    INVALID_REQUEST,
                    "A manual partition assignment was specified, but numPartitions or "
                    "replicationFactor was not set to -1.",
                ), None
            return (NONE, None), len(topic.assignments)
        if topic.num_partitions == 0 or topic.num_partitions < -1:
            return (
                INVALID_PARTITIONS,
                "Number of partitions was set to an invalid non-positive value.",
            ), None
        if topic.replication_factor == 0 or topic.replication_factor < -1:
            return (
                INVALID_REPLICATION_FACTOR,
                "Replication factor was set to an invalid non-positive value.",
            ), None
        if topic.replication_factor > 1:
            return (
                INVALID_REPLICATION_FACTOR,
                f"Unable to replicate the partition {topic.replication_factor} time(s): "
                "The target replication factor is larger than the number of brokers (1).",
            ), None
        partitions = self.num_partitions if topic.num_partitions == -1 else topic.num_partitions
        return (NONE, None), partitions

    def _delete_topics(self, mutation: MutationRequest) -> list[dict[str, Any]]:
        results = []
        for topic in mutation.topics:
            name, raw_id = topic.name, topic.topic_id
            if raw_id is not None and name is not None:
                outcome: _Outcome = (INVALID_REQUEST, "You may not specify both topic name and topic id.")
            elif raw_id is not None:
                name = next((t for t, tid in self.topic_ids.items() if tid == raw_id), None)
                outcome = (UNKNOWN_TOPIC_ID, None) if name is None else (NONE, None)
            elif name is None:
                outcome = (INVALID_REQUEST, "Neither topic name nor topic id was given.")
            elif name not in self.topics:
                outcome = (UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
            else:
                outcome = (NONE, None)
                raw_id = self.topic_ids[name]
            if outcome[0] == NONE and name is not None:
                del self.topics[name]
                del self.topic_ids[name]
            results.append(
                {
                    "name": name,
                    "topic_id": None if raw_id is None else uuid.UUID(bytes=raw_id),
                    "error_code": outcome[0],
                    "error_message": outcome[1],
                }
            )
        return results

    def _create_partitions(self, mutation: MutationRequest) -> list[dict[str, Any]]:
        names = [topic.name for topic in mutation.topics]
        results = []
        for topic in mutation.topics:
            name = topic.name
            current = self.topics.get(name) if name is not None else None
            outcome: _Outcome
            if names.count(name) > 1:
                outcome = (INVALID_REQUEST, "Duplicate topic in request.")
            elif current is None:
                outcome = (UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
            elif topic.partitions <= current:
                outcome = (
                    INVALID_PARTITIONS,
                    f"Topic currently has {current} partitions, which is higher than or equal to "
                    f"the requested {topic.partitions}.",
                )
            elif topic.assignments is not None and topic.assignments != topic.partitions - current:
                outcome = (
                    INVALID_REPLICA_ASSIGNMENT,
                    f"Attempted to add {topic.partitions - current} additional partition(s), but only "
                    f"{topic.assignments} assignment(s) were specified.",
                )
            else:
                outcome = (NONE, None)
                if not mutation.validate_only:
                    self.topics[name] = topic.partitions  # type: ignore[index]
            results.append({"name": name, "error_code": outcome[0], "error_message": outcome[1]})
        return results


class _BrokerConnection(asyncio.Protocol):
    def __init__(self, broker: AdminBrokerDouble) -> None:
        self._broker = broker
        self._splitter = FrameSplitter()
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        if self._broker._stopping:
            transport.abort()
            return
        self._broker._transports.add(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None:
            self._broker._transports.discard(self._transport)

    def data_received(self, data: bytes) -> None:
        assert self._transport is not None
        try:
            frames = self._splitter.feed(data)
        except ProtocolError:
            self._transport.abort()
            return
        for request_frame in frames:
            response = self._broker.answer(request_frame)
            if response is None:
                self._transport.close()
                return
            self._transport.write(response)
