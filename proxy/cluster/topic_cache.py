"""What the mutation quota must know about the cluster: each topic's partition count, and the number of
partitions a CreateTopics with num_partitions -1 gets (the brokers' `num.partitions`).

A broker reads these from its own metadata; Sluice keeps a cache, filled on a miss by its own Metadata
(and DescribeConfigs) request sent on the client's connection, so it is authenticated as the client.
Mutations that pass through the proxy keep the cache current. An entry is trusted for `TOPIC_TTL_MS`, so a
change made elsewhere (another proxy, a client straight to the cluster) is seen within that time.

Look-ups are bounded, whatever clients send (a DeleteTopics naming a random topic id in a loop must not
make the proxy decode the whole cluster's metadata each time):
* one look-up at a time for every connection: a connection that needs one while another runs waits for
  it, then asks only for what it still lacks;
* what the cluster said does not exist (a name it answered with an error, an id an all-topics answer did
  not hold) is remembered for `TOPIC_TTL_MS` like what it said exists, and not asked again;
* an id can only be found in an all-topics answer, so those start at most once per
  `ALL_TOPICS_INTERVAL_MS`; an id unknown in between counts 0 partitions (the broker reports it if it
  really does not exist), as a topic the cluster does not know does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TypeVar

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.broker_addresses import decode_brokers
from sluice.protocol.errors import ProtocolError
from sluice.protocol.topic_metadata import (
    BROKER_CONFIG_VERSION,
    NUM_PARTITIONS_CONFIG,
    TOPIC_IDS_METADATA_VERSION,
    TOPIC_METADATA_VERSION,
    decode_config_value,
    decode_topic_partitions,
    encode_broker_config_request,
    encode_topic_metadata_request,
)

from ..filter_api.contract import ConnectionInfo
from ..observability.log import get_logger

# Kafka's own default for num.partitions, used for a request when the cluster will not say.
KAFKA_DEFAULT_NUM_PARTITIONS = 1
TOPIC_TTL_MS = 30_000
ALL_TOPICS_INTERVAL_MS = 5_000
_log = get_logger("sluice.topics")
_Key = TypeVar("_Key")  # a name (str) or an id (bytes)


class TopicCache:
    def __init__(self, num_partitions_override: int | None = None) -> None:
        # name -> (partition count, when it was learnt, in the connection clock's ms)
        self._partitions: dict[str, tuple[int, int]] = {}
        self._names_by_id: dict[bytes, str] = {}
        # What the cluster said does not exist, and when (same clock): not asked again within TOPIC_TTL_MS.
        self._unknown_names: dict[str, int] = {}
        self._unknown_ids: dict[bytes, int] = {}
        self._all_topics_asked_ms: int | None = None
        # The look-up under way, shared by every connection (one at a time).
        self._running: asyncio.Future[None] | None = None
        # Configured, or learnt from the cluster once; never a fallback, so a later request asks again.
        self._num_partitions: int | None = num_partitions_override

    # ---- reading --------------------------------------------------------------------------------

    def partitions(self, name: str) -> int | None:
        entry = self._partitions.get(name)
        return None if entry is None else entry[0]

    def name_of(self, topic_id: bytes) -> str | None:
        return self._names_by_id.get(topic_id)

    @property
    def num_partitions(self) -> int | None:
        """The partitions `num_partitions: -1` means, or None until learnt."""
        return self._num_partitions

    def missing(self, names: Iterable[str], now_ms: int) -> list[str]:
        """The names with no entry (that it exists, or that it does not) younger than TOPIC_TTL_MS."""
        partitions, unknown = self._partitions, self._unknown_names
        return [
            n
            for n in names
            if (n not in partitions or now_ms - partitions[n][1] > TOPIC_TTL_MS)
            and (n not in unknown or now_ms - unknown[n] > TOPIC_TTL_MS)
        ]

    def id_lookup_due(self, topic_id: bytes, now_ms: int) -> bool:
        """Whether to look `topic_id` up now: unknown, not found by an all-topics answer within TOPIC_TTL_MS,
        and no all-topics look-up started within ALL_TOPICS_INTERVAL_MS."""
        if topic_id in self._names_by_id:
            return False
        seen_unknown = self._unknown_ids.get(topic_id)
        if seen_unknown is not None and now_ms - seen_unknown <= TOPIC_TTL_MS:
            return False
        asked = self._all_topics_asked_ms
        return asked is None or now_ms - asked >= ALL_TOPICS_INTERVAL_MS

    # ---- keeping current ------------------------------------------------------------------------

    def topic_created(self, name: str, partitions: int, now_ms: int) -> None:
        self._partitions[name] = (partitions, now_ms)
        self._unknown_names.pop(name, None)

    def topic_deleted(self, name: str) -> None:
        self._partitions.pop(name, None)
        self._unknown_names.pop(name, None)  # the next request about it asks the cluster again
        for topic_id in [i for i, n in self._names_by_id.items() if n == name]:
            del self._names_by_id[topic_id]

    # ---- refreshing -----------------------------------------------------------------------------

    def refresh(
        self, conn: ConnectionInfo, names: list[str], *, ids: list[bytes], need_default: bool
    ) -> asyncio.Future[object]:
        """Ask the cluster, on `conn`, about `names` (every topic when `ids`: ids cannot be asked for by
        name) and `num.partitions` if `need_default`. The future is done when the cache has what the
        cluster said. A lookup the cluster refuses leaves the cache as it was and is logged; the future is
        cancelled only when the connection closes. Waits first for a look-up under way (on any connection)."""
        return asyncio.ensure_future(self._refresh(conn, names, ids, need_default))

    async def _refresh(
        self, conn: ConnectionInfo, names: list[str], ids: list[bytes], need_default: bool
    ) -> None:
        while self._running is not None:
            # Whatever way it ends (a connection closing cancels it), this one then asks for what is left.
            await asyncio.wait([self._running])
            now = conn.now_ms()
            names = self.missing(names, now)
            ids = [topic_id for topic_id in ids if self.id_lookup_due(topic_id, now)]
            need_default = need_default and self._num_partitions is None
        if not names and not ids and not need_default:
            return
        # Ids are looked up in an all-topics answer at v10: asking by id needs v12, which brokers that
        # already take DeleteTopics by id (Kafka 2.8+) may not speak.
        by_id = bool(ids)
        if by_id:
            self._all_topics_asked_ms = conn.now_ms()
        version = TOPIC_IDS_METADATA_VERSION if by_id else TOPIC_METADATA_VERSION
        request = encode_topic_metadata_request(version, None if by_id else names)
        metadata = conn.send_upstream(ApiKey.METADATA, version, request)
        running = asyncio.ensure_future(self._learn(conn, version, metadata, names, ids, need_default))
        self._running = running
        try:
            await running
        finally:
            if self._running is running:
                self._running = None

    async def _learn(
        self,
        conn: ConnectionInfo,
        version: int,
        metadata: asyncio.Future[bytes],
        names: list[str],
        ids: list[bytes],
        need_default: bool,
    ) -> None:
        try:
            body = await metadata
            brokers = decode_brokers(ApiKey.METADATA, version, body)
            now = conn.now_ms()
            found = decode_topic_partitions(version, body)
            for name in names:
                if name not in found:  # an all-topics answer without it: it does not exist
                    self._partitions.pop(name, None)
                    self._unknown_names[name] = now
            for name, topic in found.items():
                if topic.error_code == 0:
                    self._partitions[name] = (topic.partitions, now)
                    self._unknown_names.pop(name, None)
                    if topic.topic_id:
                        self._names_by_id[topic.topic_id] = name
                else:
                    self._partitions.pop(name, None)
                    self._unknown_names[name] = now
            for topic_id in ids:
                if topic_id not in self._names_by_id:
                    self._unknown_ids[topic_id] = now
            self._forget_old(now)
            if need_default and self._num_partitions is None:
                await self._learn_num_partitions(conn, brokers)
        except ProtocolError as exc:
            _log.warning("topic_lookup_failed", peer=conn.peer, topics=names[:20], error=str(exc))

    def _forget_old(self, now_ms: int) -> None:
        """Drop what the cluster said does not exist once it is older than TOPIC_TTL_MS, so made-up names
        and ids a client sends do not pile up."""
        _forget_before(self._unknown_names, now_ms - TOPIC_TTL_MS)
        _forget_before(self._unknown_ids, now_ms - TOPIC_TTL_MS)

    async def _learn_num_partitions(self, conn: ConnectionInfo, brokers: list[tuple[int, str, int]]) -> None:
        # A broker describes only its own static configs, so ask the one this connection reaches.
        node_id = _node_id(conn, brokers)
        value: str | None = None
        if node_id is not None:
            version = BROKER_CONFIG_VERSION
            request = encode_broker_config_request(version, node_id, [NUM_PARTITIONS_CONFIG])
            try:
                body = await conn.send_upstream(ApiKey.DESCRIBE_CONFIGS, version, request)
                value = decode_config_value(version, body, NUM_PARTITIONS_CONFIG)
            except ProtocolError as exc:
                _log.warning("num_partitions_lookup_failed", peer=conn.peer, error=str(exc))
        if value is not None and value.strip().isdigit() and int(value) > 0:
            self._num_partitions = int(value)
            _log.info("num_partitions_learnt", num_partitions=self._num_partitions, node_id=node_id)
            return
        _log.warning(
            "num_partitions_unknown",
            peer=conn.peer,
            assumed=KAFKA_DEFAULT_NUM_PARTITIONS,
            hint="set quota.mutations.num_partitions to the cluster's num.partitions",
        )


def _node_id(conn: ConnectionInfo, brokers: list[tuple[int, str, int]]) -> int | None:
    """The node id of the broker `conn` is connected to: its listener's, or found by its address."""
    if conn.listener.startswith("broker-"):
        return int(conn.listener.removeprefix("broker-"))
    for node_id, host, port in brokers:
        if f"{host}:{port}" == conn.upstream_peer:
            return node_id
    return None


def _forget_before(unknown: dict[_Key, int], oldest_ms: int) -> None:
    for key in [k for k, when in unknown.items() if when < oldest_ms]:
        del unknown[key]
