"""`sluice pipeline synth`: usage records with known answers, made by Spark itself (any size, no Python loop).

The model, every quantity a closed form of the entity k (0..E-1) and the interval i, so a test can
compute what each job must find:

* produce demand of entity k: `2000 x (E - k)` B/s; fetch: that times `k mod 3` (0, 1 or 2 readers);
* x 2 in the UTC hours 09:00-17:59 (the daily profile), x (1 + growth% x day) (the trend the forecast
  must find), x (1 + jitter% x ((7919 k + 104729 i) mod 201 - 100) / 100) (deterministic noise);
* entity 0 ("the hot one") runs under a recorded producer_byte_rate of 1.5 x its base: when its demand
  is above, the record holds what a quota lets through and the throttle time that took
  (`round(excess / quota x 1000)` ms), so its recorded traffic understates its demand, as the real
  records of a throttled client do;
* entity k talks to topic `topic-(k mod T)` through instance `synth-(k mod I)`; users are `team-(k mod 4)`
  except every fourth, which is ANONYMOUS (client-id quotas); client-ids `app-kkk`;
* leadership is skewed, as it is when one broker degrades: of B brokers (node ids 1..B), broker 1 leads
  half of every topic's partitions, so a topic row's bytes are two rows, half (rounded up) through broker 1
  and half (rounded down) through broker `2 + t mod (B - 1)` for topic t; with one broker, all through it.
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sluice.quota.usage_records import VERSION

if TYPE_CHECKING:  # PySpark is imported when the table is made
    from pyspark.sql import Column, DataFrame, SparkSession

# A Monday, so days of the week line up with the dates.
DEFAULT_START_MS = int(datetime.datetime(2026, 3, 2, tzinfo=datetime.UTC).timestamp() * 1000)
BUSY_HOURS = (9, 18)  # [from, to) UTC
HOT_QUOTA_FACTOR = 1.5
HOT_BROKER = 1


@dataclass(frozen=True, slots=True)
class SynthSpec:
    entities: int = 20
    duration_s: int = 7 * 86_400
    interval_s: int = 60
    start_ms: int = DEFAULT_START_MS
    growth_pct_per_day: float = 1.0
    jitter_pct: float = 5.0
    topics: int = 5
    instances: int = 1
    brokers: int = 3

    def __post_init__(self) -> None:
        for name in ("entities", "duration_s", "interval_s", "topics", "instances", "brokers"):
            if getattr(self, name) < 1:
                raise ValueError(f"synth: {name} must be at least 1, got {getattr(self, name)}")
        if self.duration_s % self.interval_s:
            raise ValueError("synth: the duration must be a whole number of intervals")

    @property
    def intervals(self) -> int:
        return self.duration_s // self.interval_s

    @property
    def rows(self) -> int:
        """Entity rows; each has its topic's rows, one per broker (`leaders`), beside it."""
        return self.intervals * self.entities

    @property
    def table_rows(self) -> int:
        return self.rows * (1 + len(self.leaders(0)))

    def leaders(self, t: int) -> tuple[int, ...]:
        """The brokers topic t's bytes go through: the hot one first (the odd byte), then the other."""
        return (HOT_BROKER,) if self.brokers == 1 else (HOT_BROKER, 2 + t % (self.brokers - 1))

    def produce_base(self, k: int) -> int:
        return 2000 * (self.entities - k)

    def fetch_base(self, k: int) -> int:
        return self.produce_base(k) * (k % 3)

    def hot_quota(self) -> float:
        return HOT_QUOTA_FACTOR * self.produce_base(0)

    def factor(self, k: int, i: int) -> float:
        """The demand multiplier of entity k in interval i (profile x trend x noise), as Spark computes it."""
        t = i * self.interval_s
        day = t // 86_400
        hour = (t % 86_400) // 3600
        busy = 2.0 if BUSY_HOURS[0] <= hour < BUSY_HOURS[1] else 1.0
        noise = 1.0 + self.jitter_pct / 100.0 * (((7919 * k + 104729 * i) % 201) - 100) / 100.0
        return busy * (1.0 + self.growth_pct_per_day / 100.0 * day) * noise


