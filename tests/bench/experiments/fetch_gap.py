"""Where the fetch workloads' extra CPU with quotas and usage records goes: section 2b's fetch run through
the proxy with a chosen configuration, variants interleaved round by round, each in front of its own
fresh 1-broker mock cluster (the topic produced first, unmeasured, as bench_real_clients.py does).

Variants (VARIANTS): ``none`` (neither), ``quota`` (section 2b's quotas only), ``usage`` (usage records
only), ``both`` (section 2b's "sluice"), ``both-nopub`` (both, a usage interval of a minute: no batch in
the window), ``both-noreq`` (both, no request_percentage quota: no pass timed, no request-time
sensor). Per run: the proxy's CPU in the client's window (schedstat, to the ns), per thread, its minor
page faults per MiB over the client's whole run (its start-up included), and with ``--idle-s`` its CPU
over an idle span before the client connects (ms a second).

Run: ``.venv/bin/python tests/bench/experiments/fetch_gap.py --variants none,both --rounds 3
--workload fetch-64k``. In the window, optionally: ``--timed PREFIX`` (timed_proxy.py: the thread CPU time
of the data path's callbacks and filters, JSON to PREFIX-<variant>-<workload>-r<round>.0), ``--profile
PREFIX`` (profiled_proxy.py: cProfile), ``--perf PREFIX`` (`perf record -g`), ``--rtt-ms N`` (the mock
answers N ms later: longer runs, the same answers).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_real_clients import PARTITIONS, QUOTA_ENTITIES, RECORDS, WORKLOADS, client_command
from fetch_copies import wait_perf_attached
from harness import PYTHON, run_windowed
from mock_cluster_process import MockCluster
from process_stats import minor_faults, precise_user_system_seconds
from proxy_process import ProxyProcess
from throttle_harness import metric_value
from waiting import wait_until

GIB = 1 << 30
TOGGLE = signal.SIGRTMIN + 3  # timed_proxy.py / profiled_proxy.py: start, then stop and write
_USAGE = {"enabled": True, "partitions": 1, "replication_factor": 1}
_QUOTA = {"sensor": "window", "entities": QUOTA_ENTITIES}
VARIANTS: dict[str, dict[str, Any] | None] = {
    "none": None,
    "quota": {"quota": _QUOTA},
    "usage": {"usage": _USAGE},
    "both": {"quota": _QUOTA, "usage": _USAGE},
    "both-nopub": {"quota": _QUOTA, "usage": {**_USAGE, "interval_ms": 60_000}},
    "both-noreq": {
        "quota": {
            "sensor": "window",
            "entities": [{k: v for k, v in e.items() if k != "request_percentage"} for e in QUOTA_ENTITIES],
        },
        "usage": _USAGE,
    },
}


@dataclass(frozen=True)
class Options:
    workload: str
    idle_s: float = 0.0
    timed: str | None = None
    profile: str | None = None
    perf: str | None = None
    rtt_ms: int = 0


def threads(pid: int) -> dict[str, float]:
    """Thread name/tid -> run time (s)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            out[f"{name}/{task.name}"] = int((task / "schedstat").read_text().split()[0]) / 1e9
        except OSError:
            continue
    return out


def cpu(pid: int) -> float:
    user, system = precise_user_system_seconds(pid)
    return user + system


def _signalling_clock(pid: int) -> tuple[float, float]:
    """The CPU clock, read before toggling the proxy's counting (window start: on; end: off)."""
    reading = precise_user_system_seconds(pid)
    os.kill(pid, TOGGLE)
    return reading


def _perf_clock(out: str) -> Callable[[int], tuple[float, float]]:
    """The CPU clock, then `perf record` of the proxy started (window start) or stopped (window end)."""
    running: list[subprocess.Popen[bytes]] = []

    def clock(pid: int) -> tuple[float, float]:
        reading = precise_user_system_seconds(pid)
        if not running:
            command = ["perf", "record", "-q", "-F", "15000", "-g", "-p", str(pid), "-o", out]
            running.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            wait_perf_attached(running[0])
        else:
            running[0].send_signal(signal.SIGINT)
            running[0].wait()
        return reading

    return clock


