"""`make bench-pipeline`: report and whatif on generated usage records, rows per second, local[1] vs local[2].

Full size (the issue's): 30 days x 500 entities at one-minute resolution = 21.6 million entity intervals
(64.8 million table rows with their topic rows, two per entity interval: one per broker it goes through)::

    .venv/bin/python tests/bench/bench_pipeline.py --out docs/benchmarks-pipeline.md

A small run to check the bench works (minutes, not an hour)::

    .venv/bin/python tests/bench/bench_pipeline.py --days 2 --entities 50

The data is written once (Parquet, `synth`), then each (master, job) runs in a fresh process, so each
master gets its own JVM; the time is the job's own, after Spark has started. Rows per second counts entity
intervals (the 21.6 million). The what-if's candidate quotas hold the busiest tenth of the entities below
their busy-hour demand (a default client-id producer_byte_rate), so the replay has real throttling to do.
Benchmarks report, they do not gate.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

from sluice.pipeline.jobs.synth import SynthSpec

JOBS = ("report", "whatif")


def candidate_quotas(spec: SynthSpec) -> str:
    # Entity k's busy-hour demand is 2 x 2000 x (E - k): the busiest tenth are above this.
    bound = 2 * 2000 * (spec.entities - spec.entities // 10)
    return f"quota:\n  entities:\n    - {{client_id: <default>, producer_byte_rate: {bound}}}\n"


def worker(args: argparse.Namespace) -> None:
    """One job on one master; prints a JSON line with the job's seconds."""
    from sluice.pipeline.inputs import read_usage
    from sluice.pipeline.jobs.report import run_report
    from sluice.pipeline.jobs.whatif import run_whatif
    from sluice.pipeline.session import spark_session

    spark = spark_session(master=args.master, driver_memory=args.driver_memory)
    usage = read_usage(spark, args.data)
    began = time.monotonic()
    if args.job == "report":
        run_report(spark, usage, args.scratch)
    else:
        run_whatif(spark, usage, args.quotas, args.scratch)
    print(json.dumps({"seconds": time.monotonic() - began}))
    spark.stop()


def run(args: argparse.Namespace) -> int:
    spec = SynthSpec(entities=args.entities, duration_s=args.days * 86_400, interval_s=60)
    with tempfile.TemporaryDirectory(prefix="sluice-bench-pipeline-") as scratch:
        data = os.path.join(scratch, "usage.parquet")
        quotas = os.path.join(scratch, "quotas.yaml")
        with open(quotas, "w") as stream:
            stream.write(candidate_quotas(spec))
        began = time.monotonic()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "sluice.proxy",
                "pipeline",
                "synth",
                "--out",
                scratch,
                "--days",
                str(args.days),
                "--entities",
                str(args.entities),
                "--interval-s",
                "60",
                "--quiet",
                "--driver-memory",
                args.driver_memory,
            ],
            check=True,
        )
        print(f"synth: {spec.rows:,} entity intervals in {time.monotonic() - began:.0f} s", file=sys.stderr)
        results: dict[tuple[str, str], float] = _load_results(args.results)
        for master in args.masters.split(","):
            for job in JOBS:
                command = [
                    sys.executable,
                    __file__,
                    "--worker",
                    "--job",
                    job,
                    "--master",
                    master,
                    "--data",
                    data,
                    "--quotas",
                    quotas,
                    "--scratch",
                    os.path.join(scratch, f"out-{job}-{''.join(c for c in master if c.isalnum())}"),
                    "--driver-memory",
                    args.driver_memory,
                ]
                done = subprocess.run(command, check=True, capture_output=True, text=True)
                seconds = json.loads(done.stdout.strip().splitlines()[-1])["seconds"]
                results[(master, job)] = seconds
                print(
                    f"{job} on {master}: {seconds:.1f} s, {spec.rows / seconds:,.0f} rows/s", file=sys.stderr
                )
                _save_results(args.results, results)
    text = report(spec, args, results)
    print(text)
    if args.out:
        with open(args.out, "w") as stream:
            stream.write(text)
    return 0


def _load_results(path: str | None) -> dict[tuple[str, str], float]:
    """Seconds per (master, job) from earlier runs of the same size (`--results`), so the masters may be
    measured one run at a time and reported together."""
    if not path or not os.path.exists(path):
        return {}
    with open(path) as stream:
        return {(master, job): seconds for master, job, seconds in json.load(stream)}


def _save_results(path: str | None, results: dict[tuple[str, str], float]) -> None:
    if path:
        with open(path, "w") as stream:
            json.dump([[master, job, seconds] for (master, job), seconds in results.items()], stream)


def report(spec: SynthSpec, args: argparse.Namespace, results: dict[tuple[str, str], float]) -> str:
    masters = sorted({master for master, _job in results})
    lines = [
        "# Pipeline benchmark",
        "",
        f"`{' '.join(sys.argv)}` on {platform.node()} ({os.cpu_count()} cores), "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        f"Input: {args.days} days x {args.entities} entities at one-minute resolution = {spec.rows:,} entity "
        f"intervals ({spec.table_rows:,} rows with the topic rows). Rows/s counts entity intervals.",
        "",
        "| job | " + " | ".join(masters) + " | local[2] / local[1] |",
        "|---|" + "---|" * (len(masters) + 1),
    ]
    for job in JOBS:
        cells = [f"{results[(m, job)]:.1f} s, {spec.rows / results[(m, job)]:,.0f} rows/s" for m in masters]
        ratio = ""
        if "local[1]" in masters and "local[2]" in masters:
            ratio = f"{results[('local[1]', job)] / results[('local[2]', job)]:.2f}x"
        lines.append(f"| {job} | " + " | ".join(cells) + f" | {ratio} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--entities", type=int, default=500)
    parser.add_argument("--masters", default="local[1],local[2]")
    parser.add_argument("--driver-memory", default="6g")
    parser.add_argument("--out", help="also write the markdown table here")
    parser.add_argument(
        "--results", help="a JSON file of earlier runs' seconds (same size) to report with, and add to"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--job", choices=JOBS, help=argparse.SUPPRESS)
    parser.add_argument("--master", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--quotas", help=argparse.SUPPRESS)
    parser.add_argument("--scratch", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
