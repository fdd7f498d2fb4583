"""`sluice pipeline <job>`: the capacity-planning jobs from the command line.

    sluice pipeline synth    --out DIR [--days 7 --entities 20 --interval-s 60 --format parquet]
    sluice pipeline report   --input SRC --out DIR
    sluice pipeline whatif   --input SRC --out DIR --quotas FILE
    sluice pipeline propose  --input SRC --out DIR [--percentile 0.99 --headroom 1.2 --produce-capacity B/s]
    sluice pipeline forecast --input SRC --out DIR --capacity B/s
    sluice pipeline all      --input SRC --out DIR [--quotas FILE] [--capacity B/s]
    sluice pipeline demo     --out DIR

SRC is a Parquet table, JSON lines, or kafka://HOST:PORT/TOPIC (`inputs.py`). Every job (re)writes
DIR/report.html. Exit codes: 0 done, 1 the input could not be read as usage records, 2 bad arguments or
a bad quotas file (the message names the key), 3 the machine cannot run Spark (Java, or the pipeline
extra not installed).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence

from sluice.config.distribution import install_hint

EXIT_INPUT, EXIT_CONFIG, EXIT_ENVIRONMENT = 1, 2, 3
DESCRIPTION = "Capacity planning on Spark from Sluice's usage records (docs/pipeline.md)."
JOB_HELP = {
    "synth": "generate usage records with known answers",
    "report": "who uses what and when, who is throttled and how much",
    "whatif": "replay candidate quotas against the recorded demand",
    "propose": "quotas from percentiles x headroom, within a capacity budget",
    "forecast": "the trend of the daily peak and when it crosses a capacity",
    "all": "report, whatif (with --quotas), propose and forecast in one Spark session",
    "demo": "the records `sluice demo` saved (or synthetic ones) through report and whatif: one HTML page",
}
JOBS = tuple(JOB_HELP)
# Our own error types, as they appear inside an error Spark relays from an executor.
_OUR_ERRORS = re.compile(r"(?:UsageSourceError|UsageRecordError|UsageTableError): (.+)")


class HelpFormatter(argparse.HelpFormatter):
    """Each option's default after its help, unless there is none (None, False, an empty list)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        shown = action.default not in (None, False, argparse.SUPPRESS, [])
        if shown and "%(default)" not in text and "default" not in text and action.option_strings:
            text += " (default: %(default)s)"
        return text


def _spark_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("Spark")
    g.add_argument("--master", help="Spark master, ignored under spark-submit (default: local[*])")
    g.add_argument(
        "--driver-memory",
        metavar="SIZE",
        help="driver heap, e.g. 4g; in local mode all of Spark (default: Spark's, 1g)",
    )
    g.add_argument(
        "--shuffle-partitions",
        type=int,
        metavar="N",
        help="spark.sql.shuffle.partitions (default: Spark's, 200)",
    )
    g.add_argument("--quiet", action="store_true", help="no progress lines (default: a line per step)")
    g.add_argument(
        "--verbose", action="store_true", help="Spark's and librdkafka's own log lines, and full tracebacks"
    )


def _input_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--input", required=True, metavar="SRC", help="Parquet, JSON lines or kafka://HOST:PORT/TOPIC"
    )
    p.add_argument("--input-format", choices=("parquet", "jsonl", "kafka"), help="default: from the name")
    p.add_argument(
        "--kafka-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a sluice-usage source option, e.g. kafka.security.protocol=SSL (repeatable; default: none)",
    )


def _job_options(p: argparse.ArgumentParser, job: str) -> None:
    if job in ("whatif", "all"):
        p.add_argument(
            "--quotas",
            required=job == "whatif",
            metavar="FILE",
            help="candidate quotas: a sluice.yaml or its quota: section",
        )
        p.add_argument(
            "--events", action="store_true", help="also write every throttle (events.parquet) (default: off)"
        )
        p.add_argument(
            "--request-bytes",
            type=int,
            default=1_048_576,
            metavar="BYTES",
            help="the largest Produce request the replay sends (a client's max.request.size)",
        )
        p.add_argument(
            "--no-fast-forward",
            action="store_true",
            help="step every second (slower, same result) (default: skip quiet spans)",
        )
    if job in ("propose", "all"):
        p.add_argument(
            "--percentile",
            type=float,
            default=0.99,
            metavar="P",
            help="each entity's per-second rate at this percentile (0-1) is what its quota must cover",
        )
        p.add_argument(
            "--headroom", type=float, default=1.2, metavar="X", help="the quota is the percentile x this"
        )
        p.add_argument(
            "--produce-capacity",
            type=float,
            metavar="B/S",
            help="budget for all produce quotas together (default: none)",
        )
        p.add_argument(
            "--fetch-capacity",
            type=float,
            metavar="B/S",
            help="budget for all fetch quotas together (default: none)",
        )
        p.add_argument(
            "--by",
            choices=("auto", "user", "client-id", "user-client-id"),
            default="auto",
            help="what the quotas are set on; auto: (user, client-id) for authenticated users, client-id for "
            "ANONYMOUS traffic",
        )
        p.add_argument(
            "--bootstrap",
            default="SLUICE_HOST:9092",
            metavar="HOST:PORT",
            help="the bootstrap server written into the proposed kafka-configs.sh commands",
        )
    if job in ("forecast", "all"):
        p.add_argument(
            "--capacity",
            type=float,
            metavar="B/S",
            help="cluster capacity the peak grows towards (default: none, no crossing date)",
        )
        p.add_argument(
            "--metric",
            choices=("total", "produce", "fetch"),
            default="total",
            help="which daily peak is forecast: produce + fetch, or one of them",
        )
        p.add_argument(
            "--horizon-days",
            type=int,
            default=3 * 365,
            metavar="DAYS",
            help="how far ahead the forecast looks",
        )


