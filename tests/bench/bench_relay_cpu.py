"""Proxy CPU <= 0.6 CPU-seconds per GiB relayed with 1 MiB Produce requests, and <= 1.3 x
a bare uvloop relay measured in the same run, with quotas configured and binding on some entities.

Two measurements, both in front of a 1-broker mock cluster:

* side by side with a bare asyncio Protocol relay (bare_relay.py): a real client would learn the mock's
  own address from Metadata and bypass a relay that cannot rewrite it, so both are driven by
  wire_load.py, which pipelines pre-built ~1 MiB Produce v7 requests (acks=1) over one connection;
  rounds alternate between proxy and relay. CPU is read from /proc/<pid>/stat when the load generator
  opens and closes its counted window; GiB are request bytes sent through the middle process.
* through the proxy only, with a real client: `sluice perf-test` with 100 KB records batched into
  ~1 MiB requests; the request size and the GiB come from the proxy's own Prometheus counters.

The proxy has quotas configured (QUOTA_ENTITIES): the load generators' client-ids are covered by bounds
they never reach (producer_byte_rate 10 GB/s, request_percentage 1000 %), so every request is charged to
its Produce sensor and every response to its Request sensor (the proxy times every read on the monotonic
clock); meanwhile a small producer with client-id `pump` (wire_load.py, ~10 KB requests, one in
flight) runs against the proxy all along and is held to its 100,000 B/s, so throttles are computed,
written into answers and muted on one connection while the bulk load is measured. After the rounds the
proxy's metrics must show the pump throttled and the bulk load not, or the benchmark fails.

Run alone: ``.venv/bin/python tests/bench/bench_relay_cpu.py`` (one JSON record per line).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parents[1]))  # tests/: the test broker and proxy handles

from bench_quota_overhead import _samples
from harness import (
    BareRelayProcess,
    QuietProxy,
    display,
    perf_test_command,
    run_child,
    run_windowed,
    wire_load_command,
)
from measurements import Record, measurement, median
from mock_cluster_process import MockCluster
from process_stats import cpu_seconds

TARGET_CPU_S_PER_GIB = 0.6
TARGET_RATIO_TO_RELAY = 1.3
GIB = 1 << 30
TOPIC = "bulk"
RECORD_BYTES = 104_857  # ten of them, plus batch and request overhead: a frame of just over 1 MiB
RECORDS_PER_REQUEST = 10
REQUESTS_PER_RUN = 2048  # about 2 GiB
IN_FLIGHT = 4
ROUNDS = 5
REAL_CLIENT_RECORD_SIZE = 102_400
REAL_CLIENT_RECORDS = 20_000  # about 2 GiB in ~1 MiB requests
REAL_CLIENT_PROPS = {"acks": "1", "batch.size": "1048576", "linger.ms": "50", "message.max.bytes": "2000000"}
BULK_CLIENT_ID = "sluice-bench"  # wire_load.py's
PERF_CLIENT_ID = "perf-producer-client"  # sluice perf-test's
PUMP_CLIENT_ID = "pump"
PUMP_RATE = 100_000  # B/s: the pump is held to it
NEVER = {"producer_byte_rate": 10_000_000_000, "request_percentage": 1000.0}
QUOTA_ENTITIES: list[dict[str, Any]] = [
    {"client_id": BULK_CLIENT_ID, **NEVER},
    {"client_id": PERF_CLIENT_ID, **NEVER},
    {"client_id": PUMP_CLIENT_ID, "producer_byte_rate": PUMP_RATE},
    {"user": "alice", "client_id": PUMP_CLIENT_ID, "producer_byte_rate": 200_000},
    {"user": "<default>", "consumer_byte_rate": 2048},
]
QUOTA_CONFIG = {"quota": {"sensor": "window", "entities": QUOTA_ENTITIES}}
PUMP_LOAD: dict[str, object] = {
    "client_id": PUMP_CLIENT_ID,
    "kind": "produce",
    "topic": TOPIC,
    "record_bytes": 1000,
    "records": 10,
    "in_flight": 1,
    "warmup": 0,
    "duration": 3600,  # stopped when the rounds are over
    "check_every": 100,
}


def _produce_counters(proxy: QuietProxy) -> tuple[float, float]:
    return proxy.counter("sluice_requests_total", "Produce"), proxy.counter(
        "sluice_request_bytes_total", "Produce"
    )


def wire_command(port: int, requests: int = REQUESTS_PER_RUN, tls_ca: str | None = None) -> list[str]:
    options: dict[str, object] = {"tls_ca": tls_ca} if tls_ca else {}
    return wire_load_command(
        port,
        kind="produce",
        topic=TOPIC,
        record_bytes=RECORD_BYTES,
        records=RECORDS_PER_REQUEST,
        requests=requests,
        in_flight=IN_FLIGHT,
        check_every=64,
        **options,
    )


def _check_counters(side: dict, pump_bytes: int) -> None:
    """The proxy saw every byte the bulk load sent it: its Produce counters over the rounds hold those
    bytes plus at most what the pump sent all along."""
    extra = side["proxy_counted"] - side["proxy_sent"]
    if not -0.001 * side["proxy_sent"] <= extra <= 0.001 * side["proxy_sent"] + pump_bytes:
        raise RuntimeError(
            f"proxy counted {side['proxy_counted']} Produce bytes, the load generator sent "
            f"{side['proxy_sent']} and the pump {pump_bytes}"
        )


def _stop_pump(pump: subprocess.Popen[str]) -> int:
    """Stop the pump; the bytes it sent (its own count)."""
    pump.terminate()
    out, _ = pump.communicate(timeout=60)
    lines = [line for line in out.splitlines() if line.startswith('{"kind"')]
    if not lines:
        raise RuntimeError(f"the pump printed no result: {out[-500:]}")
    return int(json.loads(lines[-1])["request_bytes"])


def _throttles(proxy: QuietProxy, client_id: str) -> float:
    text = proxy.metrics_text()
    samples = _samples(text, "sluice_throttles_total")
    return sum(value for labels, value in samples if labels.get("client_id") == client_id)


def _check_quotas(proxy: QuietProxy) -> float:
    """The pump was held to its quota and the measured loads were not; returns the pump's throttles."""
    pump = _throttles(proxy, PUMP_CLIENT_ID)
    if pump <= 0:
        raise RuntimeError("the pump's quota never bound: no throttle for client-id pump")
    for client_id in (BULK_CLIENT_ID, PERF_CLIENT_ID):
        if _throttles(proxy, client_id):
            raise RuntimeError(f"{client_id} was throttled: its quota was meant never to bind")
    return pump


