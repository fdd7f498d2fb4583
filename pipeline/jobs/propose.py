"""`sluice pipeline propose`: quotas from what each entity used, with headroom, within a capacity budget.

Per quota entity: the chosen percentile (default p99) of its per-second produce and fetch rates over its
active intervals, times the headroom (default 1.2), rounded up to two significant digits (Kafka stores
byte rates as whole numbers; round numbers read better in a review). When the proposals of one kind add up
to more than the capacity the operator gives for it, all of that kind are scaled down by the same factor,
and the table says so.

Which entity: `--by auto` (the default) proposes a (user, client-id) quota for authenticated users and a
client-id quota for ANONYMOUS traffic, whose user means nothing; `user`, `client-id` and
`user-client-id` force one shape. The rates of a shape's members are added per interval first, so a user
quota is sized for the user's total, not for its busiest client.

Written as Sluice YAML (`quotas.yaml`, checked with the proxy's own parser before it is written) and as
`kafka-configs.sh` commands (`kafka-configs.sh`), which set the same quotas on Sluice (or on Kafka).
Entities the records show already throttled are marked: their percentiles understate what they wanted.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypedDict

import yaml
from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from sluice.config.quota_section import parse_quota_section
from sluice.quota import ANONYMOUS

from ..output.tables import job_dir, write_csv_rows
from ..progress import Progress
from .intervals import bucket_ms, entity_intervals

SHAPES = ("auto", "user", "client-id", "user-client-id")
COLUMNS = (
    "user",
    "client_id",
    "produce_observed",
    "fetch_observed",
    "producer_byte_rate",
    "consumer_byte_rate",
    "produce_unscaled",
    "fetch_unscaled",
    "scaled",
    "understated",
    "intervals",
)


@dataclass(frozen=True, slots=True)
class ProposeOptions:
    percentile: float = 0.99
    headroom: float = 1.2
    produce_capacity: float | None = None  # bytes/s the cluster can take in, shared by all quotas
    fetch_capacity: float | None = None
    by: str = "auto"
    minimum: int = 1024  # no quota below this many bytes/s
    bootstrap: str = "SLUICE_HOST:9092"  # for the kafka-configs.sh commands


def round_up(value: float, digits: int = 2) -> int:
    """The smallest number >= value with `digits` significant digits (47123 -> 48000)."""
    if value <= 0:
        return 0
    magnitude = 10 ** max(0, math.floor(math.log10(value)) - digits + 1)
    return int(math.ceil(value / magnitude) * magnitude)


def _shape(by: str) -> tuple[Column, Column]:
    anonymous = F.col("user") == F.lit(ANONYMOUS)
    if by == "user":
        return F.col("user"), F.lit(None).cast("string")
    if by == "client-id":
        return F.lit(None).cast("string"), F.col("client_id")
    if by == "user-client-id":
        return F.col("user"), F.col("client_id")
    if by == "auto":
        return F.when(anonymous, F.lit(None).cast("string")).otherwise(F.col("user")), F.col("client_id")
    raise ValueError(f"--by must be one of {', '.join(SHAPES)}, got {by!r}")


def run_propose(
    spark: SparkSession,
    usage: DataFrame,
    out: str,
    options: ProposeOptions | None = None,
    progress: Progress | None = None,
) -> dict[str, str]:
    options = options or ProposeOptions()
    progress = progress or Progress(quiet=True)
    if not 0 < options.percentile <= 1 or options.headroom <= 0:
        raise ValueError("percentile must be in (0, 1] and headroom positive")
    user, client = _shape(options.by)
    directory = job_dir(out, "propose")
    with progress.step(f"propose: p{options.percentile * 100:g} x {options.headroom:g} per entity"):
        bucket = bucket_ms(usage)
        per_key = (
            entity_intervals(usage, bucket)
            .withColumn("key_user", user)
            .withColumn("key_client", client)
            .where(F.col("key_user").isNotNull() | F.col("key_client").isNotNull())
            .groupBy("key_user", "key_client", "bucket_ms")
            .agg(
                F.sum("produce_rate").alias("produce_rate"),
                F.sum("fetch_rate").alias("fetch_rate"),
                F.sum(F.col("produce_throttle_ms") + F.col("fetch_throttle_ms")).alias("throttle_ms"),
            )
        )
        observed = (
            per_key.groupBy("key_user", "key_client")
            .agg(
                F.percentile_approx("produce_rate", options.percentile, 10_000).alias("produce"),
                F.percentile_approx("fetch_rate", options.percentile, 10_000).alias("fetch"),
                F.sum("throttle_ms").alias("throttle_ms"),
                F.count(F.lit(1)).alias("intervals"),
            )
            .orderBy("key_user", "key_client")
            .collect()
        )
    rows = propose_rows(observed, options)
    written = {"proposals": write_csv_rows(directory, "proposals", COLUMNS, rows)}
    text = quotas_yaml(rows)
    parse_quota_section(yaml.safe_load(text)["quota"])  # what the proxy will read; raises if it would not
    written["quotas"] = _write(directory, "quotas.yaml", text)
    written["kafka_configs"] = _write(directory, "kafka-configs.sh", kafka_configs(rows, options.bootstrap))
    return written


class Proposal(TypedDict):
    """One entity's proposal: a row of proposals.csv (COLUMNS)."""

    user: str | None
    client_id: str | None
    produce_observed: float
    fetch_observed: float
    produce_unscaled: int
    fetch_unscaled: int
    producer_byte_rate: int  # the unscaled rate, scaled down to the capacity if one is given
    consumer_byte_rate: int
    understated: bool
    intervals: int
    scaled: str


