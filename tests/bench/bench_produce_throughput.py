"""Target 1: produce throughput through the proxy >= 0.95 x direct, 1 KB records.

`sluice perf-test` (a subprocess, so the load generator has its own interpreter) produces the same
records straight to the mock cluster and through the proxy, alternating, several rounds; the medians of
its records/sec are compared. The CPU each process used is recorded per run: on a 2-core machine the
mock cluster, the proxy and the load generator share two CPUs, so the ratio is as much about who gets
a core as about the proxy's own cost.

Run alone: ``.venv/bin/python tests/bench/bench_produce_throughput.py`` (one JSON record per line).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parents[1]))  # tests/: the test broker and proxy handles

from harness import QuietProxy, display, perf_test_command, run_child
from measurements import Record, measurement, median
from mock_cluster_process import MockCluster
from process_stats import cpu_seconds

TARGET_RATIO = 0.95
BROKERS = 3
TOPIC = "perf"
PARTITIONS = 6
RECORD_SIZE = 1024
NUM_RECORDS = 500_000
WARMUP_RECORDS = 50_000
ROUNDS = 7
PRODUCER_PROPS = {"acks": "1"}

_SUMMARY = re.compile(
    r"^(?P<records>\d+) records sent, (?P<rate>[\d.]+) records/sec \((?P<mb>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, (?P<p50>\d+) ms 50th, "
    r"(?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th, (?P<p999>\d+) ms 99\.9th\.$"
)


def _perf_test(bootstrap: str, num_records: int) -> tuple[re.Match[str], Any]:
    run = run_child(perf_test_command(bootstrap, TOPIC, num_records, RECORD_SIZE, PRODUCER_PROPS))
    match = _SUMMARY.match(run.last_line())
    if run.returncode != 0 or match is None or int(match["records"]) != num_records:
        raise RuntimeError(f"perf-test failed ({run.returncode}): {run.stdout[-500:]} {run.stderr[-1500:]}")
    return match, run


def run(rounds: int = ROUNDS, num_records: int = NUM_RECORDS) -> list[Record]:
    rates: dict[str, list[float]] = {"direct": [], "proxy": []}
    proxy_cores: list[float] = []  # the proxy's CPU seconds per wall second, in runs through it
    all_cores: list[float] = []
    rows: list[list[Any]] = []
    with (
        MockCluster(brokers=BROKERS, topics={TOPIC: PARTITIONS}) as cluster,
        QuietProxy(cluster.bootstrap) as proxy,
    ):
        bootstrap = {"direct": cluster.bootstrap, "proxy": proxy.bootstrap}
        for path in ("direct", "proxy"):  # first connections, page cache, the mock's partition logs
            _perf_test(bootstrap[path], WARMUP_RECORDS)
        for round_no in range(1, rounds + 1):
            # Alternate who goes first, so a drift in the machine's load favours neither.
            order = ("direct", "proxy") if round_no % 2 else ("proxy", "direct")
            for path in order:
                mock_cpu, proxy_cpu = cpu_seconds(cluster.pid), cpu_seconds(proxy.pid)
                match, child = _perf_test(bootstrap[path], num_records)
                mock_cpu = cpu_seconds(cluster.pid) - mock_cpu
                proxy_cpu = cpu_seconds(proxy.pid) - proxy_cpu
                rate = float(match["rate"])
                rates[path].append(rate)
                busy = (mock_cpu + proxy_cpu + child.cpu_s) / child.wall_s
                if path == "proxy":
                    proxy_cores.append(proxy_cpu / child.wall_s)
                    all_cores.append(busy)
                rows.append(
                    [round_no, path, f"{rate:,.0f}", match["mb"], match["avg"], match["p99"],
                     f"{child.wall_s:.2f}", f"{child.cpu_s:.2f}", f"{mock_cpu:.2f}", f"{proxy_cpu:.2f}",
                     f"{busy:.2f}"]
                )  # fmt: skip
        command = display(perf_test_command("<BOOTSTRAP>", TOPIC, num_records, RECORD_SIZE, PRODUCER_PROPS))
    direct, through = median(rates["direct"]), median(rates["proxy"])
    ratio = through / direct
    table = {
        "columns": ["round", "path", "records/s", "MB/s", "avg latency ms", "p99 ms", "wall s",
                    "perf-test CPU s", "mock CPU s", "proxy CPU s", "CPUs busy"],
        "rows": rows,
    }  # fmt: skip
    return [
        measurement(
            "produce_throughput_proxy_vs_direct",
            round(ratio, 3),
            "x direct",
            TARGET_RATIO,
            better="higher",
            title="Produce throughput through the proxy, 1 KB records (median proxy / median direct)",
            table=table,
            notes=[
                f"{rounds} rounds of {num_records:,} records of {RECORD_SIZE} B, direct and through the "
                "proxy alternating (who goes first alternates too), after one "
                f"{WARMUP_RECORDS:,}-record warm-up run each; mock cluster of {BROKERS} brokers, "
                f"topic `{TOPIC}` with {PARTITIONS} partitions.",
                f"median direct {direct:,.0f} records/s, median through the proxy {through:,.0f} records/s.",
                "CPU columns are CPU seconds (user + system) used during that run by each process; "
                "'CPUs busy' is their sum divided by the wall time (2.00 = both cores of this machine).",
                f"In the runs through the proxy, the proxy process kept {median(proxy_cores):.2f} of a core "
                f"busy (median), the three processes together {median(all_cores):.2f} of the 2 cores.",
            ],
            commands=[command + "   # <BOOTSTRAP> = the mock cluster (direct) or the proxy"],
        ),
        measurement("produce_throughput_direct_median", round(direct), "records/s"),
        measurement("produce_throughput_proxy_median", round(through), "records/s"),
    ]


if __name__ == "__main__":
    for record in run():
        print(json.dumps(record))
