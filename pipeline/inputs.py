"""Where the jobs' usage records come from: the usage topic, Parquet, or JSON lines, on any path Spark reads.

`--input` takes one of:

* `kafka://HOST:PORT[,HOST:PORT...]/TOPIC`: the topic, through the `sluice-usage` data source (client
  settings such as SASL go in as `kafka.*` options: `read_usage(..., options={...})`);
* a Parquet table (a directory or file) of the usage layout, as `sluice usage export` and
  `sluice pipeline synth` write it;
* JSON lines (`*.jsonl`, `*.json`, also gzipped), one message of the usage topic per line, exactly as
  the proxy published it (`sluice usage export --format jsonl`, `sluice pipeline synth --format jsonl`).

Paths are Spark paths: local, `hdfs://`, `s3a://`, ... whatever the session's Hadoop configuration reads.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from sluice.quota.usage_records import UsageRecordError

from .kafka_source import SOURCE_NAME
from .usage_table import (
    COLUMN_NAMES,
    LATER_COLUMNS,
    USAGE_COLUMNS,
    USAGE_DDL,
    UsageTableError,
    check_columns,
    check_schema_version,
    message_rows,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row, SparkSession

JSONL_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz", ".ndjson")


def parse_kafka_input(source: str) -> tuple[str, str]:
    """`kafka://a:9092,b:9092/topic` -> ("a:9092,b:9092", "topic")."""
    rest = source.removeprefix("kafka://")
    servers, _, topic = rest.partition("/")
    if not servers or not topic:
        raise UsageTableError(f"{source!r}: expected kafka://HOST:PORT[,HOST:PORT...]/TOPIC")
    return servers, topic


def input_format(source: str) -> str:
    """`kafka`, `jsonl` or `parquet`, from the input's name (a local directory is looked into)."""
    if source.startswith("kafka://"):
        return "kafka"
    if source.lower().endswith(JSONL_SUFFIXES):
        return "jsonl"
    if os.path.isdir(source):
        names = [n for n in os.listdir(source) if not n.startswith(("_", "."))]
        if names and all(n.lower().endswith(JSONL_SUFFIXES) for n in names):
            return "jsonl"
    return "parquet"


def read_usage(
    spark: SparkSession, source: str, fmt: str | None = None, options: Mapping[str, str] | None = None
) -> DataFrame:
    """The usage table (`usage_table.USAGE_COLUMNS`) from `source`; refuses what it cannot read exactly."""
    fmt = fmt or input_format(source)
    if fmt == "kafka":
        servers, topic = parse_kafka_input(source)
        reader = (
            spark.read.format(SOURCE_NAME).option("kafka.bootstrap.servers", servers).option("topic", topic)
        )
        for key, value in (options or {}).items():
            reader = reader.option(key, value)
        return reader.load()
    if fmt == "jsonl":
        return read_usage_jsonl(spark, source)
    if fmt == "parquet":
        return read_usage_parquet(spark, source)
    raise UsageTableError(f"unknown input format {fmt!r}: expected kafka, parquet or jsonl")


def read_usage_parquet(spark: SparkSession, path: str) -> DataFrame:
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    from .jobs.intervals import single_row

    try:
        table = spark.read.parquet(path)
    except AnalysisException as exc:
        raise UsageTableError(f"{path}: cannot read as Parquet: {exc.getMessage()}") from None
    check_columns(table.columns, path)
    newest = single_row(table.agg(F.max("schema_version")))[0]
    check_schema_version(newest, path)
    for name in LATER_COLUMNS - set(table.columns):
        table = table.withColumn(name, F.lit(None))
    return table.select(*[F.col(f"`{name}`").cast(kind).alias(name) for name, kind in USAGE_COLUMNS])


def _decode_lines(rows: Iterable[Row]) -> Iterator[tuple[object, ...]]:
    for row in rows:
        line = row.value
        if not line.strip():
            continue
        where = f"{row.file}: line {line[:60]!r}..."
        yield from message_rows(line.encode(), where)


def read_usage_jsonl(spark: SparkSession, path: str) -> DataFrame:
    from pyspark.sql import functions as F

    lines = spark.read.text(path).select("value", F.input_file_name().alias("file"))
    decoded = lines.rdd.mapPartitions(_decode_lines)
    return spark.createDataFrame(decoded, USAGE_DDL)


def write_usage_parquet(
    usage: DataFrame, path: str, mode: str = "overwrite", partition_by_day: bool = True
) -> None:
    """Write the usage table as Parquet (partitioned by UTC day, so history can be appended day by day)."""
    from pyspark.sql import functions as F

    table = usage.select(*COLUMN_NAMES)
    if partition_by_day:
        table = table.withColumn("day", F.to_date("interval_start"))
        table.write.mode(mode).partitionBy("day").parquet(path)
    else:
        table.write.mode(mode).parquet(path)


__all__ = ["UsageRecordError", "UsageTableError", "input_format", "read_usage", "write_usage_parquet"]
