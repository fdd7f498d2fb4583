"""`sluice usage export`: the usage topic written to files, for history longer than the topic keeps.

Parquet (the default) is the usage table, partitioned by UTC day and appended to, so a daily cron job
builds a history the jobs read with `--input PATH`. JSON lines are the topic's messages themselves, one
per line, re-encoded by the proxy's own codec (`encode_batch`): `sluice pipeline --input x.jsonl` reads
them back through `decode_batch`, and any other tool can too.

`--resume` continues where the previous export to the same place stopped: the end offsets of each run
are kept beside the data in `_sluice_export_offsets/` (a name Spark's readers skip), written only after
the data, so a failed run is simply run again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING

from sluice.quota.usage_records import UsageBatch, UsageRow, encode_batch

from .inputs import write_usage_parquet
from .kafka_source import SOURCE_NAME, UsageReader

if TYPE_CHECKING:
    from pyspark import RDD
    from pyspark.sql import DataFrame, Row, SparkSession

OFFSETS_DIR = "_sluice_export_offsets"


def _batch_line(key: tuple[str, int, int, int | None, int | None], rows: Iterable[Row]) -> tuple[int, str]:
    instance, start_ms, interval_ms = key[0], key[1], key[2]
    ordered = sorted(
        rows,
        key=lambda r: (
            r.topic is not None,
            r.user,
            r.client_id or "",
            r.topic or "",
            -1 if r.broker is None else r.broker,
        ),
    )
    usage_rows = tuple(
        UsageRow(
            user=r.user,
            client_id=r.client_id,
            topic=r.topic,
            produce_bytes=r.produce_bytes,
            fetch_bytes=r.fetch_bytes,
            requests=r.requests or {},
            throttle_time_ms=r.throttle_time_ms or {},
            throttle_count=r.throttle_count or {},
            partition_mutations=r.partition_mutations,
            cpu_time_ns=r.cpu_time_ns,
            quotas=r.quotas or {},
            broker=r.broker,
        )
        for r in ordered
    )
    return start_ms, encode_batch(UsageBatch(instance, start_ms, interval_ms, usage_rows)).decode()


def usage_lines(usage: DataFrame) -> RDD[str]:
    """The usage table as JSON lines: one line per original message (Kafka) or per instance and interval."""
    keyed = usage.rdd.keyBy(
        lambda r: (r.instance, r.interval_start_ms, r.interval_ms, r.kafka_partition, r.kafka_offset)
    )
    return keyed.groupByKey().map(lambda kv: _batch_line(kv[0], kv[1])).sortByKey().values()


def write_usage_jsonl(spark: SparkSession, usage: DataFrame, path: str, mode: str = "overwrite") -> None:
    lines = usage_lines(usage)
    spark.createDataFrame(lines.map(lambda line: (line,)), "value string").write.mode(mode).text(path)


def last_offsets(spark: SparkSession, out: str) -> str | None:
    """The end offsets the previous export to `out` recorded, as the data source's JSON; None if none."""
    from pyspark.errors import AnalysisException

    try:
        rows = spark.read.text(f"{out.rstrip('/')}/{OFFSETS_DIR}").collect()
    except AnalysisException:
        return None
    return rows[0].value if rows else None


def export_usage(
    spark: SparkSession, options: dict[str, str], out: str, fmt: str = "parquet", resume: bool = False
) -> dict[str, object]:
    """Read the topic as `options` say (the data source's), write it to `out`; returns what was read."""
    options = dict(options)
    if resume:
        previous = last_offsets(spark, out)
        if previous is not None:
            options["startingOffsets"] = previous
    # Fix the end offsets now, so what is recorded as done is exactly what was read.
    bounds = UsageReader(options).bounds()
    final = {str(partition): end for partition, (_, end) in bounds.items()}
    options["startingOffsets"] = json.dumps(
        {str(partition): start for partition, (start, _) in bounds.items()}
    )
    options["endingOffsets"] = json.dumps(final)
    options.pop("startingTimestamp", None)
    options.pop("endingTimestamp", None)
    usage = spark.read.format(SOURCE_NAME).options(**options).load()
    mode = "append" if resume else "overwrite"
    if fmt == "parquet":
        write_usage_parquet(usage, out, mode=mode)
    elif fmt == "jsonl":
        write_usage_jsonl(spark, usage, out, mode=mode)
    else:
        raise ValueError(f"--format must be parquet or jsonl, got {fmt!r}")
    spark.createDataFrame([(json.dumps(final),)], "value string").coalesce(1).write.mode("overwrite").text(
        f"{out.rstrip('/')}/{OFFSETS_DIR}"
    )
    return {"end_offsets": final, "messages": sum(end - start for start, end in bounds.values())}
