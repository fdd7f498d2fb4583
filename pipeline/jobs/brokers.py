"""The report's brokers: each broker's produce and fetch rate over time, its top topics, and how many of
the bytes name no broker.

Topic rows of version-2 usage records name the broker their bytes went to or came from
(docs/usage-records.md); a row names none where the proxy could not tell (a bootstrap connection whose
address is no broker's), and version-1 records name none at all. Everything here is one aggregation over
the topic rows, with the grouping sets (broker, time), (broker, topic) and (broker), so the rows are read
once; the three small results are split from it. Instances, entities and (for the rates) topics add up.

A broker's rate in one chart unit is its bytes in the unit over the unit's seconds within the records'
span (the first and last units are clipped to it): the mean over the unit, time without traffic to the
broker counting as zero. Shares are of all topic bytes, those naming no broker included, so a kind's
shares add up to 100 % with the no-broker row.

Tables (CSV, under `<out>/report/`): broker_over_time (broker, time, bytes, rates), broker_summary (one
row per broker and one with `broker` empty for the bytes naming none: bytes, shares, peak unit rates),
broker_top_topics (each broker's `top` topics by bytes, with their share of the broker's bytes).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from ..output.tables import write_csv_df
from .intervals import bucket_start, single_row

KINDS = ("produce", "fetch")


def _summed(column: str) -> Column:
    return F.coalesce(F.sum(column), F.lit(0)).cast("long").alias(column)


def write_broker_tables(
    usage: DataFrame,
    directory: str,
    bucket: int,
    unit: tuple[str, int],
    span_ms: tuple[int, int],
    top: int,
) -> dict[str, str]:
    """Write the three tables for the charts' (unit, its seconds) over the records' span [first, end), in
    epoch milliseconds."""
    (name, seconds), (first_ms, end_ms) = unit, span_ms
    unit_start = F.unix_millis(F.date_trunc(name, F.timestamp_millis(bucket_start(bucket))))
    grouped = (
        usage.where(F.col("topic").isNotNull())
        .select("broker", "topic", unit_start.alias("time_ms"), "produce_bytes", "fetch_bytes")
        .groupingSets([["broker", "time_ms"], ["broker", "topic"], ["broker"]], "broker", "time_ms", "topic")
        .agg(
            _summed("produce_bytes"),
            _summed("fetch_bytes"),
            F.grouping("time_ms").alias("all_times"),
            F.grouping("topic").alias("all_topics"),
        )
        .persist()
    )
    named = F.col("broker").isNotNull()
    per_time = (F.col("all_times") == 0) & named
    per_topic = (F.col("all_topics") == 0) & named
    whole = (F.col("all_times") == 1) & (F.col("all_topics") == 1)
    written: dict[str, str] = {}

    # Units are seconds, minutes, hours or UTC days: each as long as `seconds`.
    unit_end = F.col("time_ms") + seconds * 1000
    covered_s = (F.least(unit_end, F.lit(end_ms)) - F.greatest("time_ms", F.lit(first_ms))) / 1000.0
    over_time = grouped.where(per_time).select(
        "broker",
        F.timestamp_millis("time_ms").alias("time"),
        covered_s.alias("seconds"),
        *[f"{kind}_bytes" for kind in KINDS],
        *[(F.col(f"{kind}_bytes") / covered_s).alias(f"{kind}_rate") for kind in KINDS],
    )
    written["broker_over_time"] = write_csv_df(
        over_time.orderBy("broker", "time"), directory, "broker_over_time"
    )

    totals = single_row(grouped.where(whole).agg(*[F.sum(f"{kind}_bytes") for kind in KINDS]))
    produce_total, fetch_total = (float(v or 0) for v in totals)
    peaks = over_time.groupBy("broker").agg(*[F.max(f"{kind}_rate").alias(f"{kind}_peak") for kind in KINDS])
    summary = (
        grouped.where(whole)
        .join(peaks, on="broker", how="left")
        .select(
            "broker",
            "produce_bytes",
            (F.col("produce_bytes") / F.lit(produce_total or 1.0)).alias("produce_share"),
            "produce_peak",
            "fetch_bytes",
            (F.col("fetch_bytes") / F.lit(fetch_total or 1.0)).alias("fetch_share"),
            "fetch_peak",
            (
                (F.col("produce_bytes") + F.col("fetch_bytes")) / F.lit((produce_total + fetch_total) or 1.0)
            ).alias("share"),
        )
        .orderBy(F.asc_nulls_last("broker"))
    )
    written["broker_summary"] = write_csv_df(summary, directory, "broker_summary")

    total = F.col("produce_bytes") + F.col("fetch_bytes")
    ranked = Window.partitionBy("broker").orderBy(total.desc(), "topic")
    top_topics = (
        grouped.where(per_topic)
        .select(
            "broker",
            "topic",
            "produce_bytes",
            "fetch_bytes",
            total.alias("total_bytes"),
            F.try_divide(total, F.sum(total).over(Window.partitionBy("broker"))).alias("share"),
            F.row_number().over(ranked).alias("rank"),
        )
        .where(F.col("rank") <= top)
        .orderBy("broker", "rank")
    )
    written["broker_top_topics"] = write_csv_df(top_topics, directory, "broker_top_topics")
    grouped.unpersist()
    return written