def _proxy(upstream: str, variant: str, options: Options, tag: str) -> ProxyProcess:
    """The proxy, started by a counting launcher if asked (PYTHONMALLOC=malloc, as `sluice run` would exec
    itself with; the launchers call the command line directly)."""
    launcher, out_variable, prefix = None, "", None
    if options.timed:
        launcher, out_variable, prefix = "timed_proxy.py", "TIMED_OUT", options.timed
    elif options.profile:
        launcher, out_variable, prefix = "profiled_proxy.py", "PROFILE_OUT", options.profile
    if launcher is None:
        return ProxyProcess(upstream, extra_config=VARIANTS[variant], log_level="warning")
    saved = dict(os.environ)
    os.environ.update({"PYTHONMALLOC": "malloc", out_variable: f"{prefix}-{tag}"})
    try:
        command = [PYTHON, str(Path(__file__).with_name(launcher))]
        return ProxyProcess(upstream, extra_config=VARIANTS[variant], log_level="warning", command=command)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _wait_quiet(proxy: ProxyProcess) -> None:
    """Until the filler's connections have closed and, with usage records, the interval they ended in has
    been drained into a batch: the idle reading that follows counts neither."""

    def scrape(name: str) -> float:
        return metric_value(proxy.metrics_text(), name)

    wait_until(lambda: scrape("sluice_connections_active") == 0, "the filler's connections closed", 30)
    if "sluice_usage_batches_total" in proxy.metrics_text():  # the variants with usage records
        drained = scrape("sluice_usage_batches_total")
        # both-nopub's interval is a minute
        wait_until(lambda: scrape("sluice_usage_batches_total") > drained, "an interval drained", 70)


def one_run(variant: str, round_no: int, options: Options) -> dict[str, Any]:
    workload = next(w for w in WORKLOADS if w.name == options.workload)
    filler = next(w for w in WORKLOADS if w.name == workload.source)
    topic = filler.topic(round_no)
    tag = f"{variant}-{workload.name}-r{round_no}"
    clock: Callable[[int], tuple[float, float]] = precise_user_system_seconds
    if options.perf:
        clock = _perf_clock(f"{options.perf}-{tag}.data")
    elif options.timed or options.profile:
        clock = _signalling_clock
    with MockCluster(brokers=1, topics={topic: PARTITIONS}) as cluster:
        proxy = _proxy(cluster.bootstrap, variant, options, tag)
        try:
            pid = proxy.process.pid
            run_windowed(client_command(proxy.bootstrap, filler, topic, RECORDS), {"middle": pid})
            if options.rtt_ms:
                cluster.set_rtt(1, options.rtt_ms)
            idle = 0.0
            if options.idle_s:
                _wait_quiet(proxy)
                before = cpu(pid)
                time.sleep(options.idle_s)  # the measured span itself: idle wall time, no client
                idle = (cpu(pid) - before) / options.idle_s * 1000
            before_threads, faults_before = threads(pid), minor_faults(pid)
            run = run_windowed(
                client_command(proxy.bootstrap, workload, topic, RECORDS), {"middle": pid}, clock=clock
            )
            after_threads, faults = threads(pid), minor_faults(pid) - faults_before
        finally:
            proxy.stop()
    per_thread = {
        k: round((after_threads.get(k, 0) - v) * 1000, 2)
        for k, v in before_threads.items()
        if after_threads.get(k, 0) - v > 0.0005
    }
    seconds = run.result["seconds"]
    gib = run.result["payload_bytes"] / GIB
    cpu_ms = run.window_cpu_s["middle"] * 1000
    return {
        "variant": variant,
        "round": round_no,
        "seconds": seconds,
        "gib": gib,
        "cpu_ms": round(cpu_ms, 2),
        "cpu_s_per_gib": round(cpu_ms / 1000 / gib, 3),
        "cpu_ms_per_s": round(cpu_ms / seconds, 2),
        "idle_ms_per_s": round(idle, 2),
        "minor_faults_per_mib": round(faults / (gib * 1024), 1),
        "threads_ms": per_thread,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="none,both", help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workload", default="fetch-64k", choices=[w.name for w in WORKLOADS if w.source])
    parser.add_argument("--idle-s", type=float, default=0.0)
    parser.add_argument("--rtt-ms", type=int, default=0, help="the mock broker's added round trip")
    parser.add_argument("--timed", help="a path prefix: time the data path's callbacks (timed_proxy.py)")
    parser.add_argument("--profile", help="a path prefix: cProfile the window (profiled_proxy.py)")
    parser.add_argument("--perf", help="a path prefix: perf record the window")
    args = parser.parse_args()
    options = Options(args.workload, args.idle_s, args.timed, args.profile, args.perf, args.rtt_ms)
    variants = args.variants.split(",")
    results: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    for round_no in range(1, args.rounds + 1):
        shift = (round_no - 1) % len(variants)
        for variant in [*variants[shift:], *variants[:shift]]:
            record = one_run(variant, round_no, options)
            results[variant].append(record)
            print(json.dumps(record), flush=True)
    for variant, records in results.items():
        print(
            f"{variant:10} cpu ms median {statistics.median(r['cpu_ms'] for r in records):7.2f}"
            f"  s/GiB {statistics.median(r['cpu_s_per_gib'] for r in records):.3f}"
            f"  ms/s {statistics.median(r['cpu_ms_per_s'] for r in records):6.2f}"
            f"  idle ms/s {statistics.median(r['idle_ms_per_s'] for r in records):5.2f}"
            f"  seconds {statistics.median(r['seconds'] for r in records):.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
