"""report, propose and forecast on generated records whose answers are known in closed form."""

from __future__ import annotations

import csv
import datetime
import math
import os

import pytest
import yaml

from sluice.config.quota_section import parse_quota_section
from sluice.pipeline.inputs import read_usage, write_usage_parquet
from sluice.pipeline.jobs.forecast import ForecastOptions, run_forecast, t_quantile
from sluice.pipeline.jobs.propose import ProposeOptions, round_up, run_propose
from sluice.pipeline.jobs.report import chart_resolution, run_report
from sluice.pipeline.jobs.synth import SynthSpec, synth_usage

SPEC = SynthSpec(entities=6, duration_s=2 * 86_400, interval_s=60, jitter_pct=0, growth_pct_per_day=0)
BUSY_SHARE = 9 / 24


def rows(out: str, job: str, name: str) -> list[dict[str, str]]:
    with open(os.path.join(out, job, f"{name}.csv")) as stream:
        return list(csv.DictReader(stream))


@pytest.fixture(scope="module")
def reported(spark, tmp_path_factory):
    """Takes half a minute quiet, a minute and a half loaded: Spark's start (if this module runs first in
    the session) and two days of six entities through report and propose, once for the module."""
    base = tmp_path_factory.mktemp("known")
    path = str(base / "usage.parquet")
    write_usage_parquet(synth_usage(spark, SPEC), path)
    out = str(base / "out")
    usage = read_usage(spark, path)
    run_report(spark, usage, out)
    run_propose(spark, usage, out, ProposeOptions(produce_capacity=80_000))
    return out


def expected_produce(k: int) -> tuple[float, float]:
    """(off-hours rate, busy-hours rate) the records show for entity k."""
    base = SPEC.produce_base(k)
    busy = min(2 * base, SPEC.hot_quota()) if k == 0 else 2 * base
    return base, busy


def test_report_distributions_shares_and_throttling(reported) -> None:
    summary = {r["client_id"]: r for r in rows(reported, "report", "entity_summary")}
    intervals = SPEC.intervals
    totals = {}
    for k in range(SPEC.entities):
        low, busy = expected_produce(k)
        row = summary[f"app-{k:03d}"]
        assert float(row["produce_p50"]) == low
        assert float(row["produce_p95"]) == busy and float(row["produce_max"]) == busy
        produced = intervals * 60 * ((1 - BUSY_SHARE) * low + BUSY_SHARE * busy)
        assert int(row["produce_bytes"]) == round(produced)
        fetched = intervals * 60 * SPEC.fetch_base(k) * ((1 - BUSY_SHARE) + BUSY_SHARE * 2)
        assert int(row["fetch_bytes"]) == round(fetched)
        totals[k] = produced + fetched
    # The hot entity: throttled 20 s of every busy minute (excess / quota), so 9/24 x 1/3 of its time.
    hot = summary["app-000"]
    assert float(hot["throttled_share"]) == pytest.approx(BUSY_SHARE / 3)
    assert int(hot["produce_throttle_ms"]) == round(BUSY_SHARE * intervals) * 20_000
    assert float(hot["recorded_producer_byte_rate"]) == SPEC.hot_quota()
    assert all(float(summary[f"app-{k:03d}"]["throttle_ms"]) == 0 for k in range(1, SPEC.entities))
    top = [r["client_id"] for r in rows(reported, "report", "top_talkers")]
    assert top == [f"app-{k:03d}" for k in sorted(totals, key=lambda k: -totals[k])]
    grand = sum(totals.values())
    for k, total in totals.items():
        assert float(summary[f"app-{k:03d}"]["share"]) == pytest.approx(total / grand, rel=1e-5)
    # ANONYMOUS every fourth entity; users team-(k mod 4) otherwise.
    assert summary["app-003"]["user"] == "ANONYMOUS" and summary["app-005"]["user"] == "team-1"


def test_report_daily_profile_heatmap_and_cluster_peak(reported) -> None:
    profile = {int(r["hour_of_day"]): r for r in rows(reported, "report", "daily_profile")}
    quiet = sum(expected_produce(k)[0] for k in range(SPEC.entities))
    busy = sum(expected_produce(k)[1] for k in range(SPEC.entities))
    assert float(profile[3]["produce_mean"]) == pytest.approx(quiet)
    assert float(profile[12]["produce_mean"]) == pytest.approx(busy)
    daily = rows(reported, "report", "cluster_daily")
    assert len(daily) == 2 and float(daily[0]["produce_max"]) == pytest.approx(busy)
    # Two days of one-minute records: the charts are drawn per minute, and say so.
    resolution = {r["name"]: r["value"] for r in rows(reported, "report", "chart_resolution")}
    assert (resolution["unit"], resolution["seconds"]) == ("minute", "60")
    heat = rows(reported, "report", "throttle_heatmap")
    assert {r["client_id"] for r in heat} == {"app-000"}
    by_hour: dict[int, list[float]] = {}
    for r in heat:
        by_hour.setdefault(datetime.datetime.fromisoformat(r["time"]).hour, []).append(
            float(r["throttled_share"])
        )
    assert sum(by_hour[10]) / len(by_hour[10]) == pytest.approx(1 / 3) and max(by_hour[2]) == 0