def propose_rows(observed: Iterable[Row], options: ProposeOptions) -> list[Proposal]:
    rows: list[Proposal] = []
    for item in observed:
        produce = float(item["produce"] or 0) * options.headroom
        fetch = float(item["fetch"] or 0) * options.headroom
        rows.append(
            {
                "user": item["key_user"],
                "client_id": item["key_client"],
                "produce_observed": float(item["produce"] or 0),
                "fetch_observed": float(item["fetch"] or 0),
                "produce_unscaled": max(options.minimum, round_up(produce)) if produce else 0,
                "fetch_unscaled": max(options.minimum, round_up(fetch)) if fetch else 0,
                "producer_byte_rate": 0,
                "consumer_byte_rate": 0,
                "understated": bool(item["throttle_ms"]),
                "intervals": item["intervals"],
                "scaled": "",
            }
        )
    produce_factor = _scale(options.produce_capacity, [row["produce_unscaled"] for row in rows])
    fetch_factor = _scale(options.fetch_capacity, [row["fetch_unscaled"] for row in rows])
    for row in rows:
        # Rounded down after scaling, so the total stays within the budget.
        row["producer_byte_rate"] = _scaled(row["produce_unscaled"], produce_factor)
        row["consumer_byte_rate"] = _scaled(row["fetch_unscaled"], fetch_factor)
        notes = [
            f"{kind} x{factor:.3f}"
            for kind, factor, value in (
                ("produce", produce_factor, row["produce_unscaled"]),
                ("fetch", fetch_factor, row["fetch_unscaled"]),
            )
            if factor < 1.0 and value
        ]
        row["scaled"] = " ".join(notes)
    return rows


def _scale(capacity: float | None, wanted: list[int]) -> float:
    """The factor that brings the sum of `wanted` within `capacity` (1.0: within it, or no capacity)."""
    total = sum(wanted)
    return capacity / total if capacity and total > capacity else 1.0


def _scaled(value: int, factor: float) -> int:
    return max(1, math.floor(value * factor)) if value else 0


def _rates(row: Proposal) -> tuple[tuple[str, int], ...]:
    """(quota key, proposed rate) of the row, as the quota section and kafka-configs.sh name them."""
    return (
        ("producer_byte_rate", row["producer_byte_rate"]),
        ("consumer_byte_rate", row["consumer_byte_rate"]),
    )


def quotas_yaml(rows: list[Proposal]) -> str:
    entities = []
    for row in rows:
        entry: dict[str, object] = {}
        if row["user"] is not None:
            entry["user"] = row["user"]
        if row["client_id"] is not None:
            entry["client_id"] = row["client_id"]
        for key, rate in _rates(row):
            if rate:
                entry[key] = rate
        if len(entry) > sum(k in entry for k in ("user", "client_id")):
            entities.append(entry)
    header = "# Proposed by `sluice pipeline propose`: percentile x headroom of the recorded rates.\n"
    return header + yaml.safe_dump({"quota": {"entities": entities}}, sort_keys=False, allow_unicode=True)


def kafka_configs(rows: list[Proposal], bootstrap: str) -> str:
    lines = [
        "#!/bin/sh",
        "# Proposed by `sluice pipeline propose`. Sluice answers AlterClientQuotas (Quotas managed the",
        "# Kafka way): point --bootstrap-server at Sluice to set them there, or at Kafka for the brokers.",
        f'BOOTSTRAP="${{BOOTSTRAP:-{bootstrap}}}"',
    ]
    for row in rows:
        configs = ",".join(f"{key}={rate}" for key, rate in _rates(row) if rate)
        if not configs:
            continue
        entity = []
        if row["user"] is not None:
            entity += ["--entity-type", "users", "--entity-name", shlex.quote(str(row["user"]))]
        if row["client_id"] is not None:
            entity += ["--entity-type", "clients", "--entity-name", shlex.quote(str(row["client_id"]))]
        lines.append(
            'kafka-configs.sh --bootstrap-server "$BOOTSTRAP" --alter --add-config '
            f"{shlex.quote(configs)} {' '.join(entity)}"
        )
    return "\n".join(lines) + "\n"


def _write(directory: str, name: str, text: str) -> str:
    import os

    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as stream:
        stream.write(text)
    return path