def _side_by_side(
    cluster: MockCluster, proxy: QuietProxy, relay: BareRelayProcess, rounds: int, requests: int
) -> dict:
    """Rounds alternating proxy and relay; the proxy's Produce counters are checked in `_check_counters`."""
    ports = {"proxy": proxy.port, "bare relay": relay.port}
    pids = {"proxy": proxy.pid, "bare relay": relay.pid}
    per_gib: dict[str, list[float]] = {"proxy": [], "bare relay": []}
    user_per_gib: dict[str, list[float]] = {"proxy": [], "bare relay": []}
    rows: list[list[Any]] = []
    request_bytes = 0
    proxy_requests_before, proxy_bytes_before = _produce_counters(proxy)
    proxy_sent = 0
    for round_no in range(1, rounds + 1):
        order = ("proxy", "bare relay") if round_no % 2 else ("bare relay", "proxy")
        for name in order:
            run = run_windowed(
                wire_command(ports[name], requests), {"middle": pids[name], "mock": cluster.pid}
            )
            sent = run.result["request_bytes"]
            request_bytes = sent // run.result["answers"]
            if name == "proxy":
                proxy_sent += sent
            gib = sent / GIB
            cost = run.window_cpu_s["middle"] / gib
            user = run.window_user_cpu_s["middle"] / gib
            per_gib[name].append(cost)
            user_per_gib[name].append(user)
            seconds = run.result["seconds"]
            rows.append(
                [round_no, name, f"{gib:.2f}", f"{seconds:.2f}", f"{gib / seconds:.2f}", f"{cost:.3f}",
                 f"{user:.3f}", f"{run.window_cpu_s['mock'] / gib:.3f}", f"{run.child.cpu_s / gib:.3f}"]
            )  # fmt: skip
    proxy_requests, proxy_bytes = _produce_counters(proxy)
    # The proxy counts frames without their 4-byte length prefix; the load generator counts whole frames.
    counted_frames = int(proxy_bytes - proxy_bytes_before + 4 * (proxy_requests - proxy_requests_before))
    return {
        "ratios": [p / r for p, r in zip(per_gib["proxy"], per_gib["bare relay"], strict=True)],
        "proxy": median(per_gib["proxy"]),
        "relay": median(per_gib["bare relay"]),
        "proxy_user": median(user_per_gib["proxy"]),
        "relay_user": median(user_per_gib["bare relay"]),
        "rows": rows,
        "request_bytes": request_bytes,
        "proxy_counted": counted_frames,
        "proxy_sent": proxy_sent,
    }


