"""`sluice usage export`: the usage topic to Parquet or JSON lines, for long-term history.

    sluice usage export --bootstrap HOST:PORT[,...] [--topic T] --out PATH [--format parquet|jsonl]
                        [--resume] [--starting-offsets JSON] [--ending-offsets JSON]
                        [--kafka-option kafka.security.protocol=SSL ...]

PATH is any path Spark writes (local, hdfs://, s3a://). Exit codes as `sluice pipeline`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from sluice.config.distribution import install_hint

from .cli import _OUR_ERRORS, EXIT_ENVIRONMENT, EXIT_INPUT, explain

DESCRIPTION = "Sluice's usage records (docs/usage-records.md, docs/pipeline.md)."


def add_arguments(top: argparse.ArgumentParser) -> None:
    """`sluice usage`'s arguments (proxy/cli.py's contract)."""
    sub = top.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = sub.add_parser(
        "export", help="write the usage topic to files", description="Write the usage topic to files"
    )
    p.add_argument(
        "--bootstrap",
        required=True,
        metavar="HOST:PORT[,HOST:PORT...]",
        help="the cluster with the usage topic",
    )
    p.add_argument(
        "--topic", default=None, help="the usage topic (default: the data source's, _sluice_usage)"
    )
    p.add_argument(
        "--out", required=True, metavar="PATH", help="the directory (Parquet) or file (JSON lines)"
    )
    p.add_argument("--format", choices=("parquet", "jsonl"), default="parquet", help="(default: parquet)")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue after the previous export to PATH (default: from the start)",
    )
    p.add_argument("--starting-offsets", help='earliest or JSON {"0": 42} (default: earliest)')
    p.add_argument("--ending-offsets", help='latest or JSON {"0": 42} (default: latest)')
    p.add_argument(
        "--kafka-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a librdkafka setting as kafka.KEY, e.g. kafka.security.protocol=SSL (repeatable)",
    )
    p.add_argument("--master", help="Spark master (default: local[*])")
    p.add_argument("--driver-memory", metavar="SIZE", help="driver heap, e.g. 4g (default: Spark's, 1g)")
    p.add_argument(
        "--verbose",
        action="store_true",
        help="Spark's own log lines on the terminal (default: in PATH.spark.log)",
    )


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="sluice usage", description=DESCRIPTION)
    add_arguments(top)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    return run(parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        print(f"sluice usage: needs the pipeline extra: {install_hint('pipeline')}", file=sys.stderr)
        return EXIT_ENVIRONMENT
    from .java_check import JavaError
    from .session import spark_session
    from .usage_export import export_usage

    options = {"kafka.bootstrap.servers": args.bootstrap}
    if args.topic:
        options["topic"] = args.topic
    if args.starting_offsets:
        options["startingOffsets"] = args.starting_offsets
    if args.ending_offsets:
        options["endingOffsets"] = args.ending_offsets
    for pair in args.kafka_option:
        key, _, value = pair.partition("=")
        options[key] = value
    try:
        spark = spark_session(
            master=args.master,
            driver_memory=args.driver_memory,
            app_name="sluice-usage-export",
            log_path=None if args.verbose else f"{args.out.rstrip('/')}.spark.log",
        )
        done = export_usage(spark, options, args.out, args.format, args.resume)
    except JavaError as exc:
        print(f"sluice usage: {exc}", file=sys.stderr)
        return EXIT_ENVIRONMENT
    except Exception as exc:
        if _OUR_ERRORS.search(str(exc)):
            print(f"sluice usage: {explain(exc)}", file=sys.stderr)
            return EXIT_INPUT
        raise
    print(f"exported {done['messages']} message(s) to {args.out}; end offsets {done['end_offsets']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
