"""The what-if replay (no Spark): the same throttles as the plain model, with and without its skips."""

from __future__ import annotations

import random

import numpy as np
import pytest
from replay_reference import reference_replay

from sluice.config.quota_section import parse_quota_section
from sluice.pipeline.jobs.replay import ReplayOptions, replay_group
from sluice.pipeline.jobs.replay_series import run_lengths, safe_bound, spread_per_second

START_S = 1_772_409_600  # 2026-03-02 00:00 UTC


def quotas(sensor: str, samples: int = 11, legacy: bool = False, fetch_throttle: str = "empty") -> object:
    return parse_quota_section(
        {
            "window": {"samples": samples, "size_seconds": 1},
            "legacy_windows": legacy,
            "sensor": sensor,
            "fetch_throttle": fetch_throttle,
            "entities": [
                {"user": "alice", "producer_byte_rate": 10_000, "consumer_byte_rate": 20_000},
                {"client_id": "solo", "producer_byte_rate": 5_000},
            ],
        }
    )


def random_demand(rng: random.Random, n: int, bound: int) -> np.ndarray:
    """Stretches of idle, quiet, near-bound and bursting demand, long enough for the skips to happen."""
    out = np.zeros(n, dtype=np.int64)
    s = 0
    while s < n:
        kind = rng.choice(["idle", "quiet", "quiet", "near", "burst"])
        length = rng.randint(1, 2500 if kind in ("idle", "quiet") else 150)
        low, high = {
            "idle": (0, 0),
            "quiet": (1, int(bound * 0.4)),
            "near": (int(bound * 0.5), int(bound * 1.2)),
            "burst": (bound, bound * 4),
        }[kind]
        for i in range(s, min(n, s + length)):
            out[i] = rng.randint(low, high)
        s += length
    return out


ENTITIES = [("alice", "a1"), ("alice", "a2"), ("bob", "solo"), ("carol", "free")]


def _events(results):
    return {
        (user, client, direction): r.events
        for (user, client), per in zip(ENTITIES, results, strict=True)
        for direction, r in per.items()
        if r.limited
    }


@pytest.mark.parametrize("seed", range(12))
def test_the_replay_gives_the_plain_models_throttles_exactly_with_and_without_skipping(seed: int) -> None:
    rng = random.Random(seed)
    sensor = ("window", "token_bucket")[seed % 2]
    settings = quotas(
        sensor,
        samples=(2, 3, 11)[seed % 3],
        legacy=sensor == "window" and seed % 4 == 0,
        fetch_throttle=("empty", "pass")[seed % 5 == 0],
    )
    n = 12_000
    produce = [random_demand(rng, n, 5_000) for _ in ENTITIES]
    fetch = [random_demand(rng, n, 10_000) for _ in ENTITIES]
    expected = reference_replay(ENTITIES, START_S, produce, fetch, settings)
    fast, stats = replay_group(ENTITIES, START_S, produce, fetch, settings, ReplayOptions(keep_events=True))
    slow, _ = replay_group(
        ENTITIES, START_S, produce, fetch, settings, ReplayOptions(keep_events=True, fast_forward=False)
    )
    assert _events(fast) == expected
    assert _events(slow) == expected
    assert sum(len(v) for v in expected.values()) > 0, "the series must get throttled somewhere"
    for per_fast, per_slow in zip(fast, slow, strict=True):
        for direction in ("produce", "fetch"):
            a, b = per_fast[direction], per_slow[direction]
            assert (a.hours, a.max_backlog_bytes, a.max_delay_ms, a.backlog_end_bytes) == (
                b.hours,
                b.max_backlog_bytes,
                b.max_delay_ms,
                b.backlog_end_bytes,
            )
    assert stats.skipped_seconds > 0


def test_a_constant_overload_is_held_at_the_quota_and_the_excess_waits() -> None:
    settings = quotas("window")
    n = 600
    produce = [np.full(n, 8_000), np.zeros(n, np.int64), np.zeros(n, np.int64), np.full(n, 7)]
    fetch = [np.zeros(n, np.int64)] * 4
    results, _ = replay_group(ENTITIES, START_S, produce, fetch, settings)
    bob = results[2]["produce"]
    assert bob.limited and bob.demand_bytes == 0 and bob.throttle_ms == 0  # a quota, but nothing sent
    alice = results[0]["produce"]
    assert alice.limited and alice.bound == 10_000
    # 8 kB/s against a 10 kB/s user quota shared by a1 and a2: within the bound, no throttle.
    assert alice.throttle_ms == 0 and alice.admitted_bytes == alice.demand_bytes
    carol = results[3]["produce"]
    assert not carol.limited and carol.admitted_bytes == 7 * n

    produce[0] = np.full(n, 20_000)  # twice the quota
    results, _ = replay_group(ENTITIES, START_S, produce, fetch, settings)
    alice = results[0]["produce"]
    assert alice.throttle_ms > 0 and alice.throttled_seconds > 0
    # Held near the quota: the rest waits. (Not exactly at it: Kafka's throttle for one large request is
    # sized for the window it was measured over, so a client sending 1 MiB requests gets a little more.)
    assert 10_000 * n * 0.95 <= alice.admitted_bytes <= 10_000 * n * 1.35
    assert alice.admitted_bytes < 0.7 * alice.demand_bytes
    assert alice.backlog_end_bytes == alice.demand_bytes - alice.admitted_bytes
    assert alice.delayed_bytes > 0


def test_a_throttled_fetch_is_retried_in_empty_mode_and_admitted_in_pass_mode() -> None:
    n = 120
    produce = [np.zeros(n, np.int64)] * 4
    fetch = [np.full(n, 60_000), np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64)]
    empty, _ = replay_group(ENTITIES, START_S, produce, fetch, quotas("window", fetch_throttle="empty"))
    passed, _ = replay_group(ENTITIES, START_S, produce, fetch, quotas("window", fetch_throttle="pass"))
    e, p = empty[0]["fetch"], passed[0]["fetch"]
    assert e.throttle_count > 0 and p.throttle_count > 0
    # Empty answers hand nothing over while throttled, so less gets through than when responses pass.
    assert e.admitted_bytes < p.admitted_bytes


def test_demand_is_spread_evenly_over_an_intervals_seconds() -> None:
    spread = spread_per_second(100, 8, np.array([100, 104]), 4, np.array([10, 3]))
    assert spread.tolist() == [3, 3, 2, 2, 1, 1, 1, 0]
    assert spread.sum() == 13


def test_safe_bound_and_run_lengths() -> None:
    assert safe_bound(11_000, 11, 1) < 11_000 * 10 / 11 + 1e-6
    assert safe_bound(1000, 1, 1) < 0  # N = 1: nothing is safe
    flags = np.array([True, True, False, True, True, True])
    assert run_lengths(flags).tolist() == [2, 1, 0, 3, 2, 1]
