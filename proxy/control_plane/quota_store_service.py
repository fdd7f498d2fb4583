"""QuotaStoreService: the quota store topic, written by alters and followed by every instance.

A service of SluiceServer on top of the proxy's own Kafka client:

* `start` makes sure the topic exists (one partition, compacted; created with the proxy's own
  credentials if missing), reads it from the start and applies every record to the QuotaState, then
  keeps following it with long-poll fetches, so a record written by any instance is in force here
  within one fetch round trip. Start-up waits for that first read for at most `startup_wait_s`: an
  unreachable cluster never stops the proxy from starting (the file's quotas apply meanwhile, and the
  follower keeps trying in the background). A stop asked for meanwhile (SIGTERM) ends the wait at once.
* `write` appends an alter's records as one batch (acks=all) and returns its offset; anything short of
  an acknowledgement within `write_timeout_ms` raises StoreUnavailable, which the alter answers as
  REQUEST_TIMED_OUT. Writes are serialised, so two alters on one instance are ordered.

The quotas in force never depend on the store being reachable: a failing follower only stops new
changes from arriving, and logs why (once per outage, then again when it recovers).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

from sluice.config.quota_settings import QuotaStoreSettings
from sluice.proxy.control_plane.live_quotas import QuotaChange
from sluice.proxy.control_plane.quota_records import QuotaRecordError
from sluice.proxy.control_plane.quota_state import QuotaState

from ..kafka_client import KafkaClient, KafkaClientError, OffsetOutOfRange, Record
from ..observability.log import get_logger
from .quota_admin import StoreRecord

_log = get_logger("sluice.quota_store")
PARTITION = 0
TOPIC_CONFIGS = {"cleanup.policy": "compact"}
# The follower's long poll: Kafka's consumer default (fetch.max.wait.ms). On Kafka its length costs no
# latency, a broker answering as soon as a record arrives; on an idle proxy each empty answer costs ~0.4 ms
# of CPU here, so 250 ms cost twice as much (idle proxy, the bench's configuration: 2.08 -> 1.55 ms of CPU a
# second at 500). librdkafka's mock, which the tests and benches run on, answers at the end of the wait:
# there an alter is enforced on the other instances at the next poll's end (quota admin bench, 3
# instances, target p99 < 1 s: 250 ms p50 49 / p99 429 ms, 500 ms p50 287 / p99 332, 1000 ms p50 793 / p99
# 853). (Before the grid below, 500 ms measured p99 600-910 ms there.) `sluice run` ends each poll on
# the background's grid (proxy/wake_grid.py): a wait up to the next half second on the wall clock, at
# least FOLLOW_MIN_WAIT_MS, so that an idle broker's answers come when the other background work wakes.
FOLLOW_WAIT_MS = 500
FOLLOW_MIN_WAIT_MS = 50
RETRY_DELAY_S = 1.0
STOP_WAIT_S = 2.0


class StoreUnavailable(Exception):
    """The store did not acknowledge a write; the message says why (never record content)."""


class QuotaStoreService:
    name = "quota_store"

    def __init__(
        self,
        client: KafkaClient,
        state: QuotaState,
        settings: QuotaStoreSettings,
        *,
        startup_wait_s: float = 5.0,
        follow_wait_ms: Callable[[], int] = lambda: FOLLOW_WAIT_MS,
        stop_requested: asyncio.Event | None = None,
    ) -> None:
        """`stop_requested`, once set, ends the start-up wait: a proxy told to stop while it starts
        stops at once rather than after `startup_wait_s`. `follow_wait_ms()`: the longest wait of the next
        long poll."""
        self._client = client
        self._state = state
        self._settings = settings
        self._startup_wait_s = startup_wait_s
        self._stop_requested = stop_requested
        self._follow_wait_ms = follow_wait_ms
        self._task: asyncio.Task[None] | None = None
        self._caught_up = asyncio.Event()
        # Set once the store has been read to the end at start-up, or start-up stopped waiting for it:
        # quota admin answers wait for it, so a describe right after a restart shows the stored quotas.
        self.ready = asyncio.Event()
        self._topic_ready = asyncio.Event()
        self._write_lock = asyncio.Lock()
        self._stopping = False
        self.offset = 0  # the next offset to read
        self.records_applied = 0
        self.records_skipped = 0

    @property
    def topic(self) -> str:
        return self._settings.topic

    @property
    def caught_up(self) -> bool:
        return self._caught_up.is_set()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._follow(), name="quota-store-follower")
        waits = [asyncio.ensure_future(self._caught_up.wait())]
        if self._stop_requested is not None:
            waits.append(asyncio.ensure_future(self._stop_requested.wait()))
        try:
            await asyncio.wait(waits, timeout=self._startup_wait_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        if self._caught_up.is_set():
            return
        self.ready.set()
        if self._stop_requested is None or not self._stop_requested.is_set():
            _log.warning(
                "quota_store_not_read_at_start",
                topic=self.topic,
                waited_s=self._startup_wait_s,
                detail="quotas from the file apply; stored quotas follow once the store is read",
            )

    async def stop(self) -> None:
        task = self._task
        if task is None:
            return
        # The flag as well as the cancel, checked before every fetch: a guard should a cancellation be lost
        # (Python 3.11's asyncio.wait_for, which the client's calls used until 2026-11-28, lost one that
        # landed just as the awaited fetch completed, and the follower went on fetching).
        self._stopping = True
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=STOP_WAIT_S)
        if not done:
            _log.warning("quota_store_follower_still_running", topic=self.topic, waited_s=STOP_WAIT_S)
            return
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def write(self, records: Sequence[StoreRecord]) -> int:
        """Append `records` as one batch; its base offset once acknowledged, else StoreUnavailable."""
        timeout_s = self._settings.write_timeout_ms / 1000
        async with self._write_lock:
            try:
                await asyncio.wait_for(self._topic_ready.wait(), timeout_s)
                return await self._client.produce(
                    self.topic,
                    PARTITION,
                    [Record(record.key, record.value) for record in records],
                    timeout_s=timeout_s,
                )
            except TimeoutError:
                raise StoreUnavailable(
                    f"the quota store topic {self.topic} was not reachable within {timeout_s:g} s"
                ) from None
            except KafkaClientError as exc:
                raise StoreUnavailable(
                    f"the quota store topic {self.topic} refused the write: {exc}"
                ) from None

    # -- following -------------------------------------------------------------------------------------

    async def _follow(self) -> None:
        failing = False
        while not self._stopping:
            try:
                if not self._topic_ready.is_set():
                    await self._ensure_topic()
                end = None if self._caught_up.is_set() else await self._end_offset()
                await self._read(end)
                if failing:
                    _log.info("quota_store_reachable", topic=self.topic, offset=self.offset)
                    failing = False
            except asyncio.CancelledError:
                raise
            except OffsetOutOfRange:
                earliest = await self._client.earliest_offsets(self.topic, [PARTITION])
                _log.warning(
                    "quota_store_offset_reset", topic=self.topic, was=self.offset, now=earliest[PARTITION]
                )
                self.offset = earliest[PARTITION]
            except KafkaClientError as exc:
                if self._stopping:
                    return
                if not failing:
                    _log.error("quota_store_unreachable", topic=self.topic, error=str(exc))
                    failing = True
                await asyncio.sleep(RETRY_DELAY_S)

    async def _ensure_topic(self) -> None:
        outcome = await self._client.create_topic(
            self.topic,
            partitions=1,
            replication_factor=self._settings.replication_factor,
            configs=TOPIC_CONFIGS,
        )
        _log.info("quota_store_topic", topic=self.topic, outcome=outcome.value)
        self._topic_ready.set()

    async def _end_offset(self) -> int:
        return (await self._client.latest_offsets(self.topic, [PARTITION]))[PARTITION]

    async def _read(self, end: int | None) -> None:
        """Fetch from `offset` until stopped; `end`: the first read is complete there."""
        while not self._stopping:
            if end is not None and self.offset >= end:
                self._caught_up.set()
                self.ready.set()
                _log.info(
                    "quota_store_read", topic=self.topic, offset=self.offset, entities=len(self._state.store)
                )
                end = None
            result = await self._client.fetch(
                self.topic, PARTITION, self.offset, max_wait_ms=self._follow_wait_ms()
            )
            for record in result.records:
                self._apply(record.key, record.value, record.offset)
            self.offset = max(self.offset, result.next_offset)

    def _apply(self, key: bytes | None, value: bytes | None, offset: int) -> None:
        try:
            changes = self._state.apply_record(key, value, offset)
        except QuotaRecordError as exc:
            self.records_skipped += 1
            _log.warning("quota_store_record_skipped", topic=self.topic, offset=offset, reason=str(exc))
            return
        self.records_applied += 1
        log_quota_changes(changes, "store")


def log_quota_changes(changes: Sequence[QuotaChange], source: str) -> None:
    """One `quota_changed` event per quota that changed in the engine (`source`: store or file)."""
    for change in changes:
        _log.info(
            "quota_changed",
            source=source,
            entity=change.entity.describe(),
            key=change.key,
            old=change.old,
            new=change.new,
        )
