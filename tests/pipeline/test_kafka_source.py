"""The `sluice-usage` data source against the test broker: every record once, in parallel, refusals."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from confluent_kafka import Producer
from mock_cluster_process import MockCluster
from pyspark.sql import functions as F

from sluice.pipeline.jobs.synth import SynthSpec, synth_usage
from sluice.pipeline.kafka_offsets import plan_ranges
from sluice.pipeline.usage_export import export_usage, usage_lines
from sluice.quota.usage_records import VERSION, UsageBatch, UsageRow, encode_batch

TOPIC, BAD_TOPIC, COPIES_TOPIC, PARTITIONS = "_sluice_usage", "usage-with-bad", "usage-with-copies", 4
SPEC = SynthSpec(entities=5, duration_s=300, interval_s=1, instances=3, jitter_pct=3)
KEY = [
    "interval_start_ms",
    "instance",
    "user",
    "client_id",
    "topic",
    "broker",
    "produce_bytes",
    "fetch_bytes",
]


@pytest.fixture(scope="module")
def cluster():
    with MockCluster(brokers=3, topics={TOPIC: PARTITIONS, BAD_TOPIC: 1, COPIES_TOPIC: 1}) as c:
        yield c


def produce_lines(bootstrap: str, topic: str, values: list[bytes], partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for index, value in enumerate(values):
        producer.produce(topic, value=value, key=b"synth", partition=index % partitions)
    assert producer.flush(30) == 0


@pytest.fixture(scope="module")
def published(spark, cluster):
    """`sluice pipeline synth`'s records, one Kafka message per instance and interval, on 4 partitions."""
    usage = synth_usage(spark, SPEC)
    lines = usage_lines(usage).collect()
    produce_lines(cluster.bootstrap, TOPIC, [line.encode() for line in lines], PARTITIONS)
    return usage, len(lines)


def read(spark, cluster, topic=TOPIC, **options):
    reader = spark.read.format("sluice-usage").option("kafka.bootstrap.servers", cluster.bootstrap)
    reader = reader.option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def test_every_record_is_read_once_by_parallel_offset_slices(spark, cluster, published) -> None:
    usage, messages = published
    per_partition = messages // PARTITIONS  # produced round-robin
    frame = read(spark, cluster, maxRecordsPerPartition=40)
    expected_slices = plan_ranges({p: (0, per_partition) for p in range(PARTITIONS)}, TOPIC, 40)
    assert frame.rdd.getNumPartitions() == len(expected_slices) > PARTITIONS

    rows = frame.withColumn("slice", F.spark_partition_id()).collect()
    offsets = Counter((r.kafka_partition, r.kafka_offset) for r in rows)
    assert len(offsets) == messages  # every message, once (each gives several rows)
    # Each Spark partition read one slice: one Kafka partition, a contiguous run of offsets.
    by_slice: dict[int, set] = {}
    for r in rows:
        by_slice.setdefault(r.slice, set()).add((r.kafka_partition, r.kafka_offset))
    for members in by_slice.values():
        assert len({p for p, _ in members}) == 1
        offs = sorted(o for _, o in members)
        assert offs == list(range(offs[0], offs[-1] + 1)) and len(offs) <= 40
    # And the rows are the generated ones, no more, no fewer.
    assert Counter(tuple(r[k] for k in KEY) for r in rows) == Counter(
        tuple(r[k] for k in KEY) for r in usage.select(*KEY).collect()
    )


def test_min_partitions_and_offset_ranges(spark, cluster, published) -> None:
    assert read(spark, cluster, minPartitions=12).rdd.getNumPartitions() >= 12
    some = read(
        spark,
        cluster,
        startingOffsets=json.dumps({"0": 10}),
        endingOffsets=json.dumps({"0": 20, "1": 0, "2": 0, "3": 0}),
    )
    offsets = {
        (r.kafka_partition, r.kafka_offset) for r in some.select("kafka_partition", "kafka_offset").collect()
    }
    assert offsets == {(0, o) for o in range(10, 20)}


