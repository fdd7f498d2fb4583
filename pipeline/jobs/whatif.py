"""`sluice pipeline whatif`: candidate quotas replayed against the recorded demand, on Spark.

The candidate file is Sluice's own configuration (a whole `sluice.yaml`, or just what goes under
`quota:`), read by Sluice's own parser (`sluice.config.quota_section`), so a file that passes here is a
file the proxy accepts. Entities that share a sensor under the candidates form one group; Spark replays
the groups in parallel (`groupBy(group).applyInPandas`), each through `replay.replay_group`.

Only the byte-rate quotas are replayed (producer_byte_rate, consumer_byte_rate): request_percentage is
charged the proxy's own CPU time, which a different quota would change, and mutation quotas concern
admin requests the records only count. They are listed as not replayed.

Recorded demand understates what an entity wanted while it was already throttled: those entities are
flagged (`demand_understated`), with the throttle time the records show, and the report draws their
throttled hours.

Tables (under `<out>/whatif/`): replay.parquet (everything the replay produced), hourly.parquet,
events.parquet (every throttle, with `events=True`), entities.csv (+ .parquet), before_after.csv,
summary.csv.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sluice.config.errors import ConfigError
from sluice.config.quota_section import parse_quota_section
from sluice.config.quota_settings import QuotaSettings
from sluice.config.sources import read_yaml_file
from sluice.quota import QuotaKey

from ..output.tables import job_dir, write_csv_df, write_csv_rows, write_parquet
from ..progress import Progress
from .intervals import ENTITY, bucket_ms, entity_intervals, join_on_entity, single_row
from .replay import ReplayOptions
from .replay_frame import REPLAY_SCHEMA, replay_function
from .sensor_groups import sensor_groups

NOT_REPLAYED = (QuotaKey.REQUEST_PERCENTAGE, QuotaKey.CONTROLLER_MUTATION_RATE)


@dataclass(frozen=True, slots=True)
class WhatifOptions:
    replay: ReplayOptions = field(default_factory=ReplayOptions)
    chart_entities: int = 6


def load_candidate_quotas(path: str) -> tuple[dict[object, object], QuotaSettings]:
    """The raw `quota:` mapping (what executors re-parse) and its validated settings; ConfigError if bad."""
    tree = read_yaml_file(path)
    raw = tree.get("quota", tree)
    settings = parse_quota_section(raw, "quota")
    if not settings.rules or not isinstance(raw, dict):  # rules come only from a mapping
        raise ConfigError(
            "quota.entities",
            raw.get("entities") if isinstance(raw, dict) else raw,
            "at least one candidate quota to replay",
        )
    return raw, settings


def not_replayed(settings: QuotaSettings) -> list[str]:
    """The candidate quotas the replay leaves out, in the file's words."""
    left = []
    for rule in settings.rules:
        for key in rule.values:
            if key in NOT_REPLAYED:
                left.append(f"{rule.entity} {key.value}")
    return left


def run_whatif(
    spark: SparkSession,
    usage: DataFrame,
    quotas_path: str,
    out: str,
    options: WhatifOptions | None = None,
    progress: Progress | None = None,
) -> dict[str, str]:
    options = options or WhatifOptions()
    progress = progress or Progress(quiet=True)
    raw, settings = load_candidate_quotas(quotas_path)
    directory = job_dir(out, "whatif")
    written: dict[str, str] = {}
    with progress.step("whatif: demand per entity"):
        bucket = bucket_ms(usage)
        entities = (
            entity_intervals(usage, bucket)
            .select(
                *ENTITY,
                "bucket_ms",
                "produce_bytes",
                "fetch_bytes",
                "produce_throttle_ms",
                "fetch_throttle_ms",
            )
            .persist()
        )
        keys = [(row.user, row.client_id) for row in entities.select(*ENTITY).distinct().collect()]
        groups = sensor_groups(keys, settings)
        first, last = single_row(entities.agg(F.min("bucket_ms"), F.max("bucket_ms")))
        span = (int(first), int(last) + bucket)
        group_table = spark.createDataFrame(
            [(user, client, group) for (user, client), group in groups.items()],
            "user string, client_id string, group string",
        )
    with progress.step(
        f"whatif: replaying {len(set(groups.values()))} sensor group(s) of {len(keys)} entities"
    ):
        demand = join_on_entity(entities, F.broadcast(group_table))
        replayed = demand.groupBy("group").applyInPandas(
            replay_function(raw, bucket, options.replay, span), REPLAY_SCHEMA
        )
        written["replay"] = write_parquet(replayed, directory, "replay")
    replay = spark.read.parquet(written["replay"])
    with progress.step("whatif: tables"):
        group_count = len(set(groups.values()))
        written.update(_tables(spark, replay, entities, directory, options, settings, bucket, group_count))
    entities.unpersist()
    return written


