"""The usage table reduced to what the jobs count: per entity (or topic, or the cluster) per interval.

Intervals are aligned to one bucket for the whole input, the longest interval length found (normally
every instance publishes every 1000 ms, or synth writes one length), so rows of several instances for
the same entity and interval add up: a fleet's entity is one entity. A rate is the bucket's bytes over
its length, in bytes per second.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F

ENTITY = ("user", "client_id")
QUOTA_TYPES = ("Produce", "Fetch", "Request", "ControllerMutation")


class EmptyInput(ValueError):
    """The input holds no usage rows: nothing to report on."""


def single_row(aggregate: DataFrame) -> Row:
    """The row of an aggregate over a whole table (`df.agg(...)`), which Spark gives even for no rows."""
    row = aggregate.first()
    if row is None:
        raise ValueError("an aggregate over a whole table has one row")
    return row


def bucket_ms(usage: DataFrame) -> int:
    """The bucket length: the longest interval in the input, rounded up to whole seconds."""
    longest = single_row(usage.agg(F.max("interval_ms")))[0]
    if longest is None:
        raise EmptyInput("the input holds no usage records")
    return max(1000, -(-int(longest) // 1000) * 1000)


def bucket_start(bucket: int) -> Column:
    """The start of the row's bucket, epoch milliseconds."""
    return (F.floor(F.col("interval_start_ms") / bucket) * bucket).cast("long")


def throttle_of(kind: str) -> Column:
    return F.coalesce(F.col("throttle_time_ms")[kind], F.lit(0)).cast("long")


def entity_intervals(usage: DataFrame, bucket: int) -> DataFrame:
    """user, client_id, bucket_ms, produce_bytes, fetch_bytes, <type>_throttle_ms..., quota columns."""
    entity_rows = usage.where(F.col("topic").isNull())
    return (
        entity_rows.groupBy(*ENTITY, bucket_start(bucket).alias("bucket_ms"))
        .agg(
            F.sum("produce_bytes").alias("produce_bytes"),
            F.sum("fetch_bytes").alias("fetch_bytes"),
            *[F.sum(throttle_of(kind)).alias(f"{kind.lower()}_throttle_ms") for kind in QUOTA_TYPES],
            F.max(F.col("quotas")["producer_byte_rate"]).alias("recorded_producer_byte_rate"),
            F.max(F.col("quotas")["consumer_byte_rate"]).alias("recorded_consumer_byte_rate"),
        )
        .withColumn("throttle_ms", sum((F.col(f"{k.lower()}_throttle_ms") for k in QUOTA_TYPES), F.lit(0)))
        .withColumn("produce_rate", F.col("produce_bytes") * 1000.0 / bucket)
        .withColumn("fetch_rate", F.col("fetch_bytes") * 1000.0 / bucket)
        .withColumn("ts", F.timestamp_millis("bucket_ms"))
    )


def topic_intervals(usage: DataFrame, bucket: int) -> DataFrame:
    topic_rows = usage.where(F.col("topic").isNotNull())
    return (
        topic_rows.groupBy("topic", bucket_start(bucket).alias("bucket_ms"))
        .agg(F.sum("produce_bytes").alias("produce_bytes"), F.sum("fetch_bytes").alias("fetch_bytes"))
        .withColumn("produce_rate", F.col("produce_bytes") * 1000.0 / bucket)
        .withColumn("fetch_rate", F.col("fetch_bytes") * 1000.0 / bucket)
        .withColumn("ts", F.timestamp_millis("bucket_ms"))
    )


def cluster_intervals(entities: DataFrame, bucket: int) -> DataFrame:
    """The whole cluster's traffic per bucket (through Sluice), from the entity rows."""
    return (
        entities.groupBy("bucket_ms", "ts")
        .agg(
            F.sum("produce_bytes").alias("produce_bytes"),
            F.sum("fetch_bytes").alias("fetch_bytes"),
            F.countDistinct(*ENTITY).alias("active_entities"),
            F.sum("throttle_ms").alias("throttle_ms"),
        )
        .withColumn("produce_rate", F.col("produce_bytes") * 1000.0 / bucket)
        .withColumn("fetch_rate", F.col("fetch_bytes") * 1000.0 / bucket)
        .withColumn("total_rate", F.col("produce_rate") + F.col("fetch_rate"))
    )


def join_on_entity(
    left: DataFrame, right: DataFrame, how: str = "inner", extra: tuple[str, ...] = ()
) -> DataFrame:
    """Join on (user, client_id) and `extra` columns, a null client-id matching a null one (Kafka allows
    a null client-id; a plain equi-join would drop those rows)."""
    keys = (*ENTITY, *extra)
    renamed = right.select(*[F.col(c).alias(f"_r_{c}") if c in keys else F.col(c) for c in right.columns])
    condition = None
    for key in keys:
        term = F.col(key).eqNullSafe(F.col(f"_r_{key}"))
        condition = term if condition is None else condition & term
    joined = left.join(renamed, condition, how)
    if how in ("left_semi", "left_anti"):
        return joined
    return joined.drop(*[f"_r_{key}" for key in keys])