def _batch(version: int = 1, interval: int = 0, produce_bytes: int = 5) -> bytes:
    """One instance's usage message for its `interval`-th second."""
    start_ms = 1_772_409_600_000 + interval * 1000
    batch = UsageBatch("i-1", start_ms, 1000, (UsageRow("ANONYMOUS", "c", produce_bytes=produce_bytes),))
    document = json.loads(encode_batch(batch))
    document["version"] = version
    return json.dumps(document).encode()


def test_a_record_of_a_newer_version_or_not_a_record_is_refused_naming_where(spark, cluster) -> None:
    newer = VERSION + 1
    values = [_batch(), _batch(newer, interval=1), b"not json", _batch(interval=3)]
    produce_lines(cluster.bootstrap, BAD_TOPIC, values, 1)
    with pytest.raises(
        Exception, match=rf"partition 0 offset 1: usage record version {newer} was written by a newer"
    ):
        read(spark, cluster, topic=BAD_TOPIC).collect()
    skipped = read(spark, cluster, topic=BAD_TOPIC, badRecords="skip").collect()
    assert [r.kafka_offset for r in skipped] == [0, 3]


def test_a_message_written_twice_is_read_once_wherever_a_slice_or_a_read_begins(spark, cluster) -> None:
    """A publisher's retry writes a message again after others (docs/usage-records.md); the copy gives no
    rows, also when it falls in a later slice than its original or past the offset a read starts from.
    Two messages of one interval that differ (a split batch's parts) are both kept."""
    originals = [_batch(interval=i) for i in range(30)]
    values = originals[:12] + originals[3:6] + originals[12:] + [originals[29]]
    values.append(_batch(interval=29, produce_bytes=7))  # the same interval, other rows: not a copy
    produce_lines(cluster.bootstrap, COPIES_TOPIC, values, 1)

    def admitted(**options: object) -> Counter:
        rows = read(spark, cluster, topic=COPIES_TOPIC, **options).collect()
        return Counter((r.interval_start_ms - 1_772_409_600_000) // 1000 for r in rows)

    once = Counter({i: 1 for i in range(29)} | {29: 2})
    assert admitted() == once
    assert admitted(maxRecordsPerPartition=4) == once  # the copies at 12..14 in slices after their originals
    # From offset 13, the middle of the copies: what it reads is each interval once, no copy counted.
    assert admitted(startingOffsets='{"0": 13}') == Counter({i: 1 for i in range(12, 29)} | {29: 2})


def test_a_missing_topic_and_bad_options_are_named(spark, cluster) -> None:
    with pytest.raises(Exception, match=r"topic 'nope': no such topic|Unknown topic"):
        read(spark, cluster, topic="nope").collect()
    with pytest.raises(Exception, match="startingOffsets"):
        read(spark, cluster, startingOffsets="yesterday").collect()


def test_export_writes_history_and_resumes_where_it_stopped(spark, cluster, published, tmp_path) -> None:
    from sluice.pipeline.inputs import read_usage

    usage, messages = published
    options = {"kafka.bootstrap.servers": cluster.bootstrap, "topic": TOPIC}
    out = str(tmp_path / "history")
    first = export_usage(spark, options, out, "parquet", resume=True)
    assert first["messages"] == messages
    again = export_usage(spark, options, out, "parquet", resume=True)
    assert again["messages"] == 0  # nothing new since
    history = read_usage(spark, out)
    assert history.count() == usage.count()

    lines = str(tmp_path / "usage.jsonl")
    export_usage(spark, options, lines, "jsonl")
    from_lines = read_usage(spark, lines)
    assert Counter(tuple(r) for r in from_lines.select(*KEY).collect()) == Counter(
        tuple(r) for r in usage.select(*KEY).collect()
    )
