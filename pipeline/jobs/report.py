"""`sluice pipeline report`: who uses what and when, who is throttled, how often and for how long.

Rates are per interval bucket (`intervals.py`): the distribution of an entity's per-second rate (mean,
p50, p95, p99, max) is taken over the buckets in which it was active (had a usage row), by hour and by
UTC day; `active_s` says how much time that was. Throttled share = throttle time given / active time
(docs/usage-records.md), by quota type and in all. Percentiles are Spark's `percentile_approx` with
accuracy 10,000 (rank error at most 1/10,000 of the rows).

Tables (under `<out>/report/`): entity_hourly, entity_daily, topic_hourly, topic_daily (Parquet);
entity_summary, topic_summary, top_talkers, daily_profile, cluster_hourly, cluster_daily,
top_entities_hourly (CSV, small); for the charts, at the resolution `chart_resolution` chose from the
span (and says in chart_resolution.csv): cluster_over_time, top_entities_over_time, throttle_heatmap; and
each broker's load (`brokers.py`): broker_over_time, broker_summary, broker_top_topics.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from ..output.tables import job_dir, write_csv_df, write_csv_rows, write_parquet
from ..progress import Progress
from .brokers import write_broker_tables
from .intervals import (
    ENTITY,
    QUOTA_TYPES,
    bucket_ms,
    cluster_intervals,
    entity_intervals,
    single_row,
    topic_intervals,
)

# The charts' time resolution: the finest unit, no finer than the records' interval, that draws the span in
# at most MAX_POINTS points (seconds for up to an hour of records, minutes up to 2.5 days, hours up to five
# months, days beyond).
RESOLUTIONS = (("second", 1), ("minute", 60), ("hour", 3600), ("day", 86_400))
MAX_POINTS = 3600
PERCENTILES = (0.5, 0.95, 0.99)
ACCURACY = 10_000


@dataclass(frozen=True, slots=True)
class ReportOptions:
    top: int = 20  # top talkers listed
    chart_entities: int = 8  # entities drawn in the rates-over-time chart
    heatmap_entities: int = 20  # rows of the throttle heat map
    broker_topics: int = 5  # topics listed per broker


def _distribution(rate: str) -> list[Column]:
    name = rate.removesuffix("_rate")
    quantiles = F.percentile_approx(rate, list(PERCENTILES), ACCURACY)
    return [
        F.avg(rate).alias(f"{name}_mean"),
        quantiles[0].alias(f"{name}_p50"),
        quantiles[1].alias(f"{name}_p95"),
        quantiles[2].alias(f"{name}_p99"),
        F.max(rate).alias(f"{name}_max"),
    ]


def _usage_stats(bucket: int, throttles: bool = True) -> list[Column]:
    stats = [
        F.count(F.lit(1)).alias("intervals"),
        (F.count(F.lit(1)) * (bucket / 1000.0)).alias("active_s"),
        F.sum("produce_bytes").alias("produce_bytes"),
        F.sum("fetch_bytes").alias("fetch_bytes"),
        *_distribution("produce_rate"),
        *_distribution("fetch_rate"),
    ]
    if throttles:
        stats += [F.sum(f"{k.lower()}_throttle_ms").alias(f"{k.lower()}_throttle_ms") for k in QUOTA_TYPES]
        stats += [
            F.sum("throttle_ms").alias("throttle_ms"),
            (F.sum("throttle_ms") / (F.count(F.lit(1)) * float(bucket))).alias("throttled_share"),
            F.sum(F.when(F.col("throttle_ms") > 0, 1).otherwise(0)).alias("throttled_intervals"),
        ]
    return stats


def chart_resolution(span_s: float, interval_s: float) -> tuple[str, int]:
    """(unit, seconds) for charts of `span_s` seconds of records made every `interval_s` seconds."""
    for unit, seconds in RESOLUTIONS:
        if seconds >= interval_s and span_s / seconds <= MAX_POINTS:
            return unit, seconds
    return RESOLUTIONS[-1]


def run_report(
    spark: SparkSession,
    usage: DataFrame,
    out: str,
    options: ReportOptions | None = None,
    progress: Progress | None = None,
) -> dict[str, str]:
    """Write the report's tables under `<out>/report/`; returns table name -> path."""
    options = options or ReportOptions()
    progress = progress or Progress(quiet=True)
    directory = job_dir(out, "report")
    written: dict[str, str] = {}
    with progress.step("report: reading the usage records"):
        bucket = bucket_ms(usage)
        entities = entity_intervals(usage, bucket).persist()
        entities.count()
    topics = topic_intervals(usage, bucket)
    cluster = cluster_intervals(entities, bucket).persist()
    hour = F.date_trunc("hour", "ts").alias("hour")
    day = F.to_date("ts").alias("day")
    first, last, first_ms, last_ms = single_row(
        cluster.agg(F.min("ts"), F.max("ts"), F.min("bucket_ms"), F.max("bucket_ms"))
    )
    span_s = (last - first).total_seconds() + bucket / 1000 if first is not None else 0.0
    unit, unit_s = chart_resolution(span_s, bucket / 1000)
    when = F.date_trunc(unit, "ts").alias("time")

    with progress.step("report: per entity and topic, by hour and day"):
        tables: list[tuple[str, DataFrame, list[str | Column], bool]] = [
            ("entity_hourly", entities, [*ENTITY, hour], True),
            ("entity_daily", entities, [*ENTITY, day], True),
            ("topic_hourly", topics, ["topic", hour], False),
            ("topic_daily", topics, ["topic", day], False),
        ]
        for name, frame, keys, throttles in tables:
            table = frame.groupBy(*keys).agg(*_usage_stats(bucket, throttles))
            written[name] = write_parquet(table, directory, name)

    with progress.step("report: summaries, top talkers, cluster totals"):
        totals = single_row(entities.agg(F.sum("produce_bytes"), F.sum("fetch_bytes")))
        produce_total, fetch_total = (float(v or 0) for v in totals)
        summary = (
            entities.groupBy(*ENTITY)
            .agg(
                *_usage_stats(bucket),
                F.max("recorded_producer_byte_rate").alias("recorded_producer_byte_rate"),
                F.max("recorded_consumer_byte_rate").alias("recorded_consumer_byte_rate"),
            )
            .withColumn("produce_share", F.col("produce_bytes") / F.lit(produce_total or 1.0))
            .withColumn("fetch_share", F.col("fetch_bytes") / F.lit(fetch_total or 1.0))
            .withColumn("total_bytes", F.col("produce_bytes") + F.col("fetch_bytes"))
            .withColumn("share", F.col("total_bytes") / F.lit((produce_total + fetch_total) or 1.0))
            .orderBy(F.desc("total_bytes"), *ENTITY)
        ).persist()
        written["entity_summary"] = write_csv_df(summary, directory, "entity_summary")
        top = summary.limit(options.top)
        written["top_talkers"] = write_csv_df(
            top.select(
                *ENTITY,
                "total_bytes",
                "share",
                "produce_bytes",
                "fetch_bytes",
                "produce_p99",
                "fetch_p99",
                "throttled_share",
            ),
            directory,
            "top_talkers",
        )
        topic_summary = (
            topics.groupBy("topic")
            .agg(*_usage_stats(bucket, throttles=False))
            .withColumn("produce_share", F.col("produce_bytes") / F.lit(produce_total or 1.0))
            .withColumn("fetch_share", F.col("fetch_bytes") / F.lit(fetch_total or 1.0))
            .orderBy(F.desc(F.col("produce_bytes") + F.col("fetch_bytes")), "topic")
        )
        written["topic_summary"] = write_csv_df(topic_summary, directory, "topic_summary")

        cluster_stats = [
            *_distribution("produce_rate"),
            *_distribution("fetch_rate"),
            F.max("total_rate").alias("total_max"),
            F.avg("total_rate").alias("total_mean"),
            F.sum("produce_bytes").alias("produce_bytes"),
            F.sum("fetch_bytes").alias("fetch_bytes"),
            F.max("active_entities").alias("active_entities"),
            F.sum("throttle_ms").alias("throttle_ms"),
        ]
        written["cluster_hourly"] = write_csv_df(
            cluster.groupBy(hour).agg(*cluster_stats).orderBy("hour"), directory, "cluster_hourly"
        )
        written["cluster_over_time"] = write_csv_df(
            cluster.groupBy(when).agg(*cluster_stats).orderBy("time"), directory, "cluster_over_time"
        )
        written["chart_resolution"] = write_csv_rows(
            directory,
            "chart_resolution",
            ["name", "value"],
            [
                {"name": "unit", "value": unit},
                {"name": "seconds", "value": unit_s},
                {"name": "first", "value": first.isoformat() if first else ""},
                {
                    "name": "last",
                    "value": (last + timedelta(milliseconds=bucket)).isoformat() if last else "",
                },
            ],
        )
        written["cluster_daily"] = write_csv_df(
            cluster.groupBy(day).agg(*cluster_stats).orderBy("day"), directory, "cluster_daily"
        )
        written["daily_profile"] = write_csv_df(
            cluster.groupBy(F.hour("ts").alias("hour_of_day"))
            .agg(*_distribution("produce_rate"), *_distribution("fetch_rate"))
            .orderBy("hour_of_day"),
            directory,
            "daily_profile",
        )

    with progress.step("report: chart data"):
        chart = summary.limit(options.chart_entities).select(*ENTITY)
        chosen = entities.join(chart, on=[*ENTITY], how="left_semi")
        for name, when_column, column in (
            ("top_entities_hourly", hour, "hour"),
            ("top_entities_over_time", when, "time"),
        ):
            written[name] = write_csv_df(
                chosen.groupBy(*ENTITY, when_column)
                .agg(F.avg("produce_rate").alias("produce_mean"), F.avg("fetch_rate").alias("fetch_mean"))
                .orderBy(*ENTITY, column),
                directory,
                name,
            )
        throttled = (
            summary.where(F.col("throttle_ms") > 0)
            .orderBy(F.desc("throttle_ms"), *ENTITY)
            .limit(options.heatmap_entities)
            .select(*ENTITY)
        )
        written["throttle_heatmap"] = write_csv_df(
            entities.join(throttled, on=[*ENTITY], how="left_semi")
            .groupBy(*ENTITY, when)
            .agg(
                F.sum("throttle_ms").alias("throttle_ms"),
                (F.sum("throttle_ms") / (F.count(F.lit(1)) * float(bucket))).alias("throttled_share"),
            )
            .orderBy(*ENTITY, "time"),
            directory,
            "throttle_heatmap",
        )
    if first_ms is not None:
        with progress.step("report: each broker's load"):
            span_ms = (first_ms, last_ms + bucket)
            written |= write_broker_tables(
                usage, directory, bucket, (unit, unit_s), span_ms, options.broker_topics
            )
    summary.unpersist()
    cluster.unpersist()
    entities.unpersist()
    return written
