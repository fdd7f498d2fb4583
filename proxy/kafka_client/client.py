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
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from sluice.config.client_settings import ClientSasl
from sluice.protocol.client_requests import (
    ACKS_ALL,
    DESCRIBE_CONFIGS,
    EARLIEST_TIMESTAMP,
    FETCH,
    LATEST_TIMESTAMP,
    LIST_OFFSETS,
    PRODUCE,
    MetadataAnswer,
    NewTopic,
    decode_fetch,
    decode_list_offsets,
    decode_produce,
    encode_fetch_request,
    encode_list_offsets_request,
    encode_produce_request,
)
from sluice.protocol.errors import ProtocolError
from sluice.protocol.record_batches import FetchedRecord, Record, decode_records, encode_record_batch
from sluice.protocol.topic_metadata import decode_broker_configs, encode_broker_config_request

from .backoff import RetryPolicy
from .cluster import MAIN_LANE, Cluster
from .connection import BrokerConnection
from .errors import UNKNOWN_TOPIC_OR_PARTITION, BrokerUnavailable, KafkaErrorCode, from_code
from .retrying import retrying
from .topics import TopicCreation, await_leaders, create_once

if TYPE_CHECKING:
    from sluice.proxy.listeners.tls import UpstreamTlsTarget

T = TypeVar("T")
# Small on purpose: the answer is checked (CRC32C) and decoded in one step on the loop, and kafka-python's
# pure-Python CRC32C costs ~80 us per kB (unless the `crc32c` C package is installed).
DEFAULT_FETCH_MAX_BYTES = 64 * 1024
DEFAULT_FETCH_MAX_WAIT_MS = 500
DEFAULT_RETRY = RetryPolicy()


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
        bind_address: str | None = None,
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
            bind_address=bind_address,
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
        outcome = await self._retrying(
            f"create topic {name}", lambda: create_once(self.cluster, new), timeout_s
        )
        await self._retrying(f"leaders of {name}", lambda: await_leaders(self.cluster, name), timeout_s)
        return outcome

    async def broker_configs(
        self, node_id: int, names: Sequence[str], *, timeout_s: float | None = None
    ) -> dict[str, str | None]:
        """Broker `node_id`'s values of the configs `names` (DescribeConfigs, asked of that broker; None
        for one it does not report). A refusal (an ACL: CLUSTER_AUTHORIZATION_FAILED) raises at once."""
        where = f"DescribeConfigs of broker {node_id}"

        async def attempt() -> dict[str, str | None]:
            connection = await self.cluster.connection_to(node_id)
            answer = await self.cluster.call(
                connection,
                DESCRIBE_CONFIGS,
                "DescribeConfigs",
                lambda v: encode_broker_config_request(v, node_id, names),
                decode_broker_configs,
            )
            if answer.error_code:
                raise from_code(answer.error_code, where, answer.error_message)
            return {name: answer.values.get(name) for name in names}

        return await self._retrying(where, attempt, timeout_s)

    # ---- produce ----------------------------------------------------------------------------------

    async def produce(
        self,
        topic: str,
        partition: int,
        records: Sequence[Record],
        *,
        timeout_s: float | None = None,
        compression: int = 0,
    ) -> int:
        """Write `records` as one batch to the partition's leader, acks=all; returns the base offset.
        `compression`: 0 (none) or `record_batches.GZIP`."""
        batch = encode_record_batch(records, int(time.time() * 1000), compression=compression)
        where = f"Produce to {topic}-{partition}"
        timeout_ms = int(self.request_timeout_s * 1000)

        async def attempt() -> int:
            connection = await self.cluster.leader_connection(topic, partition, MAIN_LANE)
            answer = await self.cluster.call(
                connection,
                PRODUCE,
                "Produce",
                lambda v: encode_produce_request(
                    v, topic, partition, batch, acks=ACKS_ALL, timeout_ms=timeout_ms
                ),
                lambda v, body: decode_produce(v, body, topic, partition),
            )
            if answer.error_code:
                raise self.cluster.partition_error(answer.error_code, where, topic, answer.error_message)
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
            connection = await self.cluster.leader_connection(topic, partition, f"fetch:{topic}")
            answer = await self.cluster.call(
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
                raise self.cluster.partition_error(answer.error_code, where, topic)
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

    async def offsets_for_time(
        self,
        topic: str,
        timestamp_ms: int,
        partitions: Sequence[int] | None = None,
        *,
        timeout_s: float | None = None,
    ) -> dict[int, int]:
        """{partition: the first offset whose timestamp is at or after `timestamp_ms`} (Kafka's
        offsetsForTimes); -1 where there is none, or where the broker cannot look offsets up by time."""
        return await self._list_offsets(topic, partitions, timestamp_ms, timeout_s)

    async def _list_offsets(
        self, topic: str, partitions: Sequence[int] | None, timestamp: int, timeout_s: float | None
    ) -> dict[int, int]:
        where = f"ListOffsets {topic}"

        async def attempt() -> dict[int, int]:
            wanted = (
                list(partitions) if partitions is not None else await self.cluster.known_partitions(topic)
            )
            by_leader: dict[BrokerConnection, list[int]] = {}
            for partition in wanted:
                by_leader.setdefault(
                    await self.cluster.leader_connection(topic, partition, MAIN_LANE), []
                ).append(partition)
            answers = await asyncio.gather(
                *(
                    self.cluster.call(
                        connection,
                        LIST_OFFSETS,
                        "ListOffsets",
                        partial(
                            encode_list_offsets_request, topic=topic, partitions=group, timestamp=timestamp
                        ),
                        lambda v, body: decode_list_offsets(v, body, topic),
                    )
                    for connection, group in by_leader.items()
                )
            )
            offsets: dict[int, int] = {}
            for answer in answers:
                for partition, (code, offset) in answer.items():
                    if code:
                        raise self.cluster.partition_error(code, f"{where}-{partition}", topic)
                    offsets[partition] = offset
            missing = [p for p in wanted if p not in offsets]
            if missing:
                raise BrokerUnavailable(f"{where}: no answer for partitions {missing}")
            return offsets

        return await self._retrying(where, attempt, timeout_s)

    async def _retrying(
        self,
        what: str,
        attempt: Callable[[], Awaitable[T]],
        timeout_s: float | None,
        *,
        retry_unknown_topic: bool = True,
    ) -> T:
        budget = self.request_timeout_s if timeout_s is None else timeout_s
        return await retrying(what, attempt, budget, self._retry, retry_unknown_topic=retry_unknown_topic)
