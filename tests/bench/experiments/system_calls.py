"""System calls of the proxy per request (strace -c), for several source trees, with section 2b's quotas.

Each tree's `sluice run` (`<tree>/.venv/bin/python -m sluice.proxy run`, which restarts itself with
PYTHONMALLOC=malloc before it serves) in front of canned_broker.py, with section 2b's quota entities (a
`request_percentage` quota among them, so the connection times its passes) and the load's client-id
charged on every request;
wire_load.py sends section 9's shape (small Produce requests, 4 connections, one in flight each) or, with
`--fetch-bytes`, Fetch requests answered with that many bytes (one connection, 4 in flight). `strace -c -f`
is attached for the counted load only (after a warm-up), so start-up is not counted. The count does not
move with what else runs on the machine, where CPU time does (docs/benchmarks.md, section 2b's appendix).

Run: ``.venv/bin/python tests/bench/experiments/system_calls.py --trees /work/wt-before,/work/main
[--requests 20000] [--fetch-bytes 94000]``.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.append(str(Path(__file__).resolve().parents[2]))  # tests/: the test broker and proxy handles

from bench_real_clients import CLIENT_ID, QUOTA_ENTITIES
from harness import CannedBrokerProcess, run_child, wire_load_command
from proxy_process import ProxyProcess

PRODUCE = {"kind": "produce", "topic": "small", "record_bytes": 1024, "records": 16, "connections": 4,
           "in_flight": 1, "batch": 1, "check_every": 5000}  # fmt: skip
FETCH = {"kind": "fetch", "topic": "fetched", "connections": 1, "in_flight": 4, "check_every": 1000}


def _strace_attached(pid: int, out: Path) -> subprocess.Popen[bytes]:
    tracer = subprocess.Popen(["strace", "-c", "-f", "-p", str(pid), "-o", str(out)], stderr=subprocess.PIPE)
    assert tracer.stderr is not None
    tracer.stderr.readline()  # "strace: Process <pid> attached": counting from here
    return tracer


def count(tree: Path, upstream: str, load: dict[str, object], requests: int) -> dict[str, int]:
    """System call name -> calls of `tree`'s proxy over `requests` counted requests."""
    out = Path(tempfile.mkdtemp(prefix="sluice-strace-")) / "strace.txt"
    command = [str(tree / ".venv" / "bin" / "python"), "-m", "sluice.proxy"]
    quota = {"quota": {"sensor": "window", "entities": QUOTA_ENTITIES}}
    with ProxyProcess(upstream, extra_config=quota, log_level="warning", command=command) as proxy:
        run_child(wire_load_command(proxy.port, requests=500, **load), timeout_s=120)  # warm-up
        tracer = _strace_attached(proxy.process.pid, out)
        counted = run_child(wire_load_command(proxy.port, requests=requests, **load), timeout_s=600)
        result = counted.last_json()
        tracer.send_signal(signal.SIGINT)
        tracer.wait(30)
    if result["answers"] != requests or result["errors"]:
        raise RuntimeError(f"the load failed: {result}")
    calls: dict[str, int] = {}
    for line in out.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[0][0].isdigit() and fields[-1] != "total":
            calls[fields[-1]] = int(fields[3])
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", required=True, help="comma-separated source trees, each with its .venv")
    parser.add_argument("--requests", type=int, default=0, help="counted requests (20,000; Fetch 5,000)")
    parser.add_argument("--fetch-bytes", type=int, default=0, help="Fetch answers of this size, not Produce")
    args = parser.parse_args()
    load = {**(FETCH if args.fetch_bytes else PRODUCE), "client_id": CLIENT_ID}
    requests = args.requests or (5_000 if args.fetch_bytes else 20_000)
    trees = [Path(tree).resolve() for tree in args.trees.split(",")]
    topic = str(load["topic"])
    with CannedBrokerProcess(topic, args.fetch_bytes or None) as broker:
        counted = {tree: count(tree, broker.address, load, requests) for tree in trees}
    names = sorted({name for calls in counted.values() for name, n in calls.items() if n >= requests // 100})
    print(f"| system calls over {requests:,} requests | " + " | ".join(str(tree) for tree in trees) + " |")
    print("|---|" + "---|" * len(trees))
    for name in names:
        print(f"| {name} | " + " | ".join(f"{counted[tree].get(name, 0):,}" for tree in trees) + " |")
    totals = [sum(counted[tree].values()) / requests for tree in trees]
    print("| all, per request | " + " | ".join(f"{total:.2f}" for total in totals) + " |")


if __name__ == "__main__":
    main()
