"""The usage publisher: once per interval, this process's usage records go to the usage topic.

A service (`proxy/services.py`). Two tasks, so the data path never waits for Kafka:

* the **timer** drains the usage ledger at every interval boundary (wall-clock aligned, so the intervals of
  every instance coincide) into one batch (`docs/usage-records.md`), encodes it (split into several
  messages only if it would pass `max_message_bytes`) and appends it to a bounded buffer. It publishes an
  empty batch too: in a fleet that says "alive, nothing admitted".
* the **sender** makes sure the topic exists (created with the operator's retention, partitions and
  replication if missing), then produces what is buffered through the proxy's own Kafka client, several
  messages per produce when it has fallen behind. While Kafka cannot take them, messages wait in the
  buffer; past `buffer_batches` the oldest are dropped and counted. The filters only ever add to the
  ledger, in memory.

On stop, the interval so far is drained and the buffer gets a short, bounded chance to go out.
Delivery is at least once: a produce retried after a lost connection may write a message twice (both
copies carry the same instance and interval).
"""

from __future__ import annotations

import asyncio
import contextlib
import zlib
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from sluice.config.usage_settings import UsageSettings
from sluice.protocol.record_batches import GZIP, Record
from sluice.quota.usage_ledger import BoundsOf, UsageLedger
from sluice.quota.usage_records import split_rows

from ..kafka_client import KafkaClientError
from ..observability.log import get_logger
from ..observability.metrics import api_name
from ..services import cancel_and_wait
from ..wake_grid import next_boundary, wall_clock_ms

_log = get_logger("sluice.usage")
# Under Kafka's default max.message.bytes (1 MiB + 12), with room for the batch and record headers.
DEFAULT_MAX_MESSAGE_BYTES = 900_000
STOP_FLUSH_S = 2.0
RETRY_S = (0.5, 5.0)  # first and longest wait between failed sends