def synth_usage(spark: SparkSession, spec: SynthSpec, partitions: int | None = None) -> DataFrame:
    """The generated usage table (usage_table layout): per interval, an entity row and its topic rows."""
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    e = spec.entities
    ids = spark.range(0, spec.rows, 1, partitions or spark.sparkContext.defaultParallelism)
    keyed = ids.select(F.expr(f"id % {e}").alias("k"), F.expr(f"id div {e}").alias("i"))
    k, i = F.col("k"), F.col("i")
    hour = F.expr(f"(i * {spec.interval_s}) % 86400 div 3600")
    busy = F.when((hour >= BUSY_HOURS[0]) & (hour < BUSY_HOURS[1]), F.lit(2.0)).otherwise(F.lit(1.0))
    trend = 1.0 + spec.growth_pct_per_day / 100.0 * F.expr(f"(i * {spec.interval_s}) div 86400")
    noise = 1.0 + spec.jitter_pct / 100.0 * (((k * 7919 + i * 104729) % 201) - 100) / 100.0
    factor = busy * trend * noise
    produce_base = (F.lit(e) - k) * 2000
    quota = F.lit(spec.hot_quota())
    allowed = F.floor(quota * spec.interval_s).cast("long")
    base = keyed.select(
        k,
        i,
        F.floor(produce_base * factor * spec.interval_s).cast("long").alias("demand"),
        F.floor(produce_base * (k % 3) * factor * spec.interval_s).cast("long").alias("fetch_bytes"),
    )
    base = base.withColumn(
        "produce_bytes",
        F.when((k == 0) & (F.col("demand") > allowed), allowed).otherwise(F.col("demand")),
    )
    excess_ms = F.round((F.col("demand") - F.col("produce_bytes")) / quota * 1000).cast("long")
    base = base.select(
        "*",
        (F.lit(spec.start_ms) + F.col("i") * (spec.interval_s * 1000)).alias("interval_start_ms"),
        F.when(F.col("k") % 4 == 3, F.lit("ANONYMOUS"))
        .otherwise(F.concat(F.lit("team-"), (F.col("k") % 4).cast("string")))
        .alias("user"),
        F.format_string("app-%03d", F.col("k")).alias("client_id"),
        F.concat(F.lit("topic-"), (F.col("k") % spec.topics).cast("string")).alias("topic_name"),
        F.concat(F.lit("synth-"), (F.col("k") % spec.instances).cast("string")).alias("instance"),
        F.map_filter(
            F.create_map(
                F.lit("Produce"),
                F.when(F.col("produce_bytes") > 0, F.lit(spec.interval_s * 10)).otherwise(0),
                F.lit("Fetch"),
                F.when(F.col("fetch_bytes") > 0, F.lit(spec.interval_s * 10)).otherwise(0),
            ).cast("map<string,bigint>"),
            lambda _, v: v != 0,
        ).alias("requests"),
        F.map_filter(
            F.create_map(F.lit("Produce"), F.when(F.col("k") == 0, excess_ms).otherwise(0)),
            lambda _, v: v != 0,
        ).alias("throttle_time_ms"),
        F.when(F.col("k") == 0, F.create_map(F.lit("producer_byte_rate"), quota))
        .otherwise(F.create_map().cast("map<string,double>"))
        .alias("quotas"),
    )
    throttle_count = F.map_filter(
        F.create_map(
            F.lit("Produce"), F.when(F.size("throttle_time_ms") > 0, F.lit(spec.interval_s * 10)).otherwise(0)
        ).cast("map<string,bigint>"),
        lambda _, v: v != 0,
    )
    empty_counts = F.create_map().cast("map<string,bigint>")
    common: list[str | Column] = [
        F.lit(VERSION).alias("schema_version"),
        "instance",
        F.timestamp_millis("interval_start_ms").alias("interval_start"),
        "interval_start_ms",
        F.lit(spec.interval_s * 1000).cast("long").alias("interval_ms"),
        "user",
        "client_id",
    ]
    tail = [F.lit(None).cast("int").alias("kafka_partition"), F.lit(None).cast("long").alias("kafka_offset")]
    entity_rows = base.select(
        *common,
        F.lit(None).cast("string").alias("topic"),
        F.lit(None).cast("int").alias("broker"),
        "produce_bytes",
        "fetch_bytes",
        F.col("requests").cast("map<string,bigint>").alias("requests"),
        F.col("throttle_time_ms").cast("map<string,bigint>").alias("throttle_time_ms"),
        throttle_count.alias("throttle_count"),
        F.lit(0).cast("long").alias("partition_mutations"),
        F.lit(spec.interval_s * 1_000_000).cast("long").alias("cpu_time_ns"),
        "quotas",
        *tail,
    )
    topic = F.col("k") % spec.topics
    # (broker, share of the topic row's bytes): the hot broker takes the odd byte.
    through: list[tuple[Column, Callable[[str], Column]]]
    if spec.brokers == 1:
        through = [(F.lit(HOT_BROKER), lambda c: F.col(c))]
    else:
        through = [
            (F.lit(HOT_BROKER), lambda c: F.col(c) - F.expr(f"{c} div 2")),
            (F.lit(2) + topic % (spec.brokers - 1), lambda c: F.expr(f"{c} div 2")),
        ]
    topic_rows = [
        base.select(
            *common,
            F.col("topic_name").alias("topic"),
            broker.cast("int").alias("broker"),
            share("produce_bytes").cast("long").alias("produce_bytes"),
            share("fetch_bytes").cast("long").alias("fetch_bytes"),
            empty_counts.alias("requests"),
            empty_counts.alias("throttle_time_ms"),
            empty_counts.alias("throttle_count"),
            F.lit(0).cast("long").alias("partition_mutations"),
            F.lit(0).cast("long").alias("cpu_time_ns"),
            F.create_map().cast("map<string,double>").alias("quotas"),
            *tail,
        )
        for broker, share in through
    ]
    return functools.reduce(DataFrame.unionByName, topic_rows, entity_rows)
