"""`whatif` on Spark gives exactly the throttles of the in-process quota engine on the same series."""

from __future__ import annotations

import csv
import random

import numpy as np
import pytest
from replay_reference import reference_replay

from sluice.config.quota_section import parse_quota_section
from sluice.pipeline.inputs import read_usage
from sluice.pipeline.jobs.replay import ReplayOptions
from sluice.pipeline.jobs.whatif import WhatifOptions, run_whatif
from sluice.quota.usage_records import UsageBatch, UsageRow, encode_batch

START_S = 1_772_409_600
N = 2_400
ENTITIES = [("alice", "a1"), ("alice", "a2"), ("bob", "solo"), ("carol", None)]


def schedule(rng: random.Random) -> list[str]:
    """Stretches of quiet, idle, near-quota and bursting seconds, shared by every entity (busy hours are
    busy for everyone), long enough that the replay's exact skips come into play."""
    kinds: list[str] = []
    while len(kinds) < N:
        kind = rng.choice(["quiet", "quiet", "idle", "burst", "near"])
        kinds += [kind] * rng.randint(20, 700 if kind in ("quiet", "idle") else 120)
    return kinds[:N]


def demand(rng: random.Random, kinds: list[str], bound: int) -> np.ndarray:
    ranges = {
        "idle": (0, 0),
        "quiet": (1, bound // 3),
        "near": (bound // 2, bound),
        "burst": (bound, 4 * bound),
    }
    return np.array([rng.randint(*ranges[kind]) for kind in kinds], dtype=np.int64)


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    rng = random.Random(7)
    kinds = schedule(rng)
    produce = [demand(rng, kinds, 8_000) for _ in ENTITIES]
    fetch = [demand(rng, kinds, 15_000) for _ in ENTITIES]
    path = tmp_path_factory.mktemp("whatif") / "usage.jsonl"
    with open(path, "w") as stream:
        for s in range(N):
            rows = tuple(
                UsageRow(user=u, client_id=c, produce_bytes=int(produce[j][s]), fetch_bytes=int(fetch[j][s]))
                for j, (u, c) in enumerate(ENTITIES)
                if produce[j][s] or fetch[j][s]
            )
            if rows:
                batch = UsageBatch("test-instance", (START_S + s) * 1000, 1000, rows)
                stream.write(encode_batch(batch).decode() + "\n")
    return path, produce, fetch


QUOTAS = """\
quota:
  sensor: {sensor}
  entities:
    - {{user: alice, producer_byte_rate: 10000, consumer_byte_rate: 20000}}
    - {{client_id: solo, producer_byte_rate: 5000}}
    - {{client_id: <default>, consumer_byte_rate: 12000}}
"""


@pytest.mark.parametrize("sensor", ["window", "token_bucket"])
def test_whatif_on_spark_agrees_exactly_with_the_quota_engine(spark, series, tmp_path, sensor: str) -> None:
    path, produce, fetch = series
    quotas = tmp_path / "quotas.yaml"
    quotas.write_text(QUOTAS.format(sensor=sensor))
    out = str(tmp_path / "out")
    usage = read_usage(spark, str(path))
    run_whatif(spark, usage, str(quotas), out, WhatifOptions(ReplayOptions(keep_events=True)))

    import yaml

    settings = parse_quota_section(yaml.safe_load(quotas.read_text())["quota"])
    expected = reference_replay(ENTITIES, START_S, produce, fetch, settings)
    events = spark.read.parquet(f"{out}/whatif/events.parquet").collect()
    got: dict[tuple, list] = {}
    for row in sorted(events, key=lambda r: (r.at_ms, r.throttle_ms)):
        got.setdefault((row.user, row.client_id, row.direction), []).append((row.at_ms, row.throttle_ms))
    assert sum(len(v) for v in expected.values()) > 50
    assert {k: v for k, v in expected.items() if v} == got

    with open(f"{out}/whatif/entities.csv") as stream:
        table = {(r["user"], r["client_id"] or None, r["direction"]): r for r in csv.DictReader(stream)}
    for key, throttles in expected.items():
        assert int(table[key]["throttle_ms"]) == sum(ms for _, ms in throttles)
        assert int(table[key]["throttle_count"]) == len(throttles)
    # carol (null client-id): Kafka never matches a null client-id to a client-id quota, even <default>.
    assert table[("carol", None, "fetch")]["limited"] == "False"
    assert table[("carol", None, "produce")]["limited"] == "False"
    with open(f"{out}/whatif/summary.csv") as stream:
        stats = {r["name"]: r["value"] for r in csv.DictReader(stream)}
    assert int(stats["seconds_skipped_exactly"]) > 0  # the skips were exercised, and changed nothing
