"""Runs the jobs `cli.py` parsed: one SparkSession, the input read once, the HTML report rendered last."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from .inputs import read_usage, write_usage_parquet
from .output.html_report import render_report
from .progress import Progress
from .session import spark_session

if TYPE_CHECKING:  # PySpark is imported when a job starts: `sluice pipeline --help` needs no JVM
    from pyspark.sql import DataFrame, SparkSession

# What `sluice pipeline demo` replays against its records: a default client-id quota every client gets,
# and a tighter one on the busiest producer.
DEMO_QUOTAS = """\
# Candidate quotas replayed by `sluice pipeline demo` (Sluice's own `quota:` format).
quota:
  entities:
    - {client_id: <default>, producer_byte_rate: 60000, consumer_byte_rate: 90000}
    - {user: team-0, client_id: app-000, producer_byte_rate: 45000}
"""
# The same for the records `sluice demo` saves: its clients are alpha (100 kB/s), beta (250 kB/s) and the
# unlimited gamma (500 kB/s, paced) and delta (flat out); the consumer reader has 150 kB/s.
DEMO_RUN_QUOTAS = """\
# Candidate quotas replayed by `sluice pipeline demo --input` on `sluice demo`'s records.
quota:
  entities:
    - {client_id: <default>, producer_byte_rate: 400000, consumer_byte_rate: 100000}
    - {client_id: alpha, producer_byte_rate: 150000}
"""


SPARK_LOG = "spark.log"


def _session(args: argparse.Namespace) -> SparkSession:
    return spark_session(
        master=args.master,
        driver_memory=args.driver_memory,
        shuffle_partitions=args.shuffle_partitions,
        log_path=None if args.verbose else os.path.join(args.out, SPARK_LOG),
    )


def _check_local_input(source: str | None) -> None:
    """A local path that is not there is said in one line before Spark starts (tens of seconds)."""
    if source and "://" not in source and not os.path.exists(source):
        raise ValueError(f"{source}: no such file or directory")


def run_job(args: argparse.Namespace) -> int:
    _check_local_input(getattr(args, "input", None))
    os.makedirs(args.out, exist_ok=True)
    if args.job == "synth":
        return _synth(args)
    if args.job == "demo":
        return _demo(args)
    if getattr(args, "quotas", None):
        from .jobs.whatif import load_candidate_quotas

        load_candidate_quotas(args.quotas)  # a bad file fails now, naming its key, before Spark starts
    spark = _session(args)
    progress = Progress(spark, quiet=args.quiet)
    options = {}
    for pair in args.kafka_option:
        key, _, value = pair.partition("=")
        options[key] = value
    usage = read_usage(spark, args.input, args.input_format, options)
    jobs = ("report", "whatif", "propose", "forecast") if args.job == "all" else (args.job,)
    for job in jobs:
        if job == "whatif" and not getattr(args, "quotas", None):
            progress.say("whatif: skipped (no --quotas)")
            continue
        if job == "forecast" and args.job == "all" and not args.capacity:
            progress.say("forecast: trend only (no --capacity)")
        _run_one(spark, job, usage, args, progress)
    path = render_report(args.out)
    progress.say(f"report: {path}")
    print(path)
    return 0


def _run_one(
    spark: SparkSession, job: str, usage: DataFrame, args: argparse.Namespace, progress: Progress
) -> None:
    if job == "report":
        from .jobs.report import run_report

        run_report(spark, usage, args.out, progress=progress)
    elif job == "whatif":
        from .jobs.replay import ReplayOptions
        from .jobs.whatif import WhatifOptions, run_whatif

        replay = ReplayOptions(
            request_bytes=args.request_bytes, fast_forward=not args.no_fast_forward, keep_events=args.events
        )
        run_whatif(spark, usage, args.quotas, args.out, WhatifOptions(replay), progress=progress)
    elif job == "propose":
        from .jobs.propose import ProposeOptions, run_propose

        proposing = ProposeOptions(
            percentile=args.percentile,
            headroom=args.headroom,
            produce_capacity=args.produce_capacity,
            fetch_capacity=args.fetch_capacity,
            by=args.by,
            bootstrap=args.bootstrap,
        )
        run_propose(spark, usage, args.out, proposing, progress=progress)
    elif job == "forecast":
        from .jobs.forecast import ForecastOptions, run_forecast

        forecasting = ForecastOptions(
            capacity=args.capacity, metric=args.metric, horizon_days=args.horizon_days
        )
        run_forecast(spark, usage, args.out, forecasting, progress=progress)


def _synth(args: argparse.Namespace) -> int:
    from .jobs.synth import SynthSpec, synth_usage
    from .usage_export import write_usage_jsonl

    spec = SynthSpec(
        entities=args.entities,
        duration_s=round(args.days * 86_400 / args.interval_s) * args.interval_s,
        interval_s=args.interval_s,
        growth_pct_per_day=args.growth,
        jitter_pct=args.jitter,
        topics=args.topics,
        instances=args.instances,
        brokers=args.brokers,
    )
    spark = _session(args)
    progress = Progress(spark, quiet=args.quiet)
    usage = synth_usage(spark, spec)
    with progress.step(f"synth: {spec.table_rows:,} rows ({spec.rows:,} entity intervals)"):
        if args.format == "parquet":
            path = os.path.join(args.out, "usage.parquet")
            write_usage_parquet(usage, path)
        else:
            path = os.path.join(args.out, "usage.jsonl")
            write_usage_jsonl(spark, usage, path)
    print(path)
    return 0


def _demo(args: argparse.Namespace) -> int:
    """Report and whatif on `sluice demo`'s records (--input) or on a synthetic week, one page at the end
    (docs/pipeline.md, "Try it")."""
    from .jobs.replay import ReplayOptions
    from .jobs.report import run_report
    from .jobs.synth import SynthSpec, synth_usage
    from .jobs.whatif import WhatifOptions, run_whatif

    spark = _session(args)
    progress = Progress(spark, quiet=args.quiet)
    quotas = os.path.join(args.out, "candidate-quotas.yaml")
    with open(quotas, "w", encoding="utf-8") as stream:
        stream.write(DEMO_RUN_QUOTAS if args.input else DEMO_QUOTAS)
    if args.input:
        progress.say(f"demo: the usage records in {args.input}")
        usage = read_usage(spark, args.input)
    else:
        usage_path = os.path.join(args.out, "usage.parquet")
        with progress.step("demo: synthetic usage records, 7 days x 20 entities, one-minute intervals"):
            write_usage_parquet(synth_usage(spark, SynthSpec()), usage_path)
        usage = read_usage(spark, usage_path)
    run_report(spark, usage, args.out, progress=progress)
    run_whatif(spark, usage, quotas, args.out, WhatifOptions(ReplayOptions()), progress=progress)
    path = render_report(args.out)
    progress.say(f"report: {path}")
    print(path)
    return 0
