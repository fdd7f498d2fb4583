"""Benchmarks for quota/: record + check on a warm sensor, the manager's per-request path, entity resolution.

Run: `.venv/bin/python tests/bench/bench_quota.py` prints one JSON object per line.
`run()` returns the same records as dicts: {"name", "value", "unit", "target"} (target None = no
budget, just a number to watch). Timings are the best of several repeats, in microseconds per call,
including the Python loop that makes the calls.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from sluice.quota.entities import DEFAULT, QuotaEntity, QuotaRules
from sluice.quota.keys import QuotaKey, SensorKind
from sluice.quota.managers import ClientQuotaManager
from sluice.quota.sensor import QuotaSensor, TokenBucketQuotaSensor, WindowQuotaSensor

RECORD_CHECK_TARGET_US = 2.0
RESOLUTION_TARGET_US = 2.0
CALLS = 100_000


def _best_us_per_call(loop: Callable[[int], object], calls: int = CALLS, repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter_ns()
        loop(calls)
        best = min(best, (time.perf_counter_ns() - start) / calls)
    return best / 1000


def _sensor_loop(sensor: QuotaSensor, value: int) -> Callable[[int], object]:
    record = sensor.record
    clock = [1_000_000]

    def loop(calls: int) -> None:
        # A busy client: 16 requests per millisecond, the clock moving on as in real traffic.
        now = clock[0]
        for i in range(calls):
            record(value, now + (i >> 4))
        clock[0] = now + (calls >> 4) + 1

    return loop


def _warm(sensor: QuotaSensor, value: int) -> QuotaSensor:
    _sensor_loop(sensor, value)(50_000)
    return sensor


def bench_sensors() -> list[dict[str, Any]]:
    cases = {
        # A generous bound: every call takes the within-quota path.
        "window_sensor_record_check": WindowQuotaSensor(1e12, 0),
        "window_sensor_legacy_record_check": WindowQuotaSensor(1e12, 0, legacy=True),
        "token_bucket_sensor_record_check": TokenBucketQuotaSensor(1e12, 0),
        # A tight bound: every call is a violation and computes a throttle.
        "window_sensor_record_check_violating": WindowQuotaSensor(1000, 0),
        "token_bucket_sensor_record_check_violating": TokenBucketQuotaSensor(1000, 0),
    }
    return [
        {
            "name": name,
            "value": round(_best_us_per_call(_sensor_loop(_warm(sensor, 1000), 1000)), 3),
            "unit": "us/call",
            "target": RECORD_CHECK_TARGET_US,
        }
        for name, sensor in cases.items()
    ]


def _busy_manager(kind: SensorKind) -> ClientQuotaManager:
    # Several levels configured, so tags come from the full precedence walk (once, then cached).
    manager = ClientQuotaManager(QuotaKey.PRODUCER_BYTE_RATE, sensor_kind=kind)
    manager.update_quota(QuotaEntity(DEFAULT), 10_000_000)
    manager.update_quota(QuotaEntity("alice", DEFAULT), 5_000_000)
    manager.update_quota(QuotaEntity(client_id=DEFAULT), 1_000_000)
    for i in range(1000):
        manager.record_and_get_throttle_ms(f"user-{i}", f"client-{i % 10}", 1000, 0)
    return manager


def bench_manager() -> list[dict[str, Any]]:
    results = []
    for kind in SensorKind:
        manager = _busy_manager(kind)
        record = manager.record_and_get_throttle_ms

        def loop(calls: int, record: Callable[[str, str, int, int], int] = record) -> None:
            for i in range(calls):
                record("alice", "pump", 1000, 1_000_000 + (i >> 4))

        loop(10_000)
        results.append(
            {
                "name": f"manager_record_and_get_throttle_{kind.value}",
                "value": round(_best_us_per_call(loop), 3),
                "unit": "us/call",
                "target": RECORD_CHECK_TARGET_US,
            }
        )
    return results


def _rules() -> QuotaRules:
    rules = QuotaRules()
    rules.set(QuotaEntity(DEFAULT), 1000)
    rules.set(QuotaEntity("alice", DEFAULT), 2000)
    rules.set(QuotaEntity(DEFAULT, "pump"), 3000)
    rules.set(QuotaEntity(client_id=DEFAULT), 4000)
    return rules


def bench_resolution() -> list[dict[str, Any]]:
    rules = _rules()
    resolve = rules.resolve
    resolve("alice smith", "pump")

    def cached(calls: int) -> None:
        for _ in range(calls):
            resolve("alice smith", "pump")

    names = [(f"user {i}", f"client-{i}") for i in range(CALLS)]

    def uncached(calls: int) -> None:
        rules.set(QuotaEntity(DEFAULT), 1000)  # any change empties the cache
        for i in range(calls):
            resolve(*names[i])

    return [
        {
            "name": "entity_resolution_cached",
            "value": round(_best_us_per_call(cached), 3),
            "unit": "us/call",
            "target": RESOLUTION_TARGET_US,
        },
        {
            "name": "entity_resolution_uncached",
            "value": round(_best_us_per_call(uncached, repeats=3), 3),
            "unit": "us/call",
            "target": None,
        },
    ]


def run() -> list[dict[str, Any]]:
    return [*bench_sensors(), *bench_manager(), *bench_resolution()]


if __name__ == "__main__":
    for record in run():
        print(json.dumps(record))
