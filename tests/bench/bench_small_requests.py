"""Small requests per second through one proxy process: >= 50,000 behind the mock cluster, and >= 150,000
behind a broker that is not the bottleneck.

wire_load.py (one process, uvloop) keeps 8 connections busy with pipelined tiny Produce requests (one
100-byte record, acks=1): 256 in flight per connection, written 32 per system call. The same load runs
straight at the 1-broker mock cluster, through the bare relay, and through the proxy, alternating; the
answers per second over a 4 s window (after 1 s of warm-up) are counted. Metadata v1 requests (which
the proxy decodes and rewrites) run once per path as a second, harder case.

The mock cluster answers at a finite rate too, so each row also says how busy the proxy was in the
window (its CPU seconds / window seconds): below 1.0 the proxy had CPU to spare and the limit was
elsewhere (the mock, or the load generator, all sharing two cores).

The mock cluster itself tops out at about 90,000-100,000 of these per second on one core (the direct
rows), so nothing behind it can show more. The >= 150,000 per second target (through one process)
is therefore measured a second time, with the same load, in front of canned_broker.py, which answers every
Produce with a canned success at memory speed: there the proxy is the bottleneck. Both middles' CPU per
request (proxy and bare relay, same load, same run) are reported side by side; 1,000,000 / that figure is
what one fully busy core could relay.

Run alone: ``.venv/bin/python tests/bench/bench_small_requests.py`` (one JSON record per line).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parents[1]))  # tests/: the test broker and proxy handles

from harness import (
    BareRelayProcess,
    CannedBrokerProcess,
    QuietProxy,
    display,
    run_windowed,
    wire_load_command,
)
from measurements import Record, measurement, median
from mock_cluster_process import MockCluster

TARGET_PER_S = 50_000  # behind the mock cluster
TARGET_FAST_UPSTREAM_PER_S = 150_000  # behind a broker that is not the bottleneck
TOPIC = "small"
CONNECTIONS = 8
IN_FLIGHT = 256
BATCH = 32
WARMUP_S = 1
DURATION_S = 4
PRODUCE_ROUNDS = 3
METADATA_ROUNDS = 1
PATHS = ("direct", "bare relay", "proxy")


def _command(port: int, kind: str) -> list[str]:
    options: dict[str, object] = {"kind": kind}
    if kind == "produce":
        options |= {"topic": TOPIC, "record_bytes": 100, "records": 1}
    options |= {
        "connections": CONNECTIONS,
        "in_flight": IN_FLIGHT,
        "batch": BATCH,
        "warmup": WARMUP_S,
        "duration": DURATION_S,
        "check_every": 5000,
    }
    return wire_load_command(port, **options)


def _measure(
    kind: str, rounds: int, ports: dict[str, int], pids: dict[str, int], mock_pid: int, upstream: str = "mock"
) -> dict:
    rates: dict[str, list[float]] = {path: [] for path in PATHS}
    cpu_us: dict[str, list[float]] = {path: [] for path in PATHS if path != "direct"}
    rows: list[list[Any]] = []
    for round_no in range(1, rounds + 1):
        order = PATHS if round_no % 2 else tuple(reversed(PATHS))
        for path in order:
            watched = {"middle": pids[path], "mock": mock_pid}
            run = run_windowed(_command(ports[path], kind), watched)
            seconds = run.result["seconds"]
            rate = run.result["answers_per_s"]
            rates[path].append(rate)
            middle = "—" if path == "direct" else f"{run.window_cpu_s['middle'] / seconds:.2f}"
            per_request = "—"
            if path != "direct":
                us = run.window_cpu_s["middle"] / run.result["answers"] * 1e6
                cpu_us[path].append(us)
                per_request = f"{us:.2f}"
            rows.append(
                [upstream, kind, round_no, path, f"{rate:,.0f}", middle, per_request,
                 f"{run.window_cpu_s['mock'] / seconds:.2f}", f"{run.child.cpu_s / run.child.wall_s:.2f}"]
            )  # fmt: skip
    return {
        "median": {path: median(values) for path, values in rates.items()},
        "cpu_us": {path: median(values) for path, values in cpu_us.items()},
        "rows": rows,
    }


def run(
    produce_rounds: int = PRODUCE_ROUNDS, metadata_rounds: int = METADATA_ROUNDS, mock: bool = True
) -> list[Record]:
    fast = _fast_upstream(produce_rounds)
    if not mock:
        return fast
    with (
        MockCluster(brokers=1, topics={TOPIC: 1}) as cluster,
        QuietProxy(cluster.bootstrap) as proxy,
        BareRelayProcess(cluster.bootstrap) as relay,
    ):
        ports = {"direct": cluster.addresses[0][1], "bare relay": relay.port, "proxy": proxy.port}
        pids = {"direct": cluster.pid, "bare relay": relay.pid, "proxy": proxy.pid}
        produce = _measure("produce", produce_rounds, ports, pids, cluster.pid)
        metadata = _measure("metadata", metadata_rounds, ports, pids, cluster.pid)
    through, direct, relay_rate = (produce["median"][p] for p in ("proxy", "direct", "bare relay"))
    table = {
        "columns": ["upstream", "request", "round", "path", "answers/s", "proxy or relay CPUs busy",
                    "proxy or relay CPU µs/request", "upstream CPUs busy", "load generator CPUs busy"],
        "rows": produce["rows"] + metadata["rows"],
    }  # fmt: skip
    commands = [
        display(_command(0, kind)).replace("--port 0", "--port <PORT>")
        + "   # <PORT> = the mock broker, the relay or the proxy"
        for kind in ("produce", "metadata")
    ]
    return [
        measurement(
            "small_produce_requests_per_s_proxy",
            round(through),
            "requests/s",
            TARGET_PER_S,
            title="Small requests per second through one proxy process (tiny Produce, acks=1, median)",
            table=table,
            notes=[
                f"{CONNECTIONS} connections from one load generator process, {IN_FLIGHT} requests in flight "
                f"per connection, {BATCH} per write; {WARMUP_S} s warm-up, then {DURATION_S} s counted; "
                f"{produce_rounds} rounds of Produce (one 100-byte record, acks=1, Produce v7) and "
                f"{metadata_rounds} of Metadata v1 (no topics; the proxy rewrites its broker list), paths "
                "alternating; 1-broker mock cluster.",
                f"Produce medians: direct {direct:,.0f}/s, bare relay {relay_rate:,.0f}/s, "
                f"proxy {through:,.0f}/s (proxy / direct = {through / direct:.2f}).",
                "'CPUs busy' = CPU seconds used in the counted window / window seconds (1.00 = one core). "
                "The mock cluster and the load generator share the same two cores.",
            ],
            commands=commands,
        ),
        measurement("small_produce_requests_per_s_direct", round(direct), "requests/s"),
        measurement("small_produce_requests_per_s_bare_relay", round(relay_rate), "requests/s"),
        measurement("metadata_v1_requests_per_s_proxy", round(metadata["median"]["proxy"]), "requests/s"),
        measurement("metadata_v1_requests_per_s_direct", round(metadata["median"]["direct"]), "requests/s"),
        *fast,
    ]


def _fast_upstream(rounds: int) -> list[Record]:
    """The same tiny Produce load in front of canned_broker.py: direct, through the relay, the proxy."""
    with (
        CannedBrokerProcess(TOPIC) as broker,
        QuietProxy(broker.address) as proxy,
        BareRelayProcess(broker.address) as relay,
    ):
        ports = {"direct": broker.port, "bare relay": relay.port, "proxy": proxy.port}
        pids = {"direct": broker.process.pid, "bare relay": relay.pid, "proxy": proxy.pid}
        produce = _measure("produce", rounds, ports, pids, broker.process.pid, upstream="canned")
    rates, cpu_us = produce["median"], produce["cpu_us"]
    table = {
        "columns": ["upstream", "request", "round", "path", "answers/s", "proxy or relay CPUs busy",
                    "proxy or relay CPU µs/request", "upstream CPUs busy", "load generator CPUs busy"],
        "rows": produce["rows"],
    }  # fmt: skip
    command = display(_command(0, "produce")).replace("--port 0", "--port <PORT>")
    ratio = cpu_us["proxy"] / cpu_us["bare relay"]
    return [
        measurement(
            "small_produce_requests_per_s_proxy_fast_upstream",
            round(rates["proxy"]),
            "requests/s",
            TARGET_FAST_UPSTREAM_PER_S,
            title="Small requests per second through one proxy process, in front of a broker that is not "
            "the bottleneck (canned_broker.py; tiny Produce, acks=1, median)",
            table=table,
            notes=[
                f"the load of the table above ({CONNECTIONS} connections, {IN_FLIGHT} in flight each, "
                f"{BATCH} per write, {rounds} rounds, paths alternating), in front of canned_broker.py "
                "(answers each Produce with a canned success; it stores nothing) instead of the mock "
                "cluster, whose own ceiling is the direct rows of the table above.",
                f"medians: direct {rates['direct']:,.0f}/s, bare relay {rates['bare relay']:,.0f}/s, proxy "
                f"{rates['proxy']:,.0f}/s.",
                f"CPU per request (median): proxy {cpu_us['proxy']:.2f} µs, bare relay "
                f"{cpu_us['bare relay']:.2f} µs (proxy / relay = {ratio:.2f}); "
                f"one fully busy core would relay {1e6 / cpu_us['proxy']:,.0f}/s through the proxy, "
                f"{1e6 / cpu_us['bare relay']:,.0f}/s through the relay.",
            ],
            commands=[
                command + "   # <PORT> = the canned broker, the relay or the proxy",
                ".venv/bin/python tests/bench/canned_broker.py --topic small",
            ],
        ),
        measurement("small_produce_proxy_cpu_us_per_request", round(cpu_us["proxy"], 2), "CPU µs/request"),
        measurement(
            "small_produce_bare_relay_cpu_us_per_request", round(cpu_us["bare relay"], 2), "CPU µs/request"
        ),
        measurement(
            "small_produce_requests_per_s_bare_relay_fast_upstream", round(rates["bare relay"]), "requests/s"
        ),
        measurement("small_produce_requests_per_s_canned_direct", round(rates["direct"]), "requests/s"),
    ]


if __name__ == "__main__":
    for record in run():
        print(json.dumps(record))
