"""Produce latency as the field measures it: open loop, direct and through the proxy.

The direct path's capacity is measured first: wire_load.py saturating the 1-broker mock cluster with
pipelined Produce requests (16 records of 1 KiB, acks=1, the size of one default Java producer batch),
answers per second. Then open_loop.py offers 25 %, 50 % and 75 % of that rate, straight to the broker and
through the proxy (order alternating), and reports p50, p99 and p99.9 of the time from each request's
intended send moment to its answer (OpenMessaging Benchmark's method: no coordinated omission), with
3-significant-digit histograms (latency_histogram.py). The added milliseconds are proxy minus direct at
the same percentile and load; the target is p99 added <= 0.5 ms at 50 %. A bare uvloop relay
(bare_relay.py, as in the CPU benchmark) runs the same loads beside them: what it adds is the floor any
process in the middle pays on this machine, so the report shows how much of the proxy's figure is its own.

On this 2-core machine the mock cluster, the proxy and the generator share the cores, so at 75 % of the
mock's capacity the proxy competes with the broker for CPU: the rows say how busy each process was.

Run alone: ``.venv/bin/python tests/bench/bench_latency.py`` (one JSON record per line).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parents[1]))  # tests/: the test broker and proxy handles

from harness import (
    PYTHON,
    BareRelayProcess,
    QuietProxy,
    WindowedRun,
    display,
    run_windowed,
    wire_load_command,
)
from measurements import Record, measurement, median
from mock_cluster_process import MockCluster

TARGET_ADDED_P99_MS = 0.5
TOPIC = "latency"
RECORD_BYTES = 1024
RECORDS = 16
CONNECTIONS = 4
LOADS = (0.25, 0.5, 0.75)
PATHS = ("direct", "proxy", "bare relay")
PERCENTILES = ("p50", "p99", "p99.9")
WARMUP_S = 1.0
DURATION_S = 8.0
CAPACITY_ROUNDS = 2
# The target's load runs this many times per path (paths alternating), its figures the medians: one 8 s
# run's p99 on a shared 2-core machine moves by tenths of a millisecond from one run to the next.
MIDDLE_ROUNDS = 3
CAPACITY_LOAD: dict[str, object] = {
    "kind": "produce",
    "topic": TOPIC,
    "record_bytes": RECORD_BYTES,
    "records": RECORDS,
    "connections": CONNECTIONS,
    "in_flight": 64,
    "batch": 8,
    "warmup": 1,
    "duration": 4,
    "check_every": 5000,
}
BENCH_DIR = Path(__file__).resolve().parent


def open_loop_command(
    port: int, rate: float, duration_s: float = DURATION_S, tls_ca: str | None = None
) -> list[str]:
    command = [PYTHON, str(BENCH_DIR / "open_loop.py"), "--port", str(port), "--rate", f"{rate:.0f}"]
    command += ["--connections", str(CONNECTIONS), "--topic", TOPIC, "--record-bytes", str(RECORD_BYTES)]
    command += ["--records", str(RECORDS), "--warmup", str(WARMUP_S), "--duration", str(duration_s)]
    if tls_ca:
        command += ["--tls-ca", tls_ca]
    return command


def open_loop_run(command: list[str], watched: dict[str, int]) -> WindowedRun:
    """One open-loop run; a path that could not keep up is reported (its `missing` answers), not hidden."""
    return run_windowed(command, watched, timeout_s=120)


def capacity(port: int, watched: dict[str, int], rounds: int = CAPACITY_ROUNDS) -> tuple[float, list[str]]:
    """Median answers/s of the saturating closed-loop load, and one note per round."""
    rates, notes = [], []
    for _ in range(rounds):
        run = run_windowed(wire_load_command(port, **CAPACITY_LOAD), watched)
        rate = run.result["answers_per_s"]
        rates.append(rate)
        busy = {name: cpu / run.result["seconds"] for name, cpu in run.window_cpu_s.items()}
        notes.append(f"{rate:,.0f}/s (" + ", ".join(f"{n} {b:.2f} CPUs" for n, b in busy.items()) + ")")
    return median(rates), notes


def ms(result: dict[str, Any], key: str) -> float:
    return result["latency_us"][key] / 1000


def at(results: dict[tuple[float, str], list[dict[str, Any]]], load: float, path: str, key: str) -> float:
    """A percentile (ms) of one path at one load: the median over that load's rounds."""
    return median([ms(result, key) for result in results[(load, path)]])


