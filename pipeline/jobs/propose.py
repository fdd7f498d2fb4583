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
from dataclasses import dataclass

import yaml
from pyspark.sql import DataFrame
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


def _shape(by: str):
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
    spark, usage: DataFrame, out: str, options: ProposeOptions | None = None, progress: Progress | None = None
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


def propose_rows(observed, options: ProposeOptions) -> list[dict[str, object]]:
    rows = []
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
                "understated": bool(item["throttle_ms"]),
                "intervals": item["intervals"],
                "scaled": "",
            }
        )
    for kind, capacity in (("produce", options.produce_capacity), ("fetch", options.fetch_capacity)):
        wanted = sum(r[f"{kind}_unscaled"] for r in rows)
        factor = capacity / wanted if capacity and wanted > capacity else 1.0
        key = "producer_byte_rate" if kind == "produce" else "consumer_byte_rate"
        for row in rows:
            value = row[f"{kind}_unscaled"]
            # Rounded down after scaling, so the total stays within the budget.
            row[key] = max(1, math.floor(value * factor)) if value else 0
            if factor < 1.0 and value:
                row["scaled"] = (row["scaled"] + f" {kind} x{factor:.3f}").strip()
    return rows


def quotas_yaml(rows: list[dict[str, object]]) -> str:
    entities = []
    for row in rows:
        entry: dict[str, object] = {}
        if row["user"] is not None:
            entry["user"] = row["user"]
        if row["client_id"] is not None:
            entry["client_id"] = row["client_id"]
        for key in ("producer_byte_rate", "consumer_byte_rate"):
            if row[key]:
                entry[key] = int(row[key])
        if len(entry) > sum(k in entry for k in ("user", "client_id")):
            entities.append(entry)
    header = "# Proposed by `sluice pipeline propose`: percentile x headroom of the recorded rates.\n"
    return header + yaml.safe_dump({"quota": {"entities": entities}}, sort_keys=False, allow_unicode=True)


def kafka_configs(rows: list[dict[str, object]], bootstrap: str) -> str:
    lines = [
        "#!/bin/sh",
        "# Proposed by `sluice pipeline propose`. Sluice answers AlterClientQuotas (Quotas managed the",
        "# Kafka way): point --bootstrap-server at Sluice to set them there, or at Kafka for the brokers.",
        f'BOOTSTRAP="${{BOOTSTRAP:-{bootstrap}}}"',
    ]
    for row in rows:
        configs = ",".join(
            f"{key}={int(row[key])}" for key in ("producer_byte_rate", "consumer_byte_rate") if row[key]
        )
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
