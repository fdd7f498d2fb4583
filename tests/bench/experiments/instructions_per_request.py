"""Instructions (valgrind callgrind's Ir) per request of the proxy or the bare relay: a figure that does not
move with what else runs on the machine, to decide between small-request optimisations.

The middle process runs under callgrind in front of canned_broker.py (or the mock cluster with --mock);
wire_load.py sends tiny pipelined Produce requests (8 connections x 256 in flight, 32 per write, as
section 3) or 1 MiB ones (--bulk, mock cluster). Counters are zeroed when the counted load starts and
dumped when it ends (callgrind_control), so start-up and shut-down are not counted. User-space instructions
only: the kernel's work (copies, page faults) is not in them; use compare_variants.py's CPU and faults for
that.

Run: ``.venv/bin/python tests/bench/experiments/instructions_per_request.py [--requests 20000] [--quotas]
[--relay] [--mock] [--bulk]`` (about 20 s for 20,000 small requests).
"""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.append(str(Path(__file__).resolve().parents[2]))  # tests/: the test broker and proxy handles

import bench_relay_cpu
from harness import BENCH_DIR, CannedBrokerProcess, run_child, wire_load_command
from mock_cluster_process import MockCluster

from sluice.proxy.listeners.ports import free_port_block

SMALL = {"kind": "produce", "topic": "small", "record_bytes": 100, "records": 1, "connections": 8,
         "in_flight": 256, "batch": 32, "check_every": 5000}  # fmt: skip
BULK = {"kind": "produce", "topic": "bulk", "record_bytes": 104857, "records": 10, "in_flight": 4,
        "check_every": 64}  # fmt: skip


def _wait_for_port(port: int, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"nothing listens on {port}")


def measure(upstream: str, args: argparse.Namespace) -> int:
    """Total Ir of the middle process over the counted load."""
    work = Path(tempfile.mkdtemp(prefix="sluice-callgrind-"))
    port = free_port_block(16)
    out = work / "callgrind.out"
    valgrind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable]
    if args.relay:
        command = [*valgrind, str(BENCH_DIR / "bare_relay.py"), "--upstream", upstream]
        command += ["--listen", f"127.0.0.1:{port}"]
    else:
        config = {
            "listen": f"127.0.0.1:{port}",
            "advertised_host": "127.0.0.1",
            "broker_port_base": port + 2,
            "upstream": {"bootstrap": [upstream]},
            "log": {"level": "warning", "format": "json"},
        }
        if args.quotas:
            config |= bench_relay_cpu.QUOTA_CONFIG
        (work / "sluice.yaml").write_text(yaml.safe_dump(config))
        command = [*valgrind, "-m", "sluice.proxy", "run", "--config", str(work / "sluice.yaml")]
    middle = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    load = BULK if args.bulk else SMALL
    try:
        _wait_for_port(port)
        time.sleep(2)
        run_child(
            wire_load_command(port, requests=8 if args.bulk else 2000, **load), timeout_s=600
        )  # warm-up
        subprocess.run(["callgrind_control", "-z", str(middle.pid)], capture_output=True, check=True)
        run = run_child(wire_load_command(port, requests=args.requests, **load), timeout_s=1800)
        subprocess.run(["callgrind_control", "-d", str(middle.pid)], capture_output=True, check=True)
        result = run.last_json()
        if result["answers"] != args.requests or result["errors"]:
            raise RuntimeError(f"the load failed: {result}")
    finally:
        middle.send_signal(signal.SIGTERM)
        middle.wait(120)
    dumps = sorted(p for p in work.glob("callgrind.out*") if p != out)
    for line in dumps[0].read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError("no totals in the callgrind dump")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=0, help="counted requests (20,000 small, 256 bulk)")
    p.add_argument("--quotas", action="store_true", help="the proxy with section 2's quota entities")
    p.add_argument("--relay", action="store_true", help="measure bare_relay.py instead of the proxy")
    p.add_argument("--mock", action="store_true", help="the mock cluster upstream, not canned_broker.py")
    p.add_argument("--bulk", action="store_true", help="1 MiB Produce requests (mock cluster)")
    args = p.parse_args()
    args.requests = args.requests or (256 if args.bulk else 20_000)
    if args.mock or args.bulk:
        with MockCluster(brokers=1, topics={"small": 1, "bulk": 1}) as cluster:
            total = measure(cluster.bootstrap, args)
    else:
        with CannedBrokerProcess("small") as broker:
            total = measure(broker.address, args)
    print(f"{'relay' if args.relay else 'proxy'}{' with quotas' if args.quotas else ''}: {total:,} Ir for "
          f"{args.requests:,} requests, {total / args.requests:,.0f} per request")  # fmt: skip


if __name__ == "__main__":
    main()
