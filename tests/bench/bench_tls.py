"""The cost of TLS on the client side, so an operator can size it.

Two proxies in front of one 1-broker mock cluster, the same but for `tls.listener` (a certificate from a
throw-away CA, tests/tls_certs.py; ECDSA P-256, whatever TLS 1.3 cipher Python's OpenSSL picks); the
broker side is plaintext in both. Measured in the same run:

* CPU per GiB: wire_load.py's 1 MiB Produce requests (as section 2), through the plaintext proxy and the
  TLS proxy, rounds alternating; the proxy's CPU seconds per GiB relayed (decryption included).
* added latency: open_loop.py at 50 % of the direct path's capacity (as section 9), direct to the broker
  (plaintext), through the plaintext proxy and through the TLS proxy: p50, p99, p99.9, and the added p99.

No target here: these are sizing figures.

Run alone: ``.venv/bin/python tests/bench/bench_tls.py`` (one JSON record per line).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the test CA

from bench_latency import (
    CAPACITY_ROUNDS,
    LATENCY_COLUMNS,
    capacity,
    latency_row,
    ms,
    open_loop_command,
    open_loop_run,
)
from bench_latency import (
    TOPIC as LATENCY_TOPIC,
)
from bench_relay_cpu import RECORD_BYTES, RECORDS_PER_REQUEST, wire_command
from bench_relay_cpu import TOPIC as BULK_TOPIC
from harness import QuietProxy, display, run_child, run_windowed
from measurements import Record, measurement, median
from mock_cluster_process import MockCluster
from tls_certs import TestCA

GIB = 1 << 30
ROUNDS = 3
REQUESTS_PER_RUN = 1024  # about 1 GiB
LOAD = 0.5
DURATION_S = 8.0


def run(
    rounds: int = ROUNDS,
    requests: int = REQUESTS_PER_RUN,
    duration_s: float = DURATION_S,
    capacity_rounds: int = CAPACITY_ROUNDS,
) -> list[Record]:
    with tempfile.TemporaryDirectory(prefix="sluice-bench-tls-") as directory:
        ca = TestCA(Path(directory))
        cert, key = ca.issue("proxy", common_name="localhost")
        tls_config = {"tls": {"listener": {"cert": str(cert), "key": str(key)}}}
        with (
            MockCluster(brokers=1, topics={BULK_TOPIC: 1, LATENCY_TOPIC: 1}) as cluster,
            QuietProxy(cluster.bootstrap) as plain,
            QuietProxy(cluster.bootstrap, extra_config=tls_config) as tls,
        ):
            return _measure(
                cluster, plain, tls, str(ca.ca_path), rounds, requests, duration_s, capacity_rounds
            )


def _measure(
    cluster: MockCluster,
    plain: QuietProxy,
    tls: QuietProxy,
    ca: str,
    rounds: int,
    requests: int,
    duration_s: float,
    capacity_rounds: int,
) -> list[Record]:
    proxies = {"plaintext proxy": (plain, None), "TLS proxy": (tls, ca)}
    for proxy, tls_ca in proxies.values():
        run_child(wire_command(proxy.port, requests=32, tls_ca=tls_ca))  # warm-up, not counted
    per_gib: dict[str, list[float]] = {name: [] for name in proxies}
    cpu_rows: list[list[Any]] = []
    for round_no in range(1, rounds + 1):
        order = list(proxies) if round_no % 2 else list(reversed(proxies))
        for name in order:
            proxy, tls_ca = proxies[name]
            run = run_windowed(
                wire_command(proxy.port, requests=requests, tls_ca=tls_ca),
                {"proxy": proxy.pid, "mock": cluster.pid},
            )
            gib = run.result["request_bytes"] / GIB
            cost = run.window_cpu_s["proxy"] / gib
            per_gib[name].append(cost)
            seconds = run.result["seconds"]
            cpu_rows.append([round_no, name, f"{gib:.2f}", f"{seconds:.2f}", f"{gib / seconds:.2f}",
                             f"{cost:.3f}", f"{run.child.cpu_s / gib:.3f}"])  # fmt: skip
    tls_cpu, plain_cpu = median(per_gib["TLS proxy"]), median(per_gib["plaintext proxy"])

    direct_port = cluster.addresses[0][1]
    full_rate, capacity_notes = capacity(direct_port, {"mock": cluster.pid}, capacity_rounds)
    rate = full_rate * LOAD
    paths: dict[str, tuple[int, str | None, dict[str, int]]] = {
        "direct": (direct_port, None, {"mock": cluster.pid}),
        "plaintext proxy": (plain.port, None, {"middle": plain.pid, "mock": cluster.pid}),
        "TLS proxy": (tls.port, ca, {"middle": tls.pid, "mock": cluster.pid}),
    }
    results: dict[str, dict[str, Any]] = {}
    latency_rows: list[list[Any]] = []
    for path, (port, tls_ca, watched) in paths.items():
        run = open_loop_run(open_loop_command(port, rate, duration_s, tls_ca=tls_ca), watched)
        results[path] = run.result
        latency_rows.append(latency_row(f"{LOAD:.0%}", rate, path, run))
    added = {
        path: ms(results[path], "p99") - ms(results["direct"], "p99") for path in paths if path != "direct"
    }
    cpu_command = display(wire_command(0, requests=requests, tls_ca="<CA>")).replace(
        "--port 0", "--port <PORT>"
    )
    latency_command = display(open_loop_command(0, 0, duration_s, tls_ca="<CA>"))
    latency_command = latency_command.replace("--port 0", "--port <PORT>").replace(
        "--rate 0", "--rate <RATE>"
    )
    return [
        measurement(
            "tls_proxy_cpu_per_gib_1mib_produce",
            round(tls_cpu, 3),
            "CPU s/GiB",
            better="lower",
            title="Proxy CPU per GiB relayed with TLS on the client side, 1 MiB Produce requests (median)",
            table={
                "columns": [
                    "round",
                    "proxy",
                    "GiB",
                    "seconds",
                    "GiB/s",
                    "proxy CPU s/GiB",
                    "load generator CPU s/GiB",
                ],
                "rows": cpu_rows,
            },
            notes=[
                f"{rounds} rounds of {requests} Produce v7 requests (one batch of {RECORDS_PER_REQUEST} "
                f"records of {RECORD_BYTES:,} B, acks=1), 4 in flight on one connection, alternating the "
                "plaintext and the TLS proxy (tls.listener; broker side plaintext), one 1-broker mock "
                "cluster behind both.",
                f"median: TLS {tls_cpu:.3f}, plaintext {plain_cpu:.3f} CPU s/GiB; TLS / plaintext = "
                f"{tls_cpu / plain_cpu:.2f}.",
            ],
            commands=[cpu_command + "   # <PORT> = a proxy; --tls-ca only for the TLS proxy"],
        ),
        measurement("plaintext_proxy_cpu_per_gib_1mib_produce_same_run", round(plain_cpu, 3), "CPU s/GiB"),
        measurement(
            "tls_latency_p99_added_ms_at_50pct",
            round(added["TLS proxy"], 3),
            "ms",
            better="lower",
            title="Open-loop produce latency at 50 % of the direct capacity, direct and through both proxies",
            table={"columns": LATENCY_COLUMNS, "rows": latency_rows},
            notes=[
                f"direct capacity {full_rate:,.0f} requests/s ({'; '.join(capacity_notes)}), offered "
                f"{rate:,.0f}/s; the same open-loop load as section 9; direct is plaintext (the broker "
                "has no TLS listener), so the TLS row's added figure includes the client's own TLS work.",
                f"p99 added: plaintext proxy {added['plaintext proxy']:+.3f} ms, TLS proxy "
                f"{added['TLS proxy']:+.3f} ms.",
            ],
            commands=[latency_command + "   # <PORT> = the broker or a proxy; --tls-ca: the TLS proxy only"],
        ),
        measurement(
            "plaintext_latency_p99_added_ms_at_50pct_same_run",
            round(added["plaintext proxy"], 3),
            "ms",
            better="lower",
        ),
    ]


if __name__ == "__main__":
    for record in run():
        print(json.dumps(record))
