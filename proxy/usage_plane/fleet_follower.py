"""The fleet follower: reads the usage topic and charges what other instances admitted to this one's quotas.

A service (`proxy/services.py`), one task per partition of the usage topic, each a long-poll fetch loop
through the proxy's own Kafka client. Every batch goes to `quota.fleet.FleetQuotas.charge`, which skips
this instance's own batches and batches too old to weigh on any quota window, and to the `also` charges
(the broker shield's, quota/broker_fleet.py), which skip them likewise.

Where it starts reading: the records of the last quota window, so a process that starts (or restarts)
catches up with what the fleet has admitted recently. Kafka answers that look-up by time
(`offsets_for_time`); a broker that cannot (librdkafka's mock cluster) gets the last `catch_up_records`
records of each partition instead, and the age check skips what is older.

A batch that is not a usage record (another writer on the topic, a newer schema) is skipped, counted and
logged once per reason. Offsets only move forward; an offset that fell out of the log (retention) starts
again from the log's start.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from sluice.quota.fleet import FleetQuotas
from sluice.quota.usage_duplicates import RecentMessages
from sluice.quota.usage_records import UsageBatch, UsageRecordError, decode_batch

from ..kafka_client import FetchResult, KafkaClientError, OffsetOutOfRange
from ..observability.log import get_logger
from ..services import cancel_and_wait
from ..wake_grid import wall_clock_ms

_log = get_logger("sluice.fleet")
_T = TypeVar("_T")
DEFAULT_CATCH_UP_RECORDS = 2_000
FETCH_WAIT_MS = 200
_RETRY_S = (0.5, 5.0)
_SWEEP_S = 1.0
# Another charge of each batch: (batch, the sensors' ms, wall-clock ms) -> rows charged.
BatchCharge = Callable[[UsageBatch, int, int], int]


class UsageConsumer(Protocol):
    async def partitions(self, topic: str, *, timeout_s: float | None = None) -> list[int]: ...

    async def offsets_for_time(
        self, topic: str, timestamp_ms: int, partitions: Sequence[int] | None = None
    ) -> dict[int, int]: ...

    async def earliest_offsets(
        self, topic: str, partitions: Sequence[int] | None = None
    ) -> dict[int, int]: ...

    async def latest_offsets(self, topic: str, partitions: Sequence[int] | None = None) -> dict[int, int]: ...

    async def fetch(
        self, topic: str, partition: int, offset: int, *, max_wait_ms: int = ...
    ) -> FetchResult: ...


@dataclass(slots=True)
class FollowerStats:
    batches: int = 0  # read from the topic (own ones included)
    rows_charged: int = 0
    bad_records: int = 0
    duplicates: int = 0  # messages written twice by a retried produce, read and skipped


class FleetFollower:
    name = "fleet_follower"

    def __init__(
        self,
        client: UsageConsumer,
        fleet: FleetQuotas,
        topic: str,
        *,
        catch_up_ms: int,
        now_ms: Callable[[], int] | None = None,
        wall_ms: Callable[[], int] = wall_clock_ms,
        catch_up_records: int = DEFAULT_CATCH_UP_RECORDS,
        also: Sequence[BatchCharge] = (),
    ) -> None:
        self._client = client
        self._fleet = fleet
        self.topic = topic
        self._catch_up_ms = catch_up_ms
        self._now_ms = now_ms
        self._wall_ms = wall_ms
        self._catch_up_records = catch_up_records
        self._also = tuple(also)
        self.stats = FollowerStats()
        self._tasks: list[asyncio.Task[None]] = []
        self._bad_reasons: set[str] = set()
        self._recent = RecentMessages()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self._now_ms is None:
            self._now_ms = lambda: int(loop.time() * 1000)
        self._tasks = [loop.create_task(self._follow()), loop.create_task(self._sweep())]

    async def stop(self) -> None:
        await cancel_and_wait(self._tasks)
        self._tasks = []

    # ---- reading --------------------------------------------------------------------------------

    async def _follow(self) -> None:
        offsets = await self._retry_until(self._start_offsets)
        await asyncio.gather(*(self._partition_loop(p, offset) for p, offset in sorted(offsets.items())))

    async def _start_offsets(self) -> dict[int, int]:
        client, topic = self._client, self.topic
        partitions = await client.partitions(topic)
        by_time = await client.offsets_for_time(topic, self._wall_ms() - self._catch_up_ms, partitions)
        latest = await client.latest_offsets(topic, partitions)
        earliest = await client.earliest_offsets(topic, partitions)
        offsets = {}
        for p in partitions:
            found = by_time.get(p, -1)
            if found < 0:  # nothing that recent, or a broker that cannot look offsets up by time
                found = max(earliest.get(p, 0), latest[p] - self._catch_up_records)
            offsets[p] = found
        _log.info("fleet_following", topic=topic, partitions=len(partitions))
        return offsets

    async def _partition_loop(self, partition: int, offset: int) -> None:
        wait = _RETRY_S[0]
        while True:
            try:
                result = await self._client.fetch(self.topic, partition, offset, max_wait_ms=FETCH_WAIT_MS)
            except OffsetOutOfRange:
                offset = (
                    await self._retry_until(lambda: self._client.earliest_offsets(self.topic, [partition]))
                )[partition]
                continue
            except (KafkaClientError, OSError) as exc:
                _log.debug("fleet_fetch_failed", topic=self.topic, partition=partition, error=str(exc))
                await asyncio.sleep(wait)
                wait = min(wait * 2, _RETRY_S[1])
                continue
            wait = _RETRY_S[0]
            for record in result.records:
                self._charge(partition, record.value)
            offset = max(offset, result.next_offset)

    def _charge(self, partition: int, value: bytes | None) -> None:
        self.stats.batches += 1
        if value is not None and self._recent.repeated(partition, value):
            self.stats.duplicates += 1  # at-least-once delivery: charged when first read
            return
        try:
            batch = decode_batch(value or b"")
        except UsageRecordError as exc:
            self.stats.bad_records += 1
            reason = str(exc)[:80]
            if reason not in self._bad_reasons and len(self._bad_reasons) < 100:
                self._bad_reasons.add(reason)
                _log.warning("fleet_record_skipped", topic=self.topic, reason=str(exc))
            return
        assert self._now_ms is not None
        now_ms, wall_ms = self._now_ms(), self._wall_ms()
        self.stats.rows_charged += self._fleet.charge(batch, now_ms, wall_ms)
        for charge in self._also:
            self.stats.rows_charged += charge(batch, now_ms, wall_ms)

    async def _sweep(self) -> None:
        assert self._now_ms is not None
        while True:
            await asyncio.sleep(_SWEEP_S)
            for name in self._fleet.expire_peers(self._now_ms()):
                _log.info("fleet_peer_gone", instance=name)

    async def _retry_until(self, attempt: Callable[[], Awaitable[_T]]) -> _T:
        wait = _RETRY_S[0]
        while True:
            try:
                return await attempt()
            except (KafkaClientError, OSError) as exc:
                _log.debug("fleet_not_ready", topic=self.topic, error=str(exc))
                await asyncio.sleep(wait)
                wait = min(wait * 2, _RETRY_S[1])
