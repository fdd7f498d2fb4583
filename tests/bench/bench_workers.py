"""`sluice run --workers N` with real clients: throughput and CPU per GiB at N=1 and N=2.

Several librdkafka producers at once (kafka_client_load.py, 16 KiB batches, acks=1, each its own process
and connection, so the kernel's SO_REUSEPORT can spread them over the workers) through one Sluice with
quotas configured, usage records and `fleet.enabled` on (N > 1 with quotas requires it: the workers share
quotas through the usage topic), in front of a 1-broker mock cluster. N alternates round by round. CPU
is every process of the proxy's tree (the supervising parent and its workers), read to the nanosecond
when the last producer has opened its counted window and when the last has closed it; throughput is the
producers' payload over that span.

Run alone: ``.venv/bin/python tests/bench/bench_workers.py`` or ``tests/bench/run_all.py --only workers``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_real_clients import GIB, PARTITIONS, QUOTA_ENTITIES, RECORD_BYTES, WORKLOADS, client_command
from harness import REPO, QuietProxy, display
from measurements import Record, measurement, median
from mock_cluster_process import MockCluster  # tests/, put on the path by harness
from process_stats import machine_busy_cpu_seconds, precise_user_system_seconds

PRODUCERS = 4
RECORDS_EACH = 150_000
ROUNDS = 3
WORKER_COUNTS = (1, 2)
WORKLOAD = WORKLOADS[0]  # produce-16k-acks1
CONFIG: dict[str, Any] = {
    "quota": {"sensor": "window", "entities": QUOTA_ENTITIES},
    "usage": {"enabled": True, "partitions": 1, "replication_factor": 1},
    "fleet": {"enabled": True},
}


def tree_pids(pid: int) -> list[int]:
    """`pid` and its descendants (from /proc/<pid>/task/*/children)."""
    pids, queue = [], [pid]
    while queue:
        current = queue.pop()
        pids.append(current)
        for children in Path(f"/proc/{current}/task").glob("*/children"):
            queue += [int(child) for child in children.read_text().split()]
    return pids


def tree_cpu_seconds(pid: int) -> float:
    return sum(sum(precise_user_system_seconds(p)) for p in tree_pids(pid))


def _concurrent_producers(
    bootstrap: str, topic: str, proxy_pid: int, mock_pid: int
) -> tuple[float, dict[str, float], int]:
    """(seconds, CPU s of the proxy's tree, of the mock and of the whole machine, payload bytes) from the
    last window_start to the last window_end."""
    commands = [client_command(bootstrap, WORKLOAD, topic, RECORDS_EACH) for _ in range(PRODUCERS)]
    processes = [subprocess.Popen(c, stdout=subprocess.PIPE, text=True, cwd=REPO) for c in commands]
    started, ended = threading.Barrier(PRODUCERS + 1), threading.Barrier(PRODUCERS + 1)
    results: list[dict[str, Any]] = []

    def follow(process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if '"window_start"' in line:
                started.wait(120)
            elif '"window_end"' in line:
                ended.wait(120)
            elif line.startswith("{"):
                results.append(json.loads(line))

    threads = [threading.Thread(target=follow, args=(p,), daemon=True) for p in processes]
    for thread in threads:
        thread.start()
    clocks = {
        "proxy": lambda: tree_cpu_seconds(proxy_pid),
        "mock": lambda: sum(precise_user_system_seconds(mock_pid)),
        "machine": machine_busy_cpu_seconds,  # every process on the machine, other work's too
    }
    started.wait(120)
    before, start = {name: clock() for name, clock in clocks.items()}, time.perf_counter()
    ended.wait(300)
    cpu = {name: clock() - before[name] for name, clock in clocks.items()}
    seconds = time.perf_counter() - start
    for process, thread in zip(processes, threads, strict=True):
        process.wait(60)
        thread.join(10)
    failures = [f for r in results for f in r["failures"]]
    if len(results) != PRODUCERS or failures:
        raise RuntimeError(f"producers failed: {failures or results}")
    return seconds, cpu, sum(r["payload_bytes"] for r in results)


def run(rounds: int = ROUNDS) -> list[Record]:
    rates: dict[int, list[float]] = {n: [] for n in WORKER_COUNTS}
    costs: dict[int, list[float]] = {n: [] for n in WORKER_COUNTS}
    rows: list[list[Any]] = []
    busy: dict[str, list[float]] = {"proxy": [], "machine": []}
    topics = {f"workers-r{r}-n{n}": PARTITIONS for r in range(1, rounds + 1) for n in WORKER_COUNTS}
    with MockCluster(brokers=1, topics=topics) as cluster:
        for round_no in range(1, rounds + 1):
            for n in WORKER_COUNTS if round_no % 2 else tuple(reversed(WORKER_COUNTS)):
                workers = ["--workers", str(n)]
                with QuietProxy(cluster.bootstrap, extra_config=CONFIG, run_args=workers) as proxy:
                    seconds, cpus, payload = _concurrent_producers(
                        proxy.bootstrap, f"workers-r{round_no}-n{n}", proxy.pid, cluster.pid
                    )
                cpu = cpus["proxy"]
                busy["proxy"].append(cpu / seconds)
                busy["machine"].append(cpus["machine"] / seconds)
                gib = payload / GIB
                rates[n].append(payload / 1e6 / seconds)
                costs[n].append(cpu / gib)
                rows.append(
                    [
                        round_no,
                        n,
                        f"{gib:.3f}",
                        f"{seconds:.2f}",
                        f"{payload / 1e6 / seconds:.0f}",
                        f"{cpu:.2f}",
                        f"{cpu / gib:.3f}",
                        f"{cpu / seconds:.2f}",
                        f"{cpus['mock'] / seconds:.2f}",
                        f"{cpus['machine'] / seconds:.2f}",
                    ]
                )
    one, two = median(rates[1]), median(rates[2])
    command = display(client_command("<PROXY>", WORKLOAD, "<TOPIC>", RECORDS_EACH))
    return [
        measurement(
            "workers_2_vs_1_throughput",
            round(two / one, 3),
            "x --workers 1",
            title="`sluice run --workers N` with real clients (N=1, N=2, 2 cores)",
            table={
                "columns": [
                    "round",
                    "workers",
                    "GiB",
                    "seconds",
                    "MB/s",
                    "proxy CPU s (all processes)",
                    "proxy CPU s/GiB",
                    "proxy cores busy",
                    "mock cores busy",
                    "machine cores busy",
                ],
                "rows": rows,
            },
            notes=[
                f"{PRODUCERS} producers at once, {RECORDS_EACH:,} records of {RECORD_BYTES:,} B each, "
                f"16 KiB batches, acks=1, one topic of {PARTITIONS} partitions per run; Sluice with quotas "
                "configured, usage records and fleet.enabled on; a fresh proxy per run, N alternating.",
                f"median throughput: {one:.0f} MB/s at N=1, {two:.0f} MB/s at N=2; median proxy CPU per "
                f"GiB: {median(costs[1]):.3f} at N=1, {median(costs[2]):.3f} at N=2.",
                f"What limits scaling here: the proxy's processes kept {median(busy['proxy']):.2f} of a core "
                f"busy (median) while the machine had {median(busy['machine']):.2f} of its 2 cores busy: "
                "the four producers (librdkafka plus a Python loop each), the mock broker and whatever else "
                "runs on the machine take the cores, so a second worker has no idle core to use and only "
                "adds its own costs (a second process's timers and fleet exchange over the usage topic, and "
                "fewer requests per read on each worker, since the connections are split between them). "
                "More workers pay only where the proxy is what fills a core: more cores than this "
                "machine's 2, or the proxy's core the busiest.",
            ],
            commands=[
                "sluice run --config <CONFIG> --workers N",
                command + f"   # {PRODUCERS} of these at once",
            ],
        ),
        measurement("workers_1_cpu_per_gib", round(median(costs[1]), 3), "CPU s/GiB"),
        measurement("workers_2_cpu_per_gib", round(median(costs[2]), 3), "CPU s/GiB"),
        measurement("workers_1_throughput", round(one, 1), "MB/s"),
        measurement("workers_2_throughput", round(two, 1), "MB/s"),
    ]


if __name__ == "__main__":
    for record in run():
        print(json.dumps(record))