def added(results: dict[tuple[float, str], list[dict[str, Any]]], load: float, path: str, key: str) -> float:
    """What `path` adds to the direct path's percentile (ms) at `load` (medians over the rounds)."""
    return at(results, load, path, key) - at(results, load, "direct", key)


def cpus_busy(run: WindowedRun) -> dict[str, float]:
    """CPU seconds per second of each watched process in the counted window, and of the generator (over
    its whole run)."""
    seconds = run.result["window_s"]
    busy = {name: cpu / seconds for name, cpu in run.window_cpu_s.items()}
    busy["generator"] = run.child.cpu_s / run.child.wall_s
    return busy


def latency_row(load: str, rate: float, path: str, run: WindowedRun) -> list[Any]:
    r = run.result
    busy = {name: f"{cpus:.2f}" for name, cpus in cpus_busy(run).items()}
    answered = f"{r['counted'] - r['missing']:,}" + (f" ({r['missing']:,} never)" if r["missing"] else "")
    return [
        load, f"{rate:,.0f}", path, f"{ms(r, 'p50'):.3f}", f"{ms(r, 'p99'):.3f}", f"{ms(r, 'p99.9'):.3f}",
        f"{ms(r, 'max'):.1f}", answered, f"{r['send_lag_us']['p99'] / 1000:.3f}",
        busy.get("middle", "—"), busy.get("mock", "—"), busy["generator"],
    ]  # fmt: skip


# The generator's CPUs are over its whole run (warm-up included): with the proxy's and the mock's they say
# how much of the machine's two cores the path had to share.
LATENCY_COLUMNS = ["load", "requests/s", "path", "p50 ms", "p99 ms", "p99.9 ms", "max ms", "answers counted",
                   "generator send lag p99 ms", "proxy or relay CPUs busy", "mock CPUs busy",
                   "generator CPUs busy"]  # fmt: skip


