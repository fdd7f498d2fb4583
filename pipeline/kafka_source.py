"""`spark.read.format("sluice-usage")`: the usage topic read by Spark's executors with librdkafka.

Nothing here needs Spark's JVM Kafka connector. The driver lists each partition's offsets and plans offset
slices (`kafka_offsets.plan_ranges`); each slice becomes one Spark partition, read on an executor by a
confluent-kafka consumer that is assigned the slice (no consumer group, nothing committed) and stops at
the slice's end. Messages are decoded with the proxy's own codec; one that is not a usage record of a
version this reader knows fails the read naming its partition and offset (`badRecords=skip` skips it
with a warning on the executor's stderr instead).

Options (Spark's Kafka-source names where there is one):

* `kafka.bootstrap.servers` (required) and any other `kafka.<librdkafka setting>` (security.protocol,
  sasl.*, ssl.*), passed to the client as they are;
* `topic` (default `_sluice_usage`);
* `startingOffsets` / `endingOffsets`: `earliest` / `latest` (the defaults) or JSON `{"0": 42}`;
* `startingTimestamp` / `endingTimestamp`: epoch ms, resolved with ListOffsets by time (they win over
  the offsets options);
* `maxRecordsPerPartition` (default 50000 messages) and `minPartitions` (default 1);
* `timeoutMs` (default 30000): metadata calls, and how long a read may see no progress before failing.

Delivery to the usage topic is at least once: a publisher's retried produce may write a message twice
(docs/usage-records.md). A message equal to one of the 1,024 before it on its partition is a copy and
gives no rows, as the fleet follower skips it (`quota/usage_duplicates.py`); each slice reads the 1,024
offsets before its start too, only to remember them, so a copy is dropped wherever a slice or a read
begins (at most 1,024 more messages read per slice: keep `maxRecordsPerPartition` well above that).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, overload

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from sluice.quota.usage_duplicates import DEFAULT_REMEMBERED, RecentMessages
from sluice.quota.usage_records import UsageRecordError

from .kafka_offsets import OffsetRange, OffsetSpecError, parse_offsets, plan_ranges, resolve_offset
from .usage_table import USAGE_DDL, message_rows

if TYPE_CHECKING:  # confluent-kafka is imported where it is used: only a reading executor needs it
    from confluent_kafka import Consumer
    from pyspark.sql import SparkSession

SOURCE_NAME = "sluice-usage"
DEFAULT_TOPIC = "_sluice_usage"
DEFAULT_MAX_RECORDS = 50_000
_BATCH = 2_000


class UsageSourceError(RuntimeError):
    """The topic cannot be read as asked; never carries a client setting's value (credentials)."""


class OffsetSlice(InputPartition):
    """One Spark partition: offsets [start, end) of one topic partition."""

    def __init__(self, offsets: OffsetRange) -> None:
        super().__init__(offsets)
        self.offsets = offsets

    def __repr__(self) -> str:
        o = self.offsets
        return f"OffsetSlice({o.topic}[{o.partition}] {o.start}..{o.end})"


def client_config(options: Mapping[str, str]) -> dict[str, str]:
    """The `kafka.*` options without their prefix; bootstrap servers required."""
    config = {
        key[len("kafka.") :]: value for key, value in options.items() if key.lower().startswith("kafka.")
    }
    if not config.get("bootstrap.servers"):
        raise UsageSourceError(f"{SOURCE_NAME}: option kafka.bootstrap.servers is required")
    return config


def _consumer(config: Mapping[str, str]) -> Consumer:
    from confluent_kafka import Consumer

    settings = {
        **config,
        # A throwaway group id: librdkafka wants one, and nothing is ever committed under it.
        "group.id": config.get("group.id", f"sluice-pipeline-{uuid.uuid4().hex}"),
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
    }
    return Consumer(settings)


