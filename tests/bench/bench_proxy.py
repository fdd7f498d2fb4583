"""The proxy's end-to-end benchmarks, each against the real proxy process in front of the mock cluster.

One module per target, run here in the order of the targets' list:

* bench_produce_throughput.py — produce throughput through the proxy vs direct, 1 KB records;
* bench_relay_cpu.py — proxy CPU per GiB with 1 MiB Produce requests, beside a bare asyncio relay;
* bench_small_requests.py — small requests per second through one proxy process;
* bench_idle_connections.py — memory per idle client connection, holding 5,000.

Run: ``.venv/bin/python tests/bench/bench_proxy.py`` prints one JSON record per line; `run()` returns
them (see measurements.py for the record's keys). `make bench` runs these through run_all.py, which
also writes docs/benchmarks.md.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_idle_connections
import bench_produce_throughput
import bench_relay_cpu
import bench_small_requests
from measurements import Record

BENCHMARKS: dict[str, Callable[[], list[Record]]] = {
    "produce_throughput": bench_produce_throughput.run,
    "relay_cpu": bench_relay_cpu.run,
    "small_requests": bench_small_requests.run,
    "idle_connections": bench_idle_connections.run,
}


def run() -> list[Record]:
    records: list[Record] = []
    for benchmark in BENCHMARKS.values():
        records.extend(benchmark())
    return records


if __name__ == "__main__":
    for record in run():
        print(json.dumps(record))