def _tables(
    spark: SparkSession,
    replay: DataFrame,
    entities: DataFrame,
    directory: str,
    options: WhatifOptions,
    settings: QuotaSettings,
    bucket: int,
    group_count: int,
) -> dict[str, str]:
    written: dict[str, str] = {}
    hours = replay.where(F.col("kind") == "hour")
    hourly = hours.select(
        "group",
        *ENTITY,
        "direction",
        F.timestamp_millis("at_ms").alias("hour"),
        "demand",
        "admitted",
        "delayed",
        "throttle_ms",
        "throttle_count",
        "throttled_seconds",
    )
    written["hourly"] = write_parquet(hourly, directory, "hourly")
    if options.replay.keep_events:
        events = replay.where(F.col("kind") == "event").select(
            *ENTITY, "direction", "at_ms", F.timestamp_millis("at_ms").alias("at"), "throttle_ms"
        )
        written["events"] = write_parquet(events, directory, "events")
    recorded = entities.groupBy(*ENTITY).agg(
        F.sum("produce_throttle_ms").alias("rec_produce"),
        F.sum("fetch_throttle_ms").alias("rec_fetch"),
        F.sum(F.when(F.col("produce_throttle_ms") > 0, 1).otherwise(0)).alias("rec_produce_intervals"),
        F.sum(F.when(F.col("fetch_throttle_ms") > 0, 1).otherwise(0)).alias("rec_fetch_intervals"),
        F.count(F.lit(1)).alias("active_intervals"),
    )
    summary = hours.groupBy("group", *ENTITY, "direction").agg(
        F.first("limited").alias("limited"),
        F.first("bound").alias("bound"),
        F.first("sensor").alias("sensor"),
        F.sum("demand").alias("demand_bytes"),
        F.sum("admitted").alias("admitted_bytes"),
        F.sum("delayed").alias("delayed_bytes"),
        F.first("backlog_end").alias("backlog_end_bytes"),
        F.first("max_backlog").alias("max_backlog_bytes"),
        (F.first("max_delay_ms") / 1000.0).alias("max_delay_s"),
        F.sum("throttle_ms").alias("throttle_ms"),
        F.sum("throttle_count").alias("throttle_count"),
        F.sum("throttled_seconds").alias("throttled_seconds"),
    )
    produce = F.col("direction") == "produce"
    rec_ms = F.when(produce, F.col("rec_produce")).otherwise(F.col("rec_fetch"))
    rec_n = F.when(produce, F.col("rec_produce_intervals")).otherwise(F.col("rec_fetch_intervals"))
    active_s = F.col("active_intervals") * (bucket / 1000.0)
    summary = (
        join_on_entity(summary, recorded, "left")
        .withColumn("recorded_throttle_ms", F.coalesce(rec_ms, F.lit(0)))
        .withColumn("recorded_throttled_share", F.coalesce(rec_n / F.col("active_intervals"), F.lit(0.0)))
        .withColumn("demand_understated", F.col("recorded_throttle_ms") > 0)
        .withColumn("throttled_share", F.col("throttled_seconds") / active_s)
        .drop("rec_produce", "rec_fetch", "rec_produce_intervals", "rec_fetch_intervals")
        .orderBy(F.desc("throttle_ms"), F.desc("demand_bytes"), *ENTITY, "direction")
    ).persist()
    written["entities_parquet"] = write_parquet(summary, directory, "entities")
    written["entities"] = write_csv_df(summary, directory, "entities")
    chart = (
        summary.where((F.col("throttle_ms") > 0) | F.col("demand_understated"))
        .select(*ENTITY, "direction")
        .limit(options.chart_entities)
    )
    recorded_hours = entities.groupBy(*ENTITY, F.floor(F.col("bucket_ms") / 3_600_000).alias("h")).agg(
        F.sum("produce_throttle_ms").alias("rec_produce"), F.sum("fetch_throttle_ms").alias("rec_fetch")
    )
    chosen = join_on_entity(hours, chart, "left_semi", extra=("direction",))
    before_after = (
        join_on_entity(
            chosen.withColumn("h", F.floor(F.col("at_ms") / 3_600_000)), recorded_hours, "left", extra=("h",)
        )
        .select(
            *ENTITY,
            "direction",
            F.timestamp_millis("at_ms").alias("hour"),
            "demand",
            "admitted",
            "throttle_ms",
            F.coalesce(F.when(produce, F.col("rec_produce")).otherwise(F.col("rec_fetch")), F.lit(0)).alias(
                "recorded_throttle_ms"
            ),
        )
        .orderBy(*ENTITY, "direction", "hour")
    )
    written["before_after"] = write_csv_df(before_after, directory, "before_after")
    per_group = hours.groupBy("group").agg(
        F.first("group_seconds").alias("seconds"), F.first("group_skipped").alias("skipped")
    )
    seconds, skipped = single_row(per_group.agg(F.sum("seconds"), F.sum("skipped")))
    stats: list[dict[str, object]] = [
        # Every group replayed, also one whose members moved nothing (it has no hourly rows).
        {"name": "sensor_groups", "value": group_count},
        {"name": "seconds_stepped", "value": int((seconds or 0) - (skipped or 0))},
        {"name": "seconds_skipped_exactly", "value": int(skipped or 0)},
        {"name": "not_replayed", "value": json.dumps(not_replayed(settings))},
        {"name": "fetch_throttle", "value": settings.fetch_throttle.value},
        {"name": "throttle_mode", "value": settings.throttle_mode.value},
        {"name": "interval_ms", "value": bucket},
    ]
    written["summary"] = write_csv_rows(directory, "summary", ["name", "value"], stats)
    summary.unpersist()
    return written
