"""`make bench`: every benchmark in one run, written to docs/benchmarks.md.

Run: ``.venv/bin/python tests/bench/run_all.py --out docs/benchmarks.md`` (without ``--out`` the report goes
to stdout; ``--only relay_cpu,protocol`` runs a subset). Benchmarks report, they do not gate: a missed
target is written down as FAIL and the exit code stays 0; a benchmark that crashes is written down with
its error and makes the exit code 1.

``--quick`` (`make bench-quick`) runs only the quick section, the hot path's figures in under two minutes, and
prints its report; there a missed target makes the exit code 3, so a check can use it as a regression
guard. The full run includes the quick section, so its figures sit in docs/benchmarks.md beside the full
run's.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_idle_connections
import bench_latency
import bench_produce_throughput
import bench_quick
import bench_quota_accuracy
import bench_quota_overhead
import bench_real_clients
import bench_relay_cpu
import bench_small_requests
import bench_tls
import bench_workers
from measurements import Record, higher_is_better, meets_target
from process_stats import machine_busy_cpu_seconds, own_cpu_seconds

REPO = Path(__file__).resolve().parents[2]
CORES = len(os.sched_getaffinity(0))


def _optional_run(module_name: str) -> Callable[[], list[Record]]:
    """A benchmark module that another engineer may not have written yet: imported when it is run."""

    def run() -> list[Record]:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise  # the module exists but one of its imports fails: a crash, not a missing benchmark
            raise NotAvailable(f"tests/bench/{module_name}.py does not exist (yet)") from None
        return module.run()

    return run


class NotAvailable(Exception):
    """A benchmark module that does not exist (yet)."""


@dataclass
class Section:
    key: str
    heading: str
    target: str
    run: Callable[[], list[Record]]
    records: list[Record] = field(default_factory=list)
    error: str | None = None
    missing: bool = False  # the benchmark module does not exist: reported, not an error
    seconds: float = 0.0
    others_cpu_s: float = 0.0  # CPU the rest of the machine used meanwhile: noise in this section's numbers
    # Written findings printed under the section's numbers (a profile's, which a run does not redo).
    appendix: Path | None = None

    @property
    def number(self) -> str:
        return self.heading.split(".", 1)[0]


def sections() -> list[Section]:
    return [
        Section(
            "produce_throughput",
            "1. Produce throughput through the proxy",
            "produce throughput through the proxy >= 0.95 x direct, 1 KB records",
            bench_produce_throughput.run,
        ),
        Section(
            "relay_cpu",
            "2. Proxy CPU per GiB relayed",
            "proxy CPU <= 0.6 CPU-seconds per GiB relayed with 1 MiB Produce requests, and "
            "<= 1.3 x a bare uvloop relay measured in the same run, with quotas configured and binding on "
            "some entities",
            bench_relay_cpu.run,
        ),
        Section(
            "real_clients",
            "2b. Proxy CPU per GiB with real clients, beside a bare relay",
            "proxy CPU per GiB <= 1.2 x a bare uvloop relay's, measured in the same run, with a librdkafka "
            "producer (16 KiB and 64 KiB batches, acks=1 and acks=all, 6 partitions) and a consumer reading "
            "the data back, quotas configured and usage records on",
            bench_real_clients.run,
            appendix=Path(__file__).resolve().parent / "real_clients_profile.md",
        ),
        Section(
            "workers",
            "2c. `sluice run --workers N` with real clients",
            "sizing figures, no target: throughput and proxy CPU per GiB at --workers 1 and 2 on this "
            "2-core machine, several librdkafka producers at once",
            bench_workers.run,
        ),
        Section(
            "small_requests",
            "3. Small requests per second",
            ">= 50,000 small requests per second through one proxy process in front of the mock cluster; "
            ">= 150,000 in front of a broker that is not the bottleneck, with the proxy's CPU per request "
            "next to the bare relay's",
            bench_small_requests.run,
        ),
        Section(
            "protocol",
            "4. Metadata rewrite and other protocol/ micro-benchmarks",
            "Metadata rewrite for 1,000 topics x 10 partitions <= 1 ms "
            "(the `metadata_rewrite_*_fast_path` rows; the others are protocol/'s own budgets)",
            _optional_run("bench_protocol"),
        ),
        Section(
            "idle_connections",
            "5. Memory per idle client connection",
            "<= 30 KB of memory per idle client connection, holding 5,000 of them",
            bench_idle_connections.run,
        ),
        Section(
            "quota",
            "6. Quota engine micro-benchmarks",
            "the quota engine's own per-call budgets (tests/bench/bench_quota.py)",
            _optional_run("bench_quota"),
        ),
        Section(
            "quota_overhead",
            "7. Produce throughput with quotas configured but not binding",
            "with quotas configured but not binding, throughput >= 0.95 x the proxy without quotas "
            "(1 KB records)",
            bench_quota_overhead.run,
        ),
        Section(
            "quota_accuracy",
            "8. Long-run quota accuracy",
            "a flat-out producer held within +/-2 % of producer_byte_rate over the long run, "
            "with 16 KiB and with 1 MB batches (measured in % off the quota)",
            bench_quota_accuracy.run,
        ),
        Section(
            "latency",
            "9. Open-loop produce latency",
            "p99 added by the proxy <= 0.5 ms at 50 % of the direct path's capacity (open loop, "
            "latency from each request's intended send time; also 25 % and 75 %; a bare relay beside it)",
            bench_latency.run,
        ),
        Section(
            "tls",
            "10. TLS on the client side",
            "sizing figures, no target: CPU per GiB and added p99 with TLS from client to proxy",
            bench_tls.run,
        ),
        Section(
            QUICK_KEY,
            "11. Quick run (make bench-quick)",
            "the figures of sections 2, 3, 9 and 10 with fewer rounds and shorter windows, the same "
            "targets: the regression guard `make bench-quick` runs this section alone",
            bench_quick.run,
        ),
        Section(
            "quota_admin",
            "12. Quota admin: alter to enforced on 3 instances, describe of a large store",
            "an alter enforced on every one of 3 instances with p99 < 1 s; DescribeClientQuotas of "
            "10,000 stored entities answered in < 50 ms",
            _optional_run("bench_quota_admin"),
        ),
        Section(
            "usage",
            "13. Usage records and one quota for a fleet",
            "throughput with usage records on >= 0.98 x off; three processes sharing one quota within "
            "+/-5 % of it (sampled window and token bucket); the usage topic's size with 1,000 entities",
            _optional_run("bench_usage"),
        ),
    ]


QUICK_KEY = "quick"


# ---- machine --------------------------------------------------------------------------------------


def _first_line_with(path: str, prefix: str) -> str:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(prefix):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def _version(module: str) -> str:
    try:
        return str(importlib.import_module(module).__version__)
    except (ImportError, AttributeError):
        return "not installed"


def _git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        )
    except OSError:
        return "unknown"
    return out.stdout.strip() or "none yet"


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def machine_info() -> list[tuple[str, str]]:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        import confluent_kafka

        librdkafka = confluent_kafka.libversion()[0]
    except ImportError:
        librdkafka = "not installed"
    return [
        ("date (UTC)", datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")),
        ("nproc", f"{len(os.sched_getaffinity(0))} (os.cpu_count() = {os.cpu_count()})"),
        ("CPU", _first_line_with("/proc/cpuinfo", "model name")),
        ("memory", _first_line_with("/proc/meminfo", "MemTotal")),
        ("kernel", f"{platform.system()} {platform.release()}"),
        ("python", f"{platform.python_implementation()} {platform.python_version()}"),
        ("uvloop", _version("uvloop")),
        ("kafka-python", _version("kafka")),
        ("confluent-kafka / librdkafka", f"{_version('confluent_kafka')} / {librdkafka}"),
        ("RLIMIT_NOFILE (soft / hard) at start", f"{soft} / {hard}"),
        ("git commit", _git_commit() + " (the working tree may hold uncommitted changes)"),
    ]


# ---- report ---------------------------------------------------------------------------------------


def _number(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.4f}".rstrip("0").rstrip(".") if abs(value) < 100 else f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _target_text(record: Record) -> str:
    target = record.get("target")
    if target is None:
        return "—"
    return f"{'>=' if higher_is_better(record) else '<='} {_number(target)}"


def _verdict(record: Record) -> str:
    met = meets_target(record)
    return "—" if met is None else ("pass" if met else "**FAIL**")


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(_cell(c) for c in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return lines


def _record_rows(records: Sequence[Record]) -> list[list[str]]:
    return [
        [f"`{r['name']}`", _number(r["value"]), r.get("unit", ""), _target_text(r), _verdict(r)]
        for r in records
    ]


def _section_lines(section: Section) -> list[str]:
    lines = [f"## {section.heading}", "", f"Target: {section.target}.", ""]
    if section.error is not None:
        return [*lines, f"**Not measured**: {section.error}", ""]
    lines += _table(["measurement", "value", "unit", "target", "result"], _record_rows(section.records))
    lines.append("")
    for record in section.records:
        if "title" not in record:
            continue
        lines += [f"### {record['title']}", ""]
        if "table" in record:
            lines += _table(record["table"]["columns"], record["table"]["rows"])
            lines.append("")
        lines += [f"* {note}" for note in record.get("notes", [])]
        if record.get("commands"):
            lines += ["", "Command:", "", "```sh", *record["commands"], "```"]
        lines.append("")
    if section.appendix is not None:
        lines += [section.appendix.read_text().rstrip(), ""]
    share = section.others_cpu_s / (section.seconds * CORES) if section.seconds else 0.0
    lines += [
        f"_This section took {section.seconds:.0f} s; meanwhile other processes on the machine (not this "
        f"benchmark's) used {section.others_cpu_s:.1f} CPU s, {share:.0%} of its {CORES} cores._",
        "",
    ]
    return lines


def render(
    done: list[Section],
    machine: list[tuple[str, str]],
    load_before: str,
    load_after: str,
    previous: PreviousReport | None = None,
) -> str:
    lines = [
        "# Benchmarks",
        "",
        "Generated by `make bench` (`.venv/bin/python tests/bench/run_all.py --out docs/benchmarks.md`); "
        "do not edit by hand. Every number below comes from the same single run. The targets are the "
        "project's goals for the proxy (sections 1-5, 9 and 10), the quota engine's own budgets (section 6), "
        "the goals for quotas on the data path (sections 7 and 8) and, in section 11, the quick run of "
        "sections 2, 3, 9 and 10 that `make bench-quick` runs alone; a missed target is reported as "
        "**FAIL**, not hidden.",
        "",
        "How to read these numbers: this machine has **2 cores**, shared by the mock cluster (librdkafka's, "
        "in its own process), the proxy, the load generator and — several engineers work on this machine at "
        "once — whatever else runs; each section ends with the CPU other processes took meanwhile. "
        "Throughput and requests-per-second figures depend on that sharing; CPU-seconds (from "
        "`/proc/<pid>/stat`) and memory figures are the proxy's own cost and vary much less.",
        "",
        "## Machine",
        "",
        *_table(
            ["", ""],
            [*machine, ("load average (1/5/15 min) before / after", f"{load_before} / {load_after}")],
        ),
        "",
        "## Summary",
        "",
    ]
    summary: list[list[str]] = []
    for section in done:
        if section.error is not None:
            summary.append([section.number, "not measured", "", "", section.error])
            continue
        for record in section.records:
            if record.get("target") is not None:
                measured = f"{_number(record['value'])} {record.get('unit', '')}"
                name = f"`{record['name']}`"
                summary.append([section.number, name, measured, _target_text(record), _verdict(record)])
    lines += _table(["#", "measurement", "measured", "target", "result"], summary)
    lines.append("")
    if previous is not None:
        lines += _comparison_lines(summary, previous)
    for section in done:
        lines += _section_lines(section)
    return "\n".join(lines).rstrip() + "\n"


class PreviousReport(NamedTuple):
    commit: str
    date: str
    measured: dict[str, str]  # measurement (as written in its summary) -> what it measured


def previous_report(path: Path) -> PreviousReport | None:
    """The summary of the report `path` holds before this run replaces it (None when there is none)."""
    if not path.exists():
        return None
    commit = date = "?"
    measured: dict[str, str] = {}
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0] == "git commit":
            commit = cells[1].split()[0]
        elif len(cells) == 2 and cells[0] == "date (UTC)":
            date = cells[1]
        elif len(cells) == 5 and cells[1].startswith("`"):
            measured.setdefault(cells[1], cells[2])
    return PreviousReport(commit, date, measured)


def _comparison_lines(summary: list[list[str]], previous: PreviousReport) -> list[str]:
    """Before and after: each measurement of this run beside the same one in the report it replaces."""
    rows = [
        [number, name, previous.measured.get(name, "(not measured then)"), measured]
        for number, name, measured, _target, _result in summary
        if measured
    ]
    return [
        "## Before and after",
        "",
        f"The same measurements in the report this run replaced (commit {previous.commit}, "
        f"{previous.date} UTC). Throughput figures move with what else the machine runs (see each "
        "section's note on other processes' CPU); CPU-seconds and memory move much less.",
        "",
        *_table(["#", "measurement", f"before ({previous.commit})", "now"], rows),
        "",
    ]


# ---- main -----------------------------------------------------------------------------------------


def run_sections(chosen: list[Section]) -> None:
    for section in chosen:
        print(f"[bench] {section.heading} ...", file=sys.stderr, flush=True)
        start = time.monotonic()
        machine_before, own_before = machine_busy_cpu_seconds(), own_cpu_seconds()
        try:
            section.records = section.run()
        except NotAvailable as exc:
            section.error = str(exc)
            section.missing = True
        except Exception as exc:
            traceback.print_exc()
            section.error = f"{type(exc).__name__}: {exc}"
        section.seconds = time.monotonic() - start
        # Every process a section starts has been waited for when it returns, so its CPU is in ours.
        others = (machine_busy_cpu_seconds() - machine_before) - (own_cpu_seconds() - own_before)
        section.others_cpu_s = max(0.0, others)
        status = "not measured" if section.error else f"{len(section.records)} records"
        print(f"[bench]   {status} in {section.seconds:.0f} s", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run every benchmark and write the report.")
    parser.add_argument("--out", type=Path, help="write the Markdown report here (default: stdout)")
    parser.add_argument("--only", help="comma-separated section keys (default: all)")
    parser.add_argument("--quick", action="store_true", help="the quick section alone; exit 3 on a miss")
    args = parser.parse_args(argv)
    chosen = sections()
    if args.quick:
        chosen = [s for s in chosen if s.key == QUICK_KEY]
    elif args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {s.key for s in chosen}
        if unknown:
            parser.error(f"unknown sections {sorted(unknown)}; choose from {[s.key for s in chosen]}")
        chosen = [s for s in chosen if s.key in wanted]
    machine = machine_info()
    previous = previous_report(args.out) if args.out else None
    load_before = loadavg()
    run_sections(chosen)
    report = render(chosen, machine, load_before, loadavg(), previous)
    if args.out:
        args.out.write_text(report)
        print(f"[bench] wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(report)
    crashed = [s for s in chosen if s.error is not None and not s.missing]
    if crashed:
        return 1
    if args.quick and any(meets_target(r) is False for s in chosen for r in s.records):
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
