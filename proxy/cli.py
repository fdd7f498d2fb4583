"""`sluice` command line: run the proxy, the test broker, the load generator and the demo."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from sluice.config.address_checks import check_addresses
from sluice.config.errors import ConfigError
from sluice.config.load import load_config
from sluice.config.model import ProxyConfig

from .listeners import raise_open_file_limit
from .log import configure_logging, get_logger
from .services import ServiceStartError

EXIT_CONFIG_ERROR = 2


def run_event_loop(main: Callable[[], Coroutine[Any, Any, int]]) -> int:
    """Run `main` on uvloop when it is installed, on plain asyncio otherwise: same code either way."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main())
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main())


def _run_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run the proxy")
    p.add_argument("--config", metavar="FILE", help="YAML configuration file")
    p.add_argument("--upstream", metavar="HOST:PORT[,HOST:PORT...]", help="bootstrap servers of the cluster")
    p.add_argument("--listen", metavar="HOST:PORT", help="bootstrap listener of the proxy")
    p.add_argument("--advertised-host", metavar="H", help="host clients are told to connect to")
    p.add_argument("--broker-port-base", metavar="N", type=int, help="broker node N listens on N + this port")
    p.add_argument("--metrics", metavar="HOST:PORT", help="serve Prometheus metrics here")


def _overrides(args: argparse.Namespace) -> dict[str, object]:
    flags = {
        "upstream.bootstrap": args.upstream,
        "listen": args.listen,
        "advertised_host": args.advertised_host,
        "broker_port_base": args.broker_port_base,
        "metrics.listen": args.metrics,
    }
    return {key: value for key, value in flags.items() if value is not None}


async def _serve(config: ProxyConfig) -> int:
    from .server import SluiceServer

    server = SluiceServer(config)
    await server.start()
    return await server.run_until_stopped()


def run_command(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config, _overrides(args))
        check_addresses(config)  # listen hosts resolve; no upstream is Sluice itself
    except ConfigError as exc:
        print(f"sluice: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    configure_logging(config.log.level, config.log.format)
    get_logger().info("open_files_limit", limit=raise_open_file_limit())
    try:
        return run_event_loop(lambda: _serve(config))
    except ConfigError as exc:  # a TLS file that cannot be read or does not match, found at start-up
        print(f"sluice: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    except ServiceStartError as exc:  # logged as service_start_failed; the cause decides the exit code
        print(f"sluice: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR if isinstance(exc.cause, ConfigError) else 1
    except OSError as exc:
        get_logger().error("startup_failed", error=str(exc))
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # These subcommands own their flags entirely; hand them the rest of the line untouched.
    passthrough = {
        "mock-cluster": "sluice.proxy.tools.mock_cluster",
        "perf-test": "sluice.proxy.tools.perf_test",
        "demo": "sluice.proxy.tools.demo",
    }
    if argv and argv[0] in passthrough:
        module = __import__(passthrough[argv[0]], fromlist=["main"])
        return int(module.main(argv[1:]) or 0)
    parser = argparse.ArgumentParser(prog="sluice", description="Kafka quota-enforcing proxy")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _run_parser(sub)
    for name, module in passthrough.items():
        sub.add_parser(name, help=f"see `sluice {name} --help` ({module})", add_help=False)
    args = parser.parse_args(argv)
    return run_command(args)


if __name__ == "__main__":
    sys.exit(main())