def test_the_generated_leadership_is_skewed_one_broker_carries_half(reported) -> None:
    # Every topic row is halved between broker 1 and broker 2 + (topic mod 2), so broker 1 carries half of
    # all bytes and the others half of their entities'; the generator's bytes are even, the halves exact.
    # Entities 0, 2, 4 and 5 use topics 0, 2, 4 (broker 2); 1 and 3 use topics 1 and 3 (broker 3).
    entity = {int(r["client_id"][-3:]): r for r in rows(reported, "report", "entity_summary")}
    brokers = {"1": range(SPEC.entities), "2": (0, 2, 4, 5), "3": (1, 3)}
    summary = {r["broker"]: r for r in rows(reported, "report", "broker_summary")}
    assert list(summary) == ["1", "2", "3"]  # every generated byte names its broker
    for broker, members in brokers.items():
        for kind in ("produce", "fetch"):
            half = sum(int(entity[k][f"{kind}_bytes"]) for k in members) / 2
            assert int(summary[broker][f"{kind}_bytes"]) == half, (broker, kind)
    # At a busy minute each broker's produce rate is half its entities' busy rate.
    noon = {
        r["broker"]: r
        for r in rows(reported, "report", "broker_over_time")
        if r["time"] == "2026-03-02T12:00:00"
    }
    for broker, members in brokers.items():
        assert float(noon[broker]["produce_rate"]) == sum(expected_produce(k)[1] for k in members) / 2
    assert [float(noon[b]["produce_rate"]) for b in "123"] == [39_000, 23_000, 16_000]
    top = {}
    for r in rows(reported, "report", "broker_top_topics"):
        top.setdefault(r["broker"], set()).add(r["topic"])
    assert top == {
        "1": {f"topic-{t}" for t in range(5)},
        "2": {"topic-0", "topic-2", "topic-4"},
        "3": {"topic-1", "topic-3"},
    }


@pytest.mark.parametrize(
    ("span_s", "interval_s", "unit"),
    [
        (30, 1, "second"),  # the demo's own records
        (3600, 1, "second"),
        (3 * 3600, 1, "minute"),
        (2 * 86_400, 60, "minute"),
        (7 * 86_400, 60, "hour"),
        (4 * 86_400, 600, "hour"),  # ten-minute records are never drawn per minute
        (365 * 86_400, 60, "day"),
    ],
)
def test_the_charts_resolution_follows_the_span(span_s: float, interval_s: float, unit: str) -> None:
    assert chart_resolution(span_s, interval_s)[0] == unit


def test_propose_percentile_headroom_budget_and_outputs(reported) -> None:
    proposals = {
        (r["user"] or None, r["client_id"] or None): r for r in rows(reported, "propose", "proposals")
    }
    # ANONYMOUS traffic gets a client-id quota, authenticated users a (user, client-id) one.
    assert (None, "app-003") in proposals and ("team-1", "app-001") in proposals
    wanted = {key: round_up(expected_produce(int(key[1][-3:]))[1] * 1.2) for key in proposals}
    for key, row in proposals.items():
        assert int(row["produce_unscaled"]) == wanted[key]
    assert sum(wanted.values()) > 80_000  # so the budget binds
    assert sum(int(r["producer_byte_rate"]) for r in proposals.values()) <= 80_000
    assert all("produce x" in r["scaled"] for r in proposals.values())
    assert proposals[("team-0", "app-000")]["understated"] == "True"
    with open(os.path.join(reported, "propose", "quotas.yaml")) as stream:
        settings = parse_quota_section(yaml.safe_load(stream)["quota"])
    assert len(settings.rules) == SPEC.entities
    with open(os.path.join(reported, "propose", "kafka-configs.sh")) as stream:
        commands = [line for line in stream if line.startswith("kafka-configs.sh")]
    assert len(commands) == SPEC.entities
    assert any("--entity-type clients --entity-name app-003" in c and "users" not in c for c in commands)
    assert any(
        "--entity-type users --entity-name team-1 --entity-type clients --entity-name app-001" in c
        for c in commands
    )


def test_round_up_to_two_significant_digits() -> None:
    assert [round_up(v) for v in (47_123, 48_000, 999, 1_001, 0.5)] == [48_000, 48_000, 1_000, 1_100, 1]


def test_t_quantiles_match_the_tables() -> None:
    for df, value in ((1, 12.7062), (2, 4.3027), (3, 3.1824), (5, 2.5706), (10, 2.2281), (30, 2.0423)):
        assert t_quantile(0.975, df) == pytest.approx(value, rel=2e-3)


def test_forecast_finds_the_generated_growth_and_its_crossing_date(spark, tmp_path) -> None:
    spec = SynthSpec(entities=6, duration_s=10 * 86_400, interval_s=600, jitter_pct=0, growth_pct_per_day=1)
    out = str(tmp_path / "out")
    grow = sum(2 * (spec.produce_base(k) + spec.fetch_base(k)) for k in range(1, spec.entities))
    intercept = grow + spec.hot_quota()
    slope = grow * 0.01
    capacity = 2 * intercept
    run_forecast(spark, synth_usage(spark, spec), out, ForecastOptions(capacity=capacity))
    result = rows(out, "forecast", "forecast")[0]
    assert float(result["slope_per_day"]) == pytest.approx(slope, rel=1e-3)
    assert float(result["intercept"]) == pytest.approx(intercept, rel=1e-3)
    day = datetime.date(2026, 3, 2) + datetime.timedelta(days=math.ceil((capacity - intercept) / slope))
    assert result["crossing"] == day.isoformat()
    assert result["earliest"] <= result["crossing"] <= result["latest"]
    assert len(rows(out, "forecast", "daily_peaks")) == 10