def _synth_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--entities", type=int, default=20, metavar="N", help="client-ids to generate")
    p.add_argument("--days", type=float, default=7.0, metavar="DAYS", help="how long a span of records")
    p.add_argument(
        "--interval-s", type=int, default=60, metavar="S", help="one record per entity every S seconds"
    )
    p.add_argument("--growth", type=float, default=1.0, help="%% of day 0's demand added per day")
    p.add_argument("--jitter", type=float, default=5.0, help="%% noise")
    p.add_argument("--topics", type=int, default=5, metavar="N", help="topics the entities use")
    p.add_argument("--instances", type=int, default=1, metavar="N", help="Sluice instances publishing")
    p.add_argument(
        "--brokers", type=int, default=3, metavar="N", help="brokers (node ids 1..N; broker 1 leads the most)"
    )
    p.add_argument("--format", choices=("parquet", "jsonl"), default="parquet", help="the output's format")


def add_arguments(top: argparse.ArgumentParser) -> None:
    """`sluice pipeline`'s arguments (proxy/cli.py's contract): one sub-parser per job."""
    sub = top.add_subparsers(dest="job", required=True, metavar="JOB")
    for job in JOBS:
        p = sub.add_parser(
            job,
            help=JOB_HELP[job],
            description=JOB_HELP[job],
            formatter_class=HelpFormatter,
        )
        p.add_argument("--out", required=True, metavar="DIR", help="output directory (local to the driver)")
        _spark_options(p)
        if job == "synth":
            _synth_options(p)
        elif job == "demo":
            p.add_argument(
                "--input",
                metavar="SRC",
                help="usage records to report on, e.g. what `sluice demo --usage-out` saved "
                "(default: a synthetic week)",
            )
        else:
            _input_options(p)
            _job_options(p, job)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="sluice pipeline", description=DESCRIPTION)
    add_arguments(top)
    return top


def explain(exc: BaseException) -> str:
    """Our own message, when Spark wrapped it in a long executor traceback; else the exception's text."""
    text = str(exc)
    found = _OUR_ERRORS.findall(text)
    return found[-1].strip() if found else text.strip().splitlines()[0] if text.strip() else repr(exc)


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone (`python -m sluice.pipeline.cli`, spark-submit's `submit.py`)."""
    return run(parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        print(f"sluice pipeline: needs the pipeline extra: {install_hint('pipeline')}", file=sys.stderr)
        return EXIT_ENVIRONMENT
    from sluice.config.errors import ConfigError

    from .java_check import JavaError
    from .runner import run_job

    try:
        return run_job(args)
    except JavaError as exc:
        print(f"sluice pipeline: {exc}", file=sys.stderr)
        return EXIT_ENVIRONMENT
    except ConfigError as exc:
        print(f"sluice pipeline: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except ValueError as exc:
        print(f"sluice pipeline: {explain(exc)}", file=sys.stderr)
        return EXIT_INPUT
    except Exception as exc:  # Spark relays executor failures as its own exception types
        if _OUR_ERRORS.search(str(exc)):
            print(f"sluice pipeline: {explain(exc)}", file=sys.stderr)
            return EXIT_INPUT
        if args.verbose:
            raise
        where = "" if args.job == "synth" else f"; Spark's log: {args.out}/spark.log"
        print(
            f"sluice pipeline: {type(exc).__name__}: {explain(exc)} (--verbose for the traceback{where})",
            file=sys.stderr,
        )
        return EXIT_INPUT


if __name__ == "__main__":
    sys.exit(main())
