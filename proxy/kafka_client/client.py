"""KafkaClient: the proxy's own Kafka client. Metadata, topic creation, produce, fetch and offsets.

It is a service of the server (`name`, `start`, `stop`): it connects lazily, on the first call, and
`stop` closes every connection. Every call has a time budget (`timeout_s`, default the client's request
timeout): a retriable failure (a broker down, a connection lost, a leader that moved, a topic still being
created) is retried with Kafka's backoff until the budget runs out, then raised as GaveUp naming the
last failure. A failure that retrying cannot mend (authorization, a bad config, an offset out of range)
is raised at once. Nothing here blocks the loop: the calls are coroutines, and the only CPU-heavy steps
(SCRAM's PBKDF2) run in a worker thread.

Produce is acks=all, one batch to one partition. Delivery is at least once: a produce whose connection
is lost after sending may have been written, and is sent again (consumers of the topics key their
records so that a duplicate does no harm).
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from sluice.config.client_settings import ClientSasl
from sluice.protocol.client_requests import (
    ACKS_ALL,
    CREATE_TOPICS,
    EARLIEST_TIMESTAMP,
    FETCH,
    LATEST_TIMESTAMP,
    LIST_OFFSETS,
    PRODUCE,
    MetadataAnswer,
    NewTopic,
    decode_create_topics,
    decode_fetch,
    decode_list_offsets,
    decode_produce,
    encode_create_topics_request,
    encode_fetch_request,
    encode_list_offsets_request,
    encode_produce_request,
)
from sluice.protocol.errors import ProtocolError
from sluice.protocol.record_batches import FetchedRecord, Record, decode_records, encode_record_batch

from ..log import get_logger
from .backoff import RetryPolicy
from .cluster import MAIN_LANE, Cluster
from .connection import BrokerConnection
from .errors import (
    TOPIC_ALREADY_EXISTS,
    UNKNOWN_TOPIC_OR_PARTITION,
    BrokerUnavailable,
    GaveUp,
    KafkaClientError,
    KafkaErrorCode,
    from_code,
)

if TYPE_CHECKING:
    from sluice.proxy.tls import UpstreamTlsTarget

_log = get_logger("sluice.kafka_client")
T = TypeVar("T")
DEFAULT_FETCH_MAX_BYTES = 256 * 1024
DEFAULT_FETCH_MAX_WAIT_MS = 500
LEADER_NOT_AVAILABLE = 5
DEFAULT_RETRY = RetryPolicy()


class TopicCreation(enum.Enum):
    CREATED = "created"  # by CreateTopics, with the partitions, replication and configs asked for
    EXISTED = "existed"  # already there; its settings were left as they are
    AUTO_CREATED = "auto_created"  # the broker lacks CreateTopics: made by a Metadata request, with the
    # broker's defaults (num.partitions, default.replication.factor) and none of the configs


class FetchResult(NamedTuple):
    records: list[FetchedRecord]
    next_offset: int  # where the next fetch starts (past every batch returned, control batches included)
    high_watermark: int
    log_start_offset: int


class KafkaClient:
    name = "kafka_client"

    def __init__(
        self,
        bootstrap: Sequence[tuple[str, int]],
        *,
        client_id: str = "sluice",
        tls: UpstreamTlsTarget | None = None,
        sasl: ClientSasl | None = None,
        request_timeout_s: float = 30.0,
        connect_timeout_s: float = 10.0,
        retry: RetryPolicy = DEFAULT_RETRY,
    ) -> None:
        self.request_timeout_s = request_timeout_s
        self._retry = retry
        self.cluster = Cluster(
            bootstrap,
            client_id=client_id,
            tls=tls,
            sasl=sasl,
            connect_timeout_s=min(connect_timeout_s, request_timeout_s),
            request_timeout_s=request_timeout_s,
        )

    # ---- service contract -----------------------------------------------------------------------

    async def start(self) -> None:
        """Nothing to do: connections are made by the first call, so an unreachable cluster never stops
        the proxy from starting."""

    async def stop(self) -> None:
        self.cluster.close()

    # ---- metadata and topics --------------------------------------------------------------------

    async def metadata(
        self, topics: Sequence[str] | None = (), *, timeout_s: float | None = None
    ) -> MetadataAnswer:
        """The cluster's brokers and `topics` (None: every topic; empty: brokers only). Never creates."""
        return await self._retrying("Metadata", lambda: self.cluster.refresh(topics), timeout_s)

    async def partitions(self, topic: str, *, timeout_s: float | None = None) -> list[int]:
        """The topic's partition ids; KafkaErrorCode UNKNOWN_TOPIC_OR_PARTITION if it does not exist."""

        async def attempt() -> list[int]:
            answer = await self.cluster.refresh([topic])
            info = answer.topics.get(topic)
            if info is None or info.error_code == UNKNOWN_TOPIC_OR_PARTITION:
                raise KafkaErrorCode(UNKNOWN_TOPIC_OR_PARTITION, f"Metadata for {topic}")
            if info.error_code:
                raise from_code(info.error_code, f"Metadata for {topic}")
            return sorted(info.partitions)

        return await self._retrying(f"partitions of {topic}", attempt, timeout_s, retry_unknown_topic=False)

    async def create_topic(
        self,
        name: str,
        *,
        partitions: int = 1,
        replication_factor: int = -1,
        configs: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> TopicCreation:
        """Make sure `name` exists; create it with these settings if it does not, and wait until every
        partition has a leader. `replication_factor` -1 takes the broker's default.replication.factor."""
        new = NewTopic(name, partitions, replication_factor, dict(configs or {}))
        outcome = await self._retrying(f"create topic {name}", lambda: self._create_once(new), timeout_s)
        await self._retrying(f"leaders of {name}", lambda: self._await_leaders(name), timeout_s)
        return outcome

    async def _create_once(self, topic: NewTopic) -> TopicCreation:
        answer = await self.cluster.refresh([topic.name])
        info = answer.topics.get(topic.name)
        if info is not None and info.error_code != UNKNOWN_TOPIC_OR_PARTITION:
            if info.error_code and not KafkaErrorCode(info.error_code, "").retriable:
                raise from_code(info.error_code, f"Metadata for {topic.name}")
            return TopicCreation.EXISTED
        controller = self.cluster.controller_id
        if controller in self.cluster.brokers:
            connection = await self.cluster.connection_to(controller)
        else:
            connection = await self.cluster.any_connection()
        if CREATE_TOPICS not in connection.versions:
            # librdkafka's mock cluster (and brokers that forbid admin APIs on this listener) lack it;
            # a Metadata request allowing auto-creation makes the topic with the broker's defaults.
            _log.warning(
                "kafka_client_topic_auto_created",
                topic=topic.name,
                broker=connection.label,
                reason="the broker does not offer CreateTopics in ApiVersions",
                configs_not_applied=sorted(topic.configs),
            )
            await self.cluster.refresh([topic.name], allow_auto_create=True)
            return TopicCreation.AUTO_CREATED
        timeout_ms = int(self.request_timeout_s * 1000)
        results = await self._call(
            connection,
            CREATE_TOPICS,
            "CreateTopics",
            lambda v: encode_create_topics_request(v, [topic], timeout_ms),
            decode_create_topics,
        )
        code, message = results.get(topic.name, (UNKNOWN_TOPIC_OR_PARTITION, "no answer for the topic"))
        if code == TOPIC_ALREADY_EXISTS:
            return TopicCreation.EXISTED
        if code:
            raise from_code(code, f"CreateTopics {topic.name} on {connection.label}", message)
        _log.info(
            "kafka_client_topic_created",
            topic=topic.name,
            partitions=topic.partitions,
            replication_factor=topic.replication_factor,
            configs=dict(topic.configs),
        )
        return TopicCreation.CREATED

    async def _await_leaders(self, topic: str) -> None:
        answer = await self.cluster.refresh([topic])
        info = answer.topics.get(topic)
        if info is None or info.error_code or not info.partitions:
            code = info.error_code if info is not None and info.error_code else UNKNOWN_TOPIC_OR_PARTITION
            raise from_code(code, f"Metadata for {topic}")
        for partition in info.partitions:
            if self.cluster.leader_for(topic, partition) is None:
                raise from_code(LEADER_NOT_AVAILABLE, f"Metadata for {topic}-{partition}")

    # ---- produce ----------------------------------------------------------------------------------

    async def produce(
        self, topic: str, partition: int, records: Sequence[Record], *, timeout_s: float | None = None
    ) -> int:
        """Write `records` as one batch to the partition's leader, acks=all; returns the base offset."""
        batch = encode_record_batch(records, int(time.time() * 1000))
        where = f"Produce to {topic}-{partition}"
        timeout_ms = int(self.request_timeout_s * 1000)

        async def attempt() -> int:
            connection = await self._leader(topic, partition, MAIN_LANE)
            answer = await self._call(
                connection,
                PRODUCE,
                "Produce",
                lambda v: encode_produce_request(
                    v, topic, partition, batch, acks=ACKS_ALL, timeout_ms=timeout_ms
                ),
                lambda v, body: decode_produce(v, body, topic, partition),
            )
            if answer.error_code:
                raise self._partition_error(answer.error_code, where, topic, answer.error_message)
            return answer.base_offset

        return await self._retrying(where, attempt, timeout_s)

    # ---- fetch and offsets ------------------------------------------------------------------------

    async def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
        max_wait_ms: int = DEFAULT_FETCH_MAX_WAIT_MS,
        timeout_s: float | None = None,
    ) -> FetchResult:
        """Records from `offset` on (read_uncommitted), waiting up to `max_wait_ms` for the first byte.

        At least one batch comes back when there is one, even if larger than `max_bytes` (KIP-74). An empty
        answer means nothing new yet. OffsetOutOfRange if `offset` is below the log start or past the end.
        """
        where = f"Fetch {topic}-{partition}@{offset}"

        async def attempt() -> FetchResult:
            # Its own lane: this long poll must not hold up a Produce to the same broker.
            connection = await self._leader(topic, partition, f"fetch:{topic}")
            answer = await self._call(
                connection,
                FETCH,
                "Fetch",
                lambda v: encode_fetch_request(
                    v, topic, partition, offset, max_bytes=max_bytes, max_wait_ms=max_wait_ms
                ),
                lambda v, body: decode_fetch(v, body, topic, partition),
                extra_wait_s=max_wait_ms / 1000,
            )
            if answer.error_code:
                raise self._partition_error(answer.error_code, where, topic)
            try:
                decoded = decode_records(answer.records, offset)
            except ProtocolError as exc:
                self.cluster.forget(connection)
                raise BrokerUnavailable(f"{where}: {exc.reason}") from None
            return FetchResult(
                decoded.records, decoded.next_offset, answer.high_watermark, answer.log_start_offset
            )

        return await self._retrying(where, attempt, timeout_s)

    async def earliest_offsets(
        self, topic: str, partitions: Sequence[int] | None = None, *, timeout_s: float | None = None
    ) -> dict[int, int]:
        """{partition: the first offset it still holds}. None: every partition of the topic."""
        return await self._list_offsets(topic, partitions, EARLIEST_TIMESTAMP, timeout_s)

    async def latest_offsets(
        self, topic: str, partitions: Sequence[int] | None = None, *, timeout_s: float | None = None
    ) -> dict[int, int]:
        """{partition: the offset the next record will get} (the high watermark)."""
        return await self._list_offsets(topic, partitions, LATEST_TIMESTAMP, timeout_s)

    async def _list_offsets(
        self, topic: str, partitions: Sequence[int] | None, timestamp: int, timeout_s: float | None
    ) -> dict[int, int]:
        where = f"ListOffsets {topic}"

        async def attempt() -> dict[int, int]:
            wanted = list(partitions) if partitions is not None else await self._known_partitions(topic)
            by_leader: dict[BrokerConnection, list[int]] = {}
            for partition in wanted:
                by_leader.setdefault(await self._leader(topic, partition, MAIN_LANE), []).append(partition)
            answers = await asyncio.gather(
                *(
                    self._call(
                        connection,
                        LIST_OFFSETS,
                        "ListOffsets",
                        lambda v, group=group: encode_list_offsets_request(v, topic, group, timestamp),
                        lambda v, body: decode_list_offsets(v, body, topic),
                    )
                    for connection, group in by_leader.items()
                )
            )
            offsets: dict[int, int] = {}
            for answer in answers:
                for partition, (code, offset) in answer.items():
                    if code:
                        raise self._partition_error(code, f"{where}-{partition}", topic)
                    offsets[partition] = offset
            missing = [p for p in wanted if p not in offsets]
            if missing:
                raise BrokerUnavailable(f"{where}: no answer for partitions {missing}")
            return offsets

        return await self._retrying(where, attempt, timeout_s)

    async def _known_partitions(self, topic: str) -> list[int]:
        info = self.cluster.topics.get(topic)
        if info is None:
            await self.cluster.refresh([topic])
            info = self.cluster.topics.get(topic)
        if info is None or info.error_code:
            raise from_code(info.error_code if info else UNKNOWN_TOPIC_OR_PARTITION, f"Metadata for {topic}")
        return sorted(info.partitions)

    # ---- plumbing ---------------------------------------------------------------------------------

    async def _leader(self, topic: str, partition: int, lane: str) -> BrokerConnection:
        leader = self.cluster.leader_for(topic, partition)
        if leader is None:
            await self.cluster.refresh([topic])
            leader = self.cluster.leader_for(topic, partition)
        if leader is None:
            info = self.cluster.topics.get(topic)
            entry = info.partitions.get(partition) if info is not None else None
            code = entry.error_code if entry is not None and entry.error_code else None
            if code is None:
                code = info.error_code if info is not None and info.error_code else UNKNOWN_TOPIC_OR_PARTITION
            raise from_code(code, f"leader of {topic}-{partition}")
        return await self.cluster.connection_to(leader, lane)

    def _partition_error(
        self, code: int, where: str, topic: str, message: str | None = None
    ) -> KafkaErrorCode:
        error = from_code(code, where, message)
        if error.stale_metadata:
            self.cluster.invalidate(topic)  # the leader moved (or the topic is new): ask again
        return error

    async def _call(
        self,
        connection: BrokerConnection,
        api_key: int,
        what: str,
        encode: Callable[[int], bytes],
        decode: Callable[[int, memoryview], T],
        extra_wait_s: float = 0.0,
    ) -> T:
        version = connection.version_for(api_key, what)
        try:
            body = await connection.request(
                api_key, version, encode(version), self.request_timeout_s + extra_wait_s
            )
            return decode(version, body)
        except BrokerUnavailable:
            self.cluster.forget(connection)
            raise
        except ProtocolError as exc:
            self.cluster.forget(connection)
            raise BrokerUnavailable(f"{connection.label}: malformed {what} answer ({exc.reason})") from None

    async def _retrying(
        self,
        what: str,
        attempt: Callable[[], Awaitable[T]],
        timeout_s: float | None,
        *,
        retry_unknown_topic: bool = True,
    ) -> T:
        loop = asyncio.get_running_loop()
        budget = self.request_timeout_s if timeout_s is None else timeout_s
        deadline = loop.time() + budget
        backoff = self._retry.backoff()
        while True:
            try:
                # The budget bounds the whole call, a slow attempt included: a request cut short here
                # keeps its place on its connection, and its late answer is read and dropped.
                return await asyncio.wait_for(attempt(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                raise GaveUp(what, budget, TimeoutError("no answer in time")) from None
            except KafkaClientError as exc:
                unknown_topic = isinstance(exc, KafkaErrorCode) and exc.code == UNKNOWN_TOPIC_OR_PARTITION
                if not exc.retriable or (unknown_topic and not retry_unknown_topic):
                    raise
                delay = backoff.next()
                if loop.time() + delay >= deadline:
                    raise GaveUp(what, budget, exc) from None
                _log.debug(
                    "kafka_client_retry",
                    what=what,
                    attempt=backoff.attempts,
                    delay_s=round(delay, 3),
                    error=str(exc),
                )
                await asyncio.sleep(delay)
