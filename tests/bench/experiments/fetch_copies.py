"""Proxy CPU per GiB of Fetch answers at memory speed, for several source trees beside a bare relay: what the
copies a large answer takes on its way through cost, where the proxy is the bottleneck.

The real-client benchmark (bench_real_clients.py) reads ~180 MB of Fetch answers from librdkafka's mock
cluster a run, too few and too noisily to see a change of a tenth. Here the broker is
tests/bench/canned_broker.py, which answers every Fetch v11 with one canned answer of `--fetch-bytes` (6
partitions of record batches; ~365,000 bytes is what a consumer reads of librdkafka's 64 KiB batches,
~94,000 of its 16 KiB ones), and the client is wire_load.py `--kind fetch`, pipelining pre-built requests
(`--in-flight` outstanding on one connection, every answer length-checked, a few decoded). In front of the
broker, each middle runs for the whole measurement: the bare relay (tests/bench/bare_relay.py) and, per
tree given, `<tree>/.venv/bin/python -m sluice.proxy run` with a minimal configuration (upstream the
canned broker, log level warning, no quotas), and with `--quota` also a second proxy of each tree with
quotas configured (bench_real_clients' entities: the load's client-id charged on every answer, never
throttled; no usage records, which the canned broker cannot store). Rounds interleave the middles, the
order rotating; the middle's CPU is its utime + stime over the load generator's counted window, read to
the nanosecond (process_stats.precise_user_system_seconds); GiB are the answers' bytes (whole frames). Each
middle's figure is the median over the rounds, with their range, and its ratio to the relay's median; and,
steadier when the machine's load moves from round to round, the median of its per-round ratios to the first
tree's proxy (same configuration) run beside it in the same round.

The split between user space and kernel comes from /proc's clock ticks, a hundred a second: on a run of a
CPU second that split moves by a tenth from round to round. With ``--perf HZ`` (Linux perf, root) each run
is sampled `HZ` times per CPU second of the middle instead (perf record -e cpu-clock), and the shares of
samples in user space and in the C library's memmove/memset (the copies) split its CPU time.

Every child (broker, relay, proxies, load generator) runs with PYTHONMALLOC=malloc, the allocator `sluice
run` picks for itself, unless the caller set the variable: so a tree whose `sluice run` restarts itself
with it and one that does not run the same way.

Run: ``.venv/bin/python tests/bench/experiments/fetch_copies.py --trees /work/main,/work/wt-upread
[--fetch-bytes 365000,94000] [--rounds 5] [--gib 1] [--quota] [--perf 4000]`` (a table per answer size on
stdout, then one JSON object per line with every round's figures).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_real_clients import CLIENT_ID, QUOTA_ENTITIES, rotated
from canned_broker import FETCH_PARTITIONS, fetch_answer
from harness import BareRelayProcess, CannedBrokerProcess, display, run_windowed, wire_load_command
from measurements import median
from process_stats import precise_user_system_seconds
from proxy_process import ProxyProcess  # tests/, put on the path by harness
from waiting import wait_until

from sluice.protocol.headers import frame

GIB = 1 << 30
TOPIC = "fetched"
RELAY = "bare relay"
IN_FLIGHT = 4
COPY_SYMBOLS = ("__memmove", "__memcpy", "__memset")
QUOTA_CONFIG = {"quota": {"sensor": "window", "entities": QUOTA_ENTITIES}}


@dataclass(frozen=True)
class Middle:
    name: str
    tree: Path | None  # None: the bare relay
    config: dict[str, Any] | None = None


@dataclass(frozen=True)
class Sample:
    fetch_bytes: int
    round_no: int
    middle: str
    gib: float
    seconds: float
    cpu_s: float
    user_s: float
    copy_s: float | None = None  # in memmove/memcpy/memset (with --perf)

    @property
    def cpu_per_gib(self) -> float:
        return self.cpu_s / self.gib


@dataclass(frozen=True)
class Summary:
    fetch_bytes: int
    middle: str
    median: float  # CPU s/GiB over the rounds
    low: float
    high: float
    user_median: float  # its user-space part
    copy_median: float | None  # of it memmove/memcpy/memset (with --perf)
    gb_per_s: float  # median answer bytes per second, 1e9
    ratio: float  # median / the relay's median
    paired: float  # median over the rounds of its CPU / the baseline's in the same round


def summarize(samples: Sequence[Sample], baselines: dict[str, str] | None = None) -> list[Summary]:
    """Per answer size, per middle (in the order first seen): the median and range over the rounds, the
    ratio of the median to the relay's median, and the median of its per-round ratios to the middle
    `baselines` names for it (itself when not named: 1.0)."""
    out = []
    for size in dict.fromkeys(s.fetch_bytes for s in samples):
        mine = [s for s in samples if s.fetch_bytes == size]
        relay = (
            median([s.cpu_per_gib for s in mine if s.middle == RELAY])
            if any(s.middle == RELAY for s in mine)
            else float("nan")
        )
        for name in dict.fromkeys(s.middle for s in mine):
            rounds = [s for s in mine if s.middle == name]
            costs = [s.cpu_per_gib for s in rounds]
            base = {s.round_no: s for s in mine if s.middle == (baselines or {}).get(name, name)}
            paired = [s.cpu_per_gib / base[s.round_no].cpu_per_gib for s in rounds if s.round_no in base]
            copies = [s.copy_s / s.gib for s in rounds if s.copy_s is not None]
            out.append(
                Summary(
                    size,
                    name,
                    median(costs),
                    min(costs),
                    max(costs),
                    median([s.user_s / s.gib for s in rounds]),
                    median(copies) if copies else None,
                    median([s.gib * GIB / 1e9 / s.seconds for s in rounds]),
                    median(costs) / relay,
                    median(paired) if paired else float("nan"),
                )
            )
    return out


def middles(trees: Sequence[Path], quota: bool) -> tuple[list[Middle], dict[str, str]]:
    """The middles to run, and for each proxy the one its per-round ratios are to: the first tree's, with
    the same configuration."""
    found = [Middle(RELAY, None)] + [Middle(tree.name, tree) for tree in trees]
    baselines = {tree.name: trees[0].name for tree in trees}
    if quota:
        found += [Middle(f"{tree.name} +quota", tree, QUOTA_CONFIG) for tree in trees]
        baselines |= {f"{tree.name} +quota": f"{trees[0].name} +quota" for tree in trees}
    return found, baselines


@contextmanager
def _started(middle: Middle, upstream: str) -> Iterator[tuple[int, int]]:
    """The middle in front of `upstream`, running: (port to connect to, pid to watch)."""
    if middle.tree is None:
        with BareRelayProcess(upstream) as relay:
            yield relay.port, relay.pid
        return
    program = [str(middle.tree / ".venv" / "bin" / "python"), "-m", "sluice.proxy"]
    with ProxyProcess(upstream, extra_config=middle.config, log_level="warning", command=program) as proxy:
        yield proxy.port, proxy.process.pid


def _load(port: int, requests: int) -> list[str]:
    # Decoding a ~365 KB answer with kafka-python takes the generator tens of ms: a few per run.
    return wire_load_command(
        port,
        kind="fetch",
        topic=TOPIC,
        requests=requests,
        in_flight=IN_FLIGHT,
        check_every=1000,
        client_id=CLIENT_ID,
    )


def perf_shares(script: str) -> tuple[float, float]:
    """(user-space share, copies' share) of the samples `perf script -F ip,sym,dso` lists, one a line."""
    lines = [line for line in script.splitlines() if line.strip()]
    if not lines:
        raise RuntimeError("perf recorded no sample")
    kernel = sum(1 for line in lines if "[kernel." in line)
    copies = sum(1 for line in lines if "[kernel." not in line and any(c in line for c in COPY_SYMBOLS))
    return 1 - kernel / len(lines), copies / len(lines)


def wait_perf_attached(perf: subprocess.Popen[bytes]) -> None:
    """Until `perf record` has attached: it then holds the descriptors of its perf events (it says nothing
    when it has). Samples taken before would only be lost from the split, never miscounted."""
    fds = Path(f"/proc/{perf.pid}/fd")

    def attached() -> bool:
        if perf.poll() is not None:
            raise RuntimeError(f"perf record exited with {perf.returncode} before attaching")
        links = []
        for fd in fds.iterdir() if fds.exists() else []:
            with contextlib.suppress(OSError):  # closed meanwhile
                links.append(os.readlink(fd))
        return "anon_inode:[perf_event]" in links

    wait_until(attached, "perf record to attach", 30, interval_s=0.02)


@contextmanager
def _perf_sampled(pid: int, hz: int | None) -> Iterator[list[tuple[float, float]]]:
    """With `hz`, perf samples the process while the block runs; the list then holds its `perf_shares`."""
    shares: list[tuple[float, float]] = []
    if hz is None:
        yield shares
        return
    with tempfile.TemporaryDirectory(prefix="fetch-copies-") as tmp:
        data = str(Path(tmp) / "perf.data")
        command = ["perf", "record", "-q", "-e", "cpu-clock", "-F", str(hz), "-o", data, "-p", str(pid)]
        perf = subprocess.Popen(command, stderr=subprocess.DEVNULL)
        wait_perf_attached(perf)
        try:
            yield shares
        finally:
            perf.send_signal(signal.SIGINT)
            perf.wait(60)
        script = subprocess.run(
            ["perf", "script", "-i", data, "-F", "ip,sym,dso"], capture_output=True, text=True, check=True
        )
        shares.append(perf_shares(script.stdout))


def measure(
    fetch_bytes: int, chosen: Sequence[Middle], rounds: int, requests: int, perf_hz: int | None = None
) -> list[Sample]:
    samples = []
    with ExitStack() as stack:
        broker = stack.enter_context(CannedBrokerProcess(TOPIC, fetch_bytes))
        running = {m.name: stack.enter_context(_started(m, broker.address)) for m in chosen}
        for port, pid in running.values():
            run_windowed(_load(port, min(requests, 200)), {"middle": pid})  # warm-up, not counted
        for round_no in range(1, rounds + 1):
            for name in rotated([m.name for m in chosen], round_no):
                port, pid = running[name]
                with _perf_sampled(pid, perf_hz) as shares:
                    run = run_windowed(
                        _load(port, requests), {"middle": pid}, clock=precise_user_system_seconds
                    )
                result = run.result
                cpu = run.window_cpu_s["middle"]
                user, copies = (cpu * shares[0][0], cpu * shares[0][1]) if shares else (None, None)
                if result["answers"] != requests:
                    raise RuntimeError(f"{name}: {result['answers']} answers for {requests} requests")
                samples.append(
                    Sample(
                        fetch_bytes,
                        round_no,
                        name,
                        result["response_bytes"] / GIB,
                        result["seconds"],
                        cpu,
                        run.window_user_cpu_s["middle"] if user is None else user,
                        copies,
                    )
                )
    return samples


def tree_state(tree: Path) -> str:
    """The tree's commit, and a digest of its uncommitted changes if any: what a row measured."""

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True).stdout

    head = git("rev-parse", "--short", "HEAD").strip()
    changes = git("diff", "HEAD") + git("ls-files", "--others", "--exclude-standard")
    return f"{head} + uncommitted {hashlib.sha256(changes.encode()).hexdigest()[:12]}" if changes else head


