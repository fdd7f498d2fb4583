"""`sluice` command line: one table of subcommands, each with a one-line purpose and its own module.

A subcommand's module defines ``add_arguments(parser)`` and ``run(args) -> int`` (the exit code), and may
define ``error_hint(message) -> str | None`` to add a hint to a usage error. It is imported only when that
subcommand runs, so `sluice run` never imports the load generator's or the demo's dependencies. To add a
subcommand, add one row to SUBCOMMANDS.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType
from typing import Any, NoReturn

from sluice.config.distribution import DISTRIBUTION, install_hint

PROG = "sluice"


# What each optional extra of pyproject.toml brings that a subcommand imports.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "broker": ("confluent_kafka",),
    "demo": ("confluent_kafka", "matplotlib"),
    "pipeline": ("pyspark", "pandas", "pyarrow", "confluent_kafka", "plotly"),
}
# A subcommand whose extra is missing exits with this code, as `sluice pipeline` does without Spark.
EXIT_MISSING_EXTRA = 3


@dataclass(frozen=True)
class Subcommand:
    name: str
    purpose: str  # one line, shown by `sluice --help` and at the top of `sluice NAME --help`
    module: str  # defines add_arguments(parser) and run(args) -> int
    extra: str | None = None  # the optional extra it needs (EXTRA_MODULES), checked before its module loads


SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand("run", "run the proxy in front of a Kafka cluster", "sluice.proxy.commands.run"),
    Subcommand(
        "check-config",
        "validate a configuration file and print the configuration it gives",
        "sluice.proxy.commands.check_config",
    ),
    Subcommand(
        "mock-cluster",
        "run a local test broker (librdkafka's mock Kafka cluster)",
        "sluice.proxy.tools.mock_cluster",
        "broker",
    ),
    Subcommand(
        "perf-test",
        "produce records, report throughput and latency (kafka-producer-perf-test)",
        "sluice.proxy.tools.perf_test",
        "broker",
    ),
    Subcommand(
        "consume",
        "read records, report how many and how fast (kafka-consumer-perf-test)",
        "sluice.proxy.tools.consume",
        "broker",
    ),
    Subcommand(
        "demo",
        "watch Sluice hold producers and a consumer to their quotas, with a chart",
        "sluice.proxy.tools.demo",
        "demo",
    ),
    Subcommand(
        "pipeline",
        "capacity planning on Spark: report, what-if, proposals, forecast",
        "sluice.pipeline.cli",
        "pipeline",
    ),
    Subcommand(
        "usage", "the usage records: export the usage topic to files", "sluice.pipeline.usage_cli", "pipeline"
    ),
    Subcommand(
        "reload",
        "ask a running proxy to re-read its configuration file (SIGHUP)",
        "sluice.proxy.tools.reload",
    ),
    Subcommand(
        "quotas",
        "client quotas: describe, alter (kafka-configs.sh's), import the brokers'",
        "sluice.proxy.tools.quotas",
    ),
)


def package_version() -> str:
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Each option's default after its help (unless None or already said); descriptions and epilogs keep
    their line breaks."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        shown = action.default not in (None, False, argparse.SUPPRESS, [])
        if shown and "%(default)" not in text and "default:" not in text and action.option_strings:
            text += " (default: %(default)s)"
        return text


class _CommandParser(argparse.ArgumentParser):
    """A subcommand's parser: a usage error names the subcommand and may carry the module's hint."""

    def __init__(self, *args: Any, hint: object = None, **kwargs: Any) -> None:  # argparse's, passed on
        super().__init__(*args, **kwargs)
        self._hint = hint

    def error(self, message: str) -> NoReturn:
        hint = self._hint(message) if callable(self._hint) else None
        super().error(f"{message}\n  {hint}" if hint else message)


def command_parser(command: Subcommand) -> tuple[argparse.ArgumentParser, ModuleType]:
    """The subcommand's own parser (prog `sluice NAME`), and its module."""
    module = importlib.import_module(command.module)
    parser = _CommandParser(
        prog=f"{PROG} {command.name}",
        description=getattr(module, "DESCRIPTION", None) or command.purpose[:1].upper() + command.purpose[1:],
        epilog=getattr(module, "EPILOG", None),
        formatter_class=HelpFormatter,
        hint=getattr(module, "error_hint", None),
    )
    module.add_arguments(parser)
    return parser, module


def commands_table() -> str:
    width = max(len(command.name) for command in SUBCOMMANDS) + 3
    rows = [f"  {command.name:<{width}}{command.purpose}" for command in SUBCOMMANDS]
    return "commands:\n" + "\n".join(rows)


def top_level_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        usage=f"{PROG} [-h] [--version] COMMAND [options]",
        description="Sluice: Kafka's client quotas, enforced by a proxy in front of the whole cluster.",
        epilog=f"{commands_table()}\n\n`{PROG} COMMAND --help` describes a command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help=argparse.SUPPRESS)
    for command in SUBCOMMANDS:
        # Names only, for argparse's "invalid choice" message: each subcommand is parsed by its own parser.
        sub.add_parser(command.name, add_help=False)
    return parser


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module set to None
        return False


def missing_extra(command: Subcommand) -> str | None:
    """One line saying what to install, if the command's extra is not (all) installed."""
    if command.extra is None:
        return None
    missing = [name for name in EXTRA_MODULES[command.extra] if not _installed(name)]
    if not missing:
        return None
    return (
        f"{PROG} {command.name}: needs the {command.extra} extra ({', '.join(missing)} not installed): "
        f"{install_hint(command.extra)}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = {command.name: command for command in SUBCOMMANDS}
    if argv and argv[0] in commands:
        missing = missing_extra(commands[argv[0]])
        if missing is not None:
            print(missing, file=sys.stderr)
            return EXIT_MISSING_EXTRA
        parser, module = command_parser(commands[argv[0]])
        return int(module.run(parser.parse_args(argv[1:])) or 0)
    # --help, --version, no command or an unknown one: argparse answers and exits.
    top_level_parser().parse_args(argv)
    return 2