def _real_client(proxy: QuietProxy) -> dict:
    requests_before, bytes_before = _produce_counters(proxy)
    cpu_before = cpu_seconds(proxy.pid)
    command = perf_test_command(
        proxy.bootstrap, TOPIC, REAL_CLIENT_RECORDS, REAL_CLIENT_RECORD_SIZE, REAL_CLIENT_PROPS
    )
    child = run_child(command)
    cpu = cpu_seconds(proxy.pid) - cpu_before
    if child.returncode != 0 or not child.last_line().startswith(f"{REAL_CLIENT_RECORDS} records sent"):
        raise RuntimeError(f"perf-test failed: {child.stdout[-500:]} {child.stderr[-1500:]}")
    requests, total = _produce_counters(proxy)
    relayed = total - bytes_before
    return {
        "cpu_per_gib": cpu / (relayed / GIB),
        "avg_request": relayed / (requests - requests_before),
        "gib": relayed / GIB,
        "cpu": cpu,
        "summary": child.last_line(),
        "command": display(command).replace(proxy.bootstrap, "<PROXY>"),
    }


def run(rounds: int = ROUNDS, requests: int = REQUESTS_PER_RUN, real_client: bool = True) -> list[Record]:
    with (
        MockCluster(brokers=1, topics={TOPIC: 1}) as cluster,
        QuietProxy(cluster.bootstrap, extra_config=QUOTA_CONFIG) as proxy,
        BareRelayProcess(cluster.bootstrap) as relay,
    ):
        pump = subprocess.Popen(wire_load_command(proxy.port, **PUMP_LOAD), stdout=subprocess.PIPE, text=True)
        try:
            for port in (proxy.port, relay.port):
                run_child(wire_command(port, requests=64))  # warm-up, not counted
            side = _side_by_side(cluster, proxy, relay, rounds, requests)
        finally:
            pump_bytes = _stop_pump(pump)
        _check_counters(side, pump_bytes)
        pump_throttles = _check_quotas(proxy)
        real = _real_client(proxy) if real_client else None
    wire = display(wire_command(0, requests)).replace("--port 0", "--port <PORT>")
    relay_command = (
        display([sys.executable, str(Path(__file__).parent / "bare_relay.py")]) + " --upstream <BROKER>"
    )
    pump_command = display(wire_load_command(0, **PUMP_LOAD)).replace("--port 0", "--port <PROXY PORT>")
    table = {
        "columns": ["round", "middle", "GiB", "seconds", "GiB/s", "middle CPU s/GiB",
                    "of it user space", "mock CPU s/GiB", "load generator CPU s/GiB"],
        "rows": side["rows"],
    }  # fmt: skip
    ratio = side["proxy"] / side["relay"]
    entities = "; ".join("{" + ", ".join(f"{k}: {v}" for k, v in e.items()) + "}" for e in QUOTA_ENTITIES)
    records = [
        measurement(
            "proxy_cpu_per_gib_1mib_produce",
            round(side["proxy"], 3),
            "CPU s/GiB",
            TARGET_CPU_S_PER_GIB,
            title="Proxy CPU per GiB relayed, 1 MiB Produce requests (raw pipelined load, median)",
            table=table,
            notes=[
                f"{rounds} rounds of {requests} Produce v7 requests of "
                f"{side['request_bytes']:,} bytes (one batch of {RECORDS_PER_REQUEST} records of "
                f"{RECORD_BYTES:,} B, acks=1), {IN_FLIGHT} in flight on one connection, alternating "
                "proxy and bare relay, each in front of a 1-broker mock cluster; the proxy's own "
                f"counters saw {side['proxy_counted']:,} Produce bytes meanwhile for the "
                f"{side['proxy_sent']:,} the load generator sent it (the pump's {pump_bytes:,} B, sent all "
                "along, account for the difference).",
                f"bare asyncio Protocol relay (uvloop): median {side['relay']:.3f} CPU s/GiB; "
                f"proxy / relay = {ratio:.2f} (ratio of the medians; per round: "
                + ", ".join(f"{r:.2f}" for r in side["ratios"])
                + ").",
                f"quotas configured (`quota.sensor: window`): {entities}. The bulk load (client-id "
                f"{BULK_CLIENT_ID}) is charged on every request and response but never throttled; the pump "
                f"(client-id {PUMP_CLIENT_ID}, ~10 KB Produce requests, one in flight, against the proxy "
                f"during all the rounds) is held to {PUMP_RATE:,} B/s: the proxy computed "
                f"{pump_throttles:,.0f} throttles for it (its metrics, checked after the rounds).",
                "CPU is user + system time from /proc/<pid>/stat, read when the load generator opens and "
                "closes its counted window (after its connection is up, until the last answer).",
                f"Of it, in user space (the relaying code itself; the rest is the kernel copying the bytes "
                f"through loopback TCP, the same work for both): median {side['proxy_user']:.3f} CPU s/GiB "
                f"for the proxy, {side['relay_user']:.3f} for the relay. The kernel's part moves by a fifth "
                "from round to round for either process, which is why the rounds alternate and the ratio "
                "is of medians.",
            ],
            commands=[
                wire + "   # <PORT> = the proxy's bootstrap port or the relay's port",
                relay_command,
                pump_command + "   # the throttled pump, all along",
            ],
        ),
        measurement(
            "proxy_cpu_per_gib_vs_bare_relay",
            round(ratio, 3),
            "x bare relay",
            TARGET_RATIO_TO_RELAY,
            better="lower",
        ),
        measurement("bare_relay_cpu_per_gib_1mib_produce", round(side["relay"], 3), "CPU s/GiB"),
    ]
    if real is not None:
        records.append(
            measurement(
                "proxy_cpu_per_gib_real_client",
                round(real["cpu_per_gib"], 3),
                "CPU s/GiB",
                TARGET_CPU_S_PER_GIB,
                title="Proxy CPU per GiB relayed, ~1 MiB Produce requests from a real client "
                "(sluice perf-test)",
                notes=[
                    f"{real['gib']:.2f} GiB of Produce requests, {real['avg_request']:,.0f} bytes per "
                    f"request on average (proxy counters), {real['cpu']:.2f} CPU s of the proxy over the "
                    "whole perf-test run (the same proxy, quotas as above; perf-test's client-id is covered "
                    "by a bound it never reaches).",
                    f"perf-test: {real['summary']}",
                ],
                commands=[real["command"]],
            )
        )
    return records


if __name__ == "__main__":
    for record in run():
        print(json.dumps(record))