def run(
    loads: tuple[float, ...] = LOADS,
    duration_s: float = DURATION_S,
    capacity_rounds: int = CAPACITY_ROUNDS,
    middle_rounds: int = MIDDLE_ROUNDS,
) -> list[Record]:
    middle = 0.5 if 0.5 in loads else loads[len(loads) // 2]
    with (
        MockCluster(brokers=1, topics={TOPIC: 1}) as cluster,
        QuietProxy(cluster.bootstrap) as proxy,
        BareRelayProcess(cluster.bootstrap) as relay,
    ):
        direct_port = cluster.addresses[0][1]
        full_rate, capacity_notes = capacity(direct_port, {"mock": cluster.pid}, capacity_rounds)
        ports = {"direct": direct_port, "proxy": proxy.port, "bare relay": relay.port}
        watched = {
            "direct": {"mock": cluster.pid},
            "proxy": {"middle": proxy.pid, "mock": cluster.pid},
            "bare relay": {"middle": relay.pid, "mock": cluster.pid},
        }
        results: dict[tuple[float, str], list[dict[str, Any]]] = {}
        cpu_us: dict[tuple[float, str], list[float]] = {}  # the middle's CPU microseconds per answer
        direct_cpus: dict[float, list[float]] = {}  # the mock's and the generator's CPUs, direct path
        rows: list[list[Any]] = []
        turn = 0
        for load in loads:
            rate = full_rate * load
            rounds = middle_rounds if load == middle else 1
            for round_no in range(1, rounds + 1):
                label = f"{load:.0%}" + (f" #{round_no}" if rounds > 1 else "")
                for path in PATHS[turn % 3 :] + PATHS[: turn % 3]:  # each pass starts with the next path
                    run_ = open_loop_run(open_loop_command(ports[path], rate, duration_s), watched[path])
                    results.setdefault((load, path), []).append(run_.result)
                    if "middle" in run_.window_cpu_s:
                        answers = run_.result["counted"] - run_.result["missing"]
                        per_request = run_.window_cpu_s["middle"] / max(1, answers) * 1e6
                        cpu_us.setdefault((load, path), []).append(per_request)
                    if path == "direct":
                        direct_cpus.setdefault(load, []).append(sum(cpus_busy(run_).values()))
                    rows.append(latency_row(label, rate, path, run_))
                turn += 1
            for middle_path in ("proxy", "bare relay"):
                of = f" (medians of {rounds} rounds)" if rounds > 1 else ""
                rows.append([f"{load:.0%}", f"{rate:,.0f}", f"added by the {middle_path}{of}",
                             *(f"{added(results, load, middle_path, key):+.3f}" for key in PERCENTILES),
                             *[""] * 6])  # fmt: skip
    added_p99 = {load: added(results, load, "proxy", "p99") for load in loads}
    proxy_us, relay_us = median(cpu_us[(middle, "proxy")]), median(cpu_us[(middle, "bare relay")])
    relay_added_p99 = {load: added(results, load, "bare relay", "p99") for load in loads}
    command = display(open_loop_command(0, 0, duration_s)).replace("--port 0", "--port <PORT>")
    command = command.replace("--rate 0", "--rate <RATE>")
    records = [
        measurement(
            f"latency_p99_added_ms_at_{middle:.0%}".replace("%", "pct"),
            round(added_p99[middle], 3),
            "ms",
            TARGET_ADDED_P99_MS,
            better="lower",
            title="Open-loop produce latency, direct and through the proxy (from the intended send time)",
            table={"columns": LATENCY_COLUMNS, "rows": rows},
            notes=[
                f"direct capacity: {full_rate:,.0f} Produce requests/s (median of {len(capacity_notes)} "
                "saturating closed-loop runs of wire_load.py: " + "; ".join(capacity_notes) + "); "
                f"each request one batch of {RECORDS} records of {RECORD_BYTES} B (acks=1, Produce v7, "
                f"{results[(loads[0], 'direct')][0]['frame_bytes']:,} B on the wire), {CONNECTIONS} "
                "connections, 1-broker mock cluster, one-partition topic.",
                f"open loop: requests due at a fixed rate whatever the answers do, {WARMUP_S:g} s not "
                f"counted then {duration_s:g} s counted per row; latency from each request's intended send "
                "time to its answer, so the generator's own lateness (its send lag column) counts against "
                "the path, as in OpenMessaging Benchmark; histograms with 0.1 % relative error.",
                "added by the proxy (the relay) = proxy (relay) minus direct at the same percentile and "
                "load (a negative figure is noise: the runs shared the machine with different neighbours). "
                f"At {middle:.0%}, p99 added by the bare relay: {relay_added_p99[middle]:+.3f} ms, by the "
                f"proxy: {added_p99[middle]:+.3f} ms. The bare relay only copies bytes (bare_relay.py): "
                "what it adds is what a third busy process costs the path on this machine's two cores, "
                f"where the direct path alone kept {median(direct_cpus[middle]):.2f} CPUs busy at "
                f"{middle:.0%} (mock and generator).",
                f"Beside the p99, a figure the neighbours move much less: the proxy's own CPU per request at "
                f"{middle:.0%}, {proxy_us:.1f} µs (the bare relay's: {relay_us:.1f} µs), user + system time "
                "of the process in the counted window / the answers counted in it (median over the rounds).",
                "CPUs busy = CPU seconds in the counted window / window seconds. 'never': answers still "
                "missing 10 s after the last request was due, counted in the percentiles at the latency "
                "they had reached then (the path could not keep up with the offered rate).",
            ],
            commands=[
                command + "   # <PORT> = the mock broker or the proxy; <RATE> = 25/50/75 % of capacity",
                display(wire_load_command(0, **CAPACITY_LOAD)).replace("--port 0", "--port <BROKER PORT>"),
            ],
        ),
    ]
    tag = f"{middle:.0%}".replace("%", "pct")
    for who, us in (("proxy", proxy_us), ("bare_relay", relay_us)):
        records.append(measurement(f"{who}_cpu_us_per_request_at_{tag}", round(us, 2), "CPU µs/request"))
    for load in loads:
        if load != middle:
            name = f"latency_p99_added_ms_at_{load:.0%}".replace("%", "pct")
            records.append(measurement(name, round(added_p99[load], 3), "ms", better="lower"))
    for load in loads:
        name = f"latency_p99_added_ms_bare_relay_at_{load:.0%}".replace("%", "pct")
        records.append(measurement(name, round(relay_added_p99[load], 3), "ms", better="lower"))
    records.append(measurement("direct_capacity_16kib_produce", round(full_rate), "requests/s"))
    for load in loads:
        for path in PATHS:
            for key in PERCENTILES:
                where = path.replace(" ", "_")
                name = f"latency_{key.replace('.', '_')}_ms_{where}_at_{load:.0%}".replace("%", "pct")
                value = round(at(results, load, path, key), 3)
                records.append(measurement(name, value, "ms", better="lower"))
    return records


if __name__ == "__main__":
    for record in run():
        print(json.dumps(record))
