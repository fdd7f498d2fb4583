"""Compare relay_variants.py's variants in one run, rounds alternating, in front of a 1-broker mock cluster.

bulk: wire_load.py's 1 MiB Produce requests (4 in flight); CPU seconds per GiB of each variant's process
and its minor page faults per GiB (from /proc: faults do not depend on what else runs on the machine).
small: tiny pipelined Produce requests (8 connections x 256 in flight); CPU us per request, answers/s.

Run: ``.venv/bin/python tests/bench/experiments/compare_variants.py relay,join,stream,join:33554432:4194304
--rounds 5`` (a variant may carry ``:TRIM:MMAP`` mallopt values).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.append(str(Path(__file__).resolve().parents[2]))  # tests/: the test broker and proxy handles

from harness import PYTHON, run_child, run_windowed, wire_load_command
from mock_cluster_process import MockCluster
from process_stats import minor_faults

GIB = 1 << 30


class Variant:
    def __init__(self, upstream: str, spec: str) -> None:
        name, *malloc = spec.split(":")
        command = [PYTHON, str(Path(__file__).with_name("relay_variants.py")), "--upstream", upstream]
        command += ["--variant", name]
        if malloc and malloc[0]:
            command += ["--trim", malloc[0]]
        if len(malloc) > 1 and malloc[1]:
            command += ["--mmap", malloc[1]]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.process.stdout is not None
        self.port = int(self.process.stdout.readline().split()[1])

    def close(self) -> None:
        self.process.terminate()
        self.process.wait()


def load(port: int, kind: str, requests: int) -> list[str]:
    if kind == "bulk":
        return wire_load_command(port, kind="produce", topic="bulk", record_bytes=104857, records=10,
                                 requests=requests, in_flight=4, check_every=64)  # fmt: skip
    return wire_load_command(port, kind="produce", topic="small", record_bytes=100, records=1, connections=8,
                             in_flight=256, batch=32, requests=requests, check_every=5000)  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("variants", help="comma-separated: relay,join,pieces,stream,bstream,bjoin[:TRIM[:MMAP]]")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--kind", choices=("bulk", "small"), default="bulk")
    p.add_argument("--requests", type=int, default=0, help="per round (default 1024 bulk, 200000 small)")
    args = p.parse_args()
    requests = args.requests or (1024 if args.kind == "bulk" else 200_000)
    specs = args.variants.split(",")
    costs: dict[str, list[float]] = {s: [] for s in specs}
    other: dict[str, list[float]] = {s: [] for s in specs}
    with MockCluster(brokers=1, topics={"bulk": 1, "small": 1}) as cluster:
        variants = {spec: Variant(cluster.bootstrap, spec) for spec in specs}
        try:
            for variant in variants.values():  # warm-up
                run_child(load(variant.port, args.kind, 64 if args.kind == "bulk" else 20_000))
            for round_no in range(args.rounds):
                for spec in specs if round_no % 2 == 0 else list(reversed(specs)):
                    pid = variants[spec].process.pid
                    faults = minor_faults(pid)
                    run = run_windowed(load(variants[spec].port, args.kind, requests), {"middle": pid})
                    if args.kind == "bulk":
                        gib = run.result["request_bytes"] / GIB
                        costs[spec].append(run.window_cpu_s["middle"] / gib)
                        other[spec].append((minor_faults(pid) - faults) / gib)
                    else:
                        costs[spec].append(run.window_cpu_s["middle"] / run.result["answers"] * 1e6)
                        other[spec].append(run.result["answers_per_s"])
        finally:
            for variant in variants.values():
                variant.close()
    unit, second = (
        ("CPU s/GiB", "minor faults/GiB") if args.kind == "bulk" else ("CPU us/request", "answers/s")
    )
    for spec in specs:
        rounds = ", ".join(f"{c:.3f}" for c in costs[spec])
        print(f"{spec:26s} {unit} median {statistics.median(costs[spec]):.3f} ({rounds}); "
              f"{second} median {statistics.median(other[spec]):,.0f}")  # fmt: skip


if __name__ == "__main__":
    main()