class UsageProducer(Protocol):
    """What the publisher needs of the proxy's own Kafka client."""

    async def create_topic(
        self,
        name: str,
        *,
        partitions: int = 1,
        replication_factor: int = -1,
        configs: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> object: ...

    async def partitions(self, topic: str, *, timeout_s: float | None = None) -> list[int]: ...

    async def produce(
        self,
        topic: str,
        partition: int,
        records: Sequence[Record],
        *,
        timeout_s: float | None = None,
        compression: int = 0,
    ) -> int: ...


@dataclass(slots=True)
class UsageStats:
    """Counters for the metrics endpoint (`proxy/usage_plane/usage_metrics.py`)."""

    batches: int = 0  # intervals drained
    messages_sent: int = 0
    bytes_sent: int = 0
    messages_dropped: int = 0  # dropped from a full buffer: Kafka could not take them in time
    send_failures: int = 0
    buffered: int = 0


class UsagePublisher:
    name = "usage_publisher"

    def __init__(
        self,
        client: UsageProducer,
        ledger: UsageLedger,
        settings: UsageSettings,
        *,
        bounds: BoundsOf | None = None,
        wall_ms: Callable[[], int] = wall_clock_ms,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        stats: UsageStats | None = None,
        retry_s: tuple[float, float] = RETRY_S,
    ) -> None:
        self._client = client
        self._ledger = ledger
        self._settings = settings
        self._bounds = bounds
        self._wall_ms = wall_ms
        self._max_message_bytes = max_message_bytes
        self.stats = stats if stats is not None else UsageStats()
        self._buffer: deque[bytes] = deque()
        self._ready = asyncio.Event()
        self._interval_start_ms = 0
        self._partition: int | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._failing = False
        self._retry_s = retry_s
        self._compression = GZIP if settings.compression == "gzip" else 0

    @property
    def topic(self) -> str:
        return self._settings.topic

    # ---- service contract -----------------------------------------------------------------------

    async def start(self) -> None:
        self._interval_start_ms = self._wall_ms()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._timer()), loop.create_task(self._sender())]

    async def stop(self) -> None:
        await cancel_and_wait(self._tasks)
        self._tasks = []
        self.publish_interval()  # the interval so far: nothing admitted goes unrecorded
        if self._partition is not None:
            with contextlib.suppress(TimeoutError, KafkaClientError, OSError):
                await asyncio.wait_for(self._send_buffered(), STOP_FLUSH_S)
        if self._buffer:
            _log.warning("usage_records_unsent", messages=len(self._buffer), topic=self.topic)

    # ---- the timer ------------------------------------------------------------------------------

    def publish_interval(self, end_ms: int | None = None) -> None:
        """Drain the ledger into a batch for [interval start, end) and buffer its messages. `end_ms` is the
        interval boundary the timer woke for (default: now, for the last, partial interval at stop)."""
        end = self._wall_ms() if end_ms is None else end_ms
        start = self._interval_start_ms
        self._interval_start_ms = end
        batch = self._ledger.drain(start, max(0, end - start), self._bounds, api_name)
        self.stats.batches += 1
        for message in split_rows(batch, self._max_message_bytes):
            self._buffer.append(message)
        limit = self._settings.buffer_batches
        while len(self._buffer) > limit:
            self._buffer.popleft()
            self.stats.messages_dropped += 1
        self.stats.buffered = len(self._buffer)
        self._ready.set()

    async def _timer(self) -> None:
        interval = self._settings.interval_ms
        while True:
            # Never the same boundary twice, even if the loop's timer woke a little early by the wall clock.
            now = max(self._wall_ms(), self._interval_start_ms)
            boundary = next_boundary(now, interval)
            await asyncio.sleep((boundary - now) / 1000)
            self.publish_interval(max(boundary, self._interval_start_ms))

    # ---- the sender -----------------------------------------------------------------------------

    async def _sender(self) -> None:
        first_wait, longest_wait = self._retry_s
        wait = first_wait
        while True:
            try:
                if self._partition is None:
                    self._partition = await self._prepare_topic()
                await self._ready.wait()
                self._ready.clear()
                await self._send_buffered()
            except (KafkaClientError, OSError) as exc:
                self.stats.send_failures += 1
                if not self._failing:
                    self._failing = True
                    _log.warning(
                        "usage_publish_failed", topic=self.topic, error=str(exc), buffered=len(self._buffer)
                    )
                await asyncio.sleep(wait)
                wait = min(wait * 2, longest_wait)
                self._ready.set()  # try the buffer again
                continue
            wait = first_wait

    async def _prepare_topic(self) -> int:
        settings = self._settings
        await self._client.create_topic(
            settings.topic,
            partitions=settings.partitions,
            replication_factor=settings.replication_factor,
            configs={"retention.ms": str(settings.retention_ms), "cleanup.policy": "delete"},
        )
        partitions = await self._client.partitions(settings.topic)
        # One instance's batches stay in order on one partition; instances spread over the partitions.
        return partitions[zlib.crc32(self._ledger.instance.encode()) % len(partitions)]

    async def _send_buffered(self) -> None:
        assert self._partition is not None
        key = self._ledger.instance.encode()
        buffer = self._buffer
        while buffer:
            chunk: list[bytes] = []
            size = 0
            for message in buffer:
                if chunk and size + len(message) > self._max_message_bytes:
                    break
                chunk.append(message)
                size += len(message)
            await self._client.produce(
                self.topic,
                self._partition,
                [Record(key, message) for message in chunk],
                compression=self._compression,
            )
            # Only now: a message dropped from a full buffer meanwhile was older than these.
            for message in chunk:
                if buffer and buffer[0] is message:
                    buffer.popleft()
            self.stats.messages_sent += len(chunk)
            self.stats.bytes_sent += size
            self.stats.buffered = len(buffer)
            if self._failing:
                self._failing = False
                _log.info("usage_publish_resumed", topic=self.topic)
