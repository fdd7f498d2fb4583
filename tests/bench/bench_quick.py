"""`make bench-quick`: the hot path's four figures in under two minutes, a regression guard.

The same benchmarks as sections 2, 3, 9 and 10 with fewer rounds and shorter windows: proxy CPU per GiB
(and its ratio to the bare relay) with binding quotas, small requests through the proxy in front of the
canned broker, open-loop p99 added at 50 % load, and the TLS figures. Records are named as the full
run's with `_quick` appended and carry the same targets; the full `make bench` runs this too, so
docs/benchmarks.md shows the guard's figures next to the full run's.

Run alone: ``.venv/bin/python tests/bench/bench_quick.py`` (one JSON record per line).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_latency
import bench_relay_cpu
import bench_small_requests
import bench_tls
from measurements import Record

# Kept small enough that the whole suite, process start-ups included, stays under two minutes.
RELAY_ROUNDS, RELAY_REQUESTS = 3, 1024
SMALL_ROUNDS = 1
LATENCY_DURATION_S = 4.0
TLS_ROUNDS, TLS_REQUESTS, TLS_DURATION_S = 1, 256, 3.0

# Per benchmark, the records the guard keeps (the rest are in the full run).
_KEEP = {
    "relay_cpu": ("proxy_cpu_per_gib_1mib_produce", "proxy_cpu_per_gib_vs_bare_relay",
                  "bare_relay_cpu_per_gib_1mib_produce"),
    "small": ("small_produce_requests_per_s_proxy_fast_upstream", "small_produce_proxy_cpu_us_per_request",
              "small_produce_bare_relay_cpu_us_per_request"),
    "latency": ("latency_p99_added_ms_at_50pct", "proxy_cpu_us_per_request_at_50pct",
                "latency_p99_ms_direct_at_50pct", "latency_p99_ms_proxy_at_50pct"),
    "tls": ("tls_proxy_cpu_per_gib_1mib_produce", "plaintext_proxy_cpu_per_gib_1mib_produce_same_run",
            "tls_latency_p99_added_ms_at_50pct"),
}  # fmt: skip


def _quick(records: list[Record], keep: tuple[str, ...]) -> list[Record]:
    out = []
    for record in records:
        if record["name"] in keep:
            record = dict(record, name=record["name"] + "_quick")
            if "title" in record:
                record["title"] = "Quick: " + record["title"]
            out.append(record)
    return out


def run() -> list[Record]:
    records = _quick(
        bench_relay_cpu.run(rounds=RELAY_ROUNDS, requests=RELAY_REQUESTS, real_client=False),
        _KEEP["relay_cpu"],
    )
    records += _quick(bench_small_requests.run(produce_rounds=SMALL_ROUNDS, mock=False), _KEEP["small"])
    latency = bench_latency.run(loads=(0.5,), duration_s=LATENCY_DURATION_S, capacity_rounds=1)
    records += _quick(latency, _KEEP["latency"])
    tls = bench_tls.run(
        rounds=TLS_ROUNDS, requests=TLS_REQUESTS, duration_s=TLS_DURATION_S, capacity_rounds=1
    )
    records += _quick(tls, _KEEP["tls"])
    return records


if __name__ == "__main__":
    for record in run():
        print(json.dumps(record))