def table(summaries: Sequence[Summary], answer_bytes: dict[int, int]) -> str:
    lines = []
    for size in dict.fromkeys(s.fetch_bytes for s in summaries):
        lines += [
            f"\nFetch answers of {answer_bytes[size]:,} bytes ({FETCH_PARTITIONS} partitions):",
            "| middle | CPU s/GiB | range | user | of it copies | GB/s | x relay | x first tree, per round |",
            "|---|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {s.middle} | {s.median:.3f} | {s.low:.3f}-{s.high:.3f} | {s.user_median:.3f} | "
            f"{'-' if s.copy_median is None else f'{s.copy_median:.3f}'} | "
            f"{s.gb_per_s:.2f} | {s.ratio:.2f} | {s.paired:.3f} |"
            for s in summaries
            if s.fetch_bytes == size
        ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", required=True, help="comma-separated source trees, each with its .venv")
    parser.add_argument("--fetch-bytes", default="365000,94000", help="comma-separated answer sizes")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--gib", type=float, default=1.0, help="answer GiB per middle per round")
    parser.add_argument("--quota", action="store_true", help="also each tree's proxy with quotas configured")
    parser.add_argument("--perf", type=int, metavar="HZ", help="split user/kernel/copies by perf samples")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYTHONMALLOC", "malloc")
    trees = [Path(t).resolve() for t in args.trees.split(",") if t]
    for tree in trees:
        if not (tree / ".venv" / "bin" / "python").exists():
            parser.error(f"--trees: {tree} has no .venv/bin/python")
    chosen, baselines = middles(trees, args.quota)
    samples: list[Sample] = []
    answer_bytes = {}
    for size in (int(s) for s in args.fetch_bytes.split(",")):
        answer_bytes[size] = len(frame(bytes(4) + fetch_answer(TOPIC, 11, size)))  # + correlation id
        requests = max(100, round(args.gib * GIB / answer_bytes[size]))
        samples += measure(size, chosen, args.rounds, requests, args.perf)
    print(table(summarize(samples, baselines), answer_bytes))
    for tree in trees:
        print(f"{tree.name}: {tree} at {tree_state(tree)}")
    print(f"\nload: {display(_load(0, 0))}  (PYTHONMALLOC={os.environ['PYTHONMALLOC']})")
    for sample in samples:
        print(json.dumps({**asdict(sample), "cpu_per_gib": round(sample.cpu_per_gib, 4)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