class _Options:
    """Spark's option names are case-insensitive (and may reach us lower-cased): look them up that way."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self._values = {key.lower(): value for key, value in options.items()}

    @overload
    def get(self, name: str) -> str | None: ...
    @overload
    def get(self, name: str, default: str) -> str: ...
    def get(self, name: str, default: str | None = None) -> str | None:
        return self._values.get(name.lower(), default)


def _int_option(options: _Options, name: str, default: int, low: int) -> int:
    raw = options.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise UsageSourceError(f"{SOURCE_NAME}: option {name}={raw!r} must be an integer") from None
    if value < low:
        raise UsageSourceError(f"{SOURCE_NAME}: option {name}={value} must be at least {low}")
    return value


class UsageReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.config = client_config(options)
        named = self.options = _Options(options)
        self.topic = named.get("topic", DEFAULT_TOPIC)
        self.timeout_s = _int_option(named, "timeoutMs", 30_000, 1) / 1000
        self.max_records = _int_option(named, "maxRecordsPerPartition", DEFAULT_MAX_RECORDS, 1)
        self.min_partitions = _int_option(named, "minPartitions", 1, 1)
        bad_records = named.get("badRecords", "fail")
        self.skip_bad = bad_records.lower() == "skip"
        if bad_records.lower() not in ("fail", "skip"):
            raise UsageSourceError(f"{SOURCE_NAME}: option badRecords must be fail or skip")

    # -- on the driver -----------------------------------------------------------------------------

    def partitions(self) -> list[OffsetSlice]:
        bounds = self.bounds()
        return [
            OffsetSlice(r) for r in plan_ranges(bounds, self.topic, self.max_records, self.min_partitions)
        ]

    def bounds(self) -> dict[int, tuple[int, int]]:
        """[start, end) per partition, as the options ask, from the cluster's offsets now."""
        from confluent_kafka import KafkaException, TopicPartition

        consumer = _consumer(self.config)
        try:
            try:
                metadata = consumer.list_topics(self.topic, timeout=self.timeout_s)
            except KafkaException as exc:
                raise UsageSourceError(
                    f"{SOURCE_NAME}: cannot reach {self.config['bootstrap.servers']} for topic "
                    f"{self.topic!r} within {self.timeout_s:g} s: {exc.args[0].str()}"
                ) from None
            topic = metadata.topics.get(self.topic)
            if topic is None or topic.error is not None or not topic.partitions:
                reason = "no such topic" if topic is None or topic.error is None else topic.error.str()
                raise UsageSourceError(f"{SOURCE_NAME}: topic {self.topic!r}: {reason}")
            partitions = sorted(topic.partitions)
            marks = {
                p: consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=self.timeout_s)
                for p in partitions
            }
            starts = self._by_time("startingTimestamp", partitions, marks, consumer)
            ends = self._by_time("endingTimestamp", partitions, marks, consumer)
        finally:
            consumer.close()
        try:
            start_spec = parse_offsets(self.options.get("startingOffsets"), "earliest", "startingOffsets")
            end_spec = parse_offsets(self.options.get("endingOffsets"), "latest", "endingOffsets")
            bounds = {}
            for p in partitions:
                low, high = marks[p]
                start = starts[p] if starts else resolve_offset(start_spec, p, low, high, "startingOffsets")
                end = ends[p] if ends else resolve_offset(end_spec, p, low, high, "endingOffsets")
                bounds[p] = (start, max(start, end))
        except OffsetSpecError as exc:
            raise UsageSourceError(f"{SOURCE_NAME}: {exc}") from None
        return bounds

    def _by_time(
        self, option: str, partitions: list[int], marks: dict[int, tuple[int, int]], consumer: Consumer
    ) -> dict[int, int]:
        from confluent_kafka import TopicPartition

        raw = self.options.get(option)
        if raw is None:
            return {}
        stamp = _int_option(self.options, option, 0, 0)
        asked = [TopicPartition(self.topic, p, stamp) for p in partitions]
        found = consumer.offsets_for_times(asked, timeout=self.timeout_s)
        # -1: no record at or after the time: the partition's end.
        return {tp.partition: tp.offset if tp.offset >= 0 else marks[tp.partition][1] for tp in found}

    # -- on the executors --------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[tuple[object, ...]]:
        if not isinstance(partition, OffsetSlice):
            return  # nothing to read: Spark gives one empty partition when partitions() planned none
        yield from read_slice(partition.offsets, self.config, self.timeout_s, self.skip_bad)


def read_slice(
    offsets: OffsetRange, config: Mapping[str, str], timeout_s: float, skip_bad: bool = False
) -> Iterator[tuple[object, ...]]:
    """Every record of `offsets`, once, as usage-table rows, copies left out; stops at the slice's end."""
    from confluent_kafka import KafkaError, TopicPartition

    if offsets.size == 0:
        return
    topic, partition, start, end = offsets.topic, offsets.partition, offsets.start, offsets.end
    recent = RecentMessages()
    copies = 0
    consumer = _consumer(config)
    try:
        # From the messages a copy may repeat (an offset before the log's start resets to its start).
        consumer.assign([TopicPartition(topic, partition, max(0, start - DEFAULT_REMEMBERED))])
        idle_polls = 0
        max_idle_polls = max(1, int(timeout_s / 0.5))
        done = False
        while not done:
            messages = consumer.consume(_BATCH, 0.5)
            if not messages:
                idle_polls += 1
                if idle_polls >= max_idle_polls:
                    raise UsageSourceError(
                        f"{SOURCE_NAME}: {topic}[{partition}] gave nothing for {timeout_s:g} s while "
                        f"reading offsets {start}..{end}"
                    )
                continue
            idle_polls = 0
            for message in messages:
                error = message.error()
                offset = message.offset()  # None only for an error that is not about a partition
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        # The log ends at or before the slice's end (e.g. control records close it).
                        if offset is not None and offset >= end:
                            done = True
                            break
                        continue
                    raise UsageSourceError(f"{SOURCE_NAME}: {topic}[{partition}]: {error.str()}")
                assert offset is not None  # a record has one
                if offset >= end:
                    done = True
                    break
                value = message.value()
                if value is not None and recent.repeated(partition, value):
                    copies += offset >= start
                    continue
                if offset < start:
                    continue  # read only to be remembered
                where = f"topic {topic} partition {partition} offset {offset}"
                try:
                    yield from message_rows(value, where, kafka_partition=partition, kafka_offset=offset)
                except UsageRecordError as exc:
                    if not skip_bad:
                        raise UsageSourceError(f"{SOURCE_NAME}: {exc}") from None
                    print(f"sluice-usage: skipped {exc}", file=sys.stderr)
                if offset + 1 >= end:
                    done = True
                    break
    finally:
        consumer.close()
    if copies:
        print(
            f"sluice-usage: {topic}[{partition}]: left out {copies} copies of messages read before",
            file=sys.stderr,
        )


class UsageSource(DataSource):
    """The data source Spark finds under the name `sluice-usage` (see `register`)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return USAGE_DDL

    def reader(self, schema: StructType) -> UsageReader:
        return UsageReader(self.options)


def register(spark: SparkSession) -> None:
    spark.dataSource.register(UsageSource)
