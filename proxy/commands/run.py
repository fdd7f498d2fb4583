"""`sluice run`: the proxy, configured by a YAML file and flags on top of it."""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from sluice.config.address_checks import check_addresses
from sluice.config.errors import ConfigError
from sluice.config.load import load_config
from sluice.config.model import DEFAULT_IDLE_TIMEOUT_S, ProxyConfig

from ..allocator import allocator_in_use
from ..listeners.listeners import raise_open_file_limit
from ..observability.log import assemble_loggers, configure_logging, get_logger
from ..process.process_memory import return_large_buffers_to_os
from ..process.readiness import notify_ready
from ..process.workers import check_workers, run_workers
from ..services import ServiceStartError

EXIT_CONFIG_ERROR = 2
# Below this many descriptors beyond reserved_open_files, too few clients could be served to be useful.
MIN_OPEN_FILES_FOR_CLIENTS = 64

EPILOG = f"""\
Quotas come from the configuration file's `quota:` section; no flag sets them. Every key, with its
default, is in docs/config-example.yaml; how quotas behave is in docs/quotas.md. A flag overrides the
file's key named in its help. Nothing is required from the file if the flags give listen and upstream.

Other defaults (file only): max_frame_bytes 100 MiB, idle_timeout_s {DEFAULT_IDLE_TIMEOUT_S:g},
shutdown_timeout_s 30, log.level info, log.format json (JSON lines on stderr).

With --workers N, N processes serve the same ports (docs/fleet.md).

Signals: SIGTERM or SIGINT drain and stop; SIGHUP reloads the configuration; SIGQUIT logs a status line;
SIGUSR1, SIGUSR2 and the rest are logged and ignored. Only SIGKILL stops Sluice without a drain.

Exit codes: 0 after SIGTERM or SIGINT (in-flight requests answered first), 2 when the configuration is
refused (the message names the key, the value and what was expected; also a listen host that is not an
address of this machine, upstream servers of which none resolves, an upstream that is Sluice's own
listener, or a broker port found at start-up to be impossible),
1 when a listener cannot open at start-up (the address is named)."""


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """The flags that set configuration keys; `check-config` takes them too."""
    parser.add_argument(
        "--upstream",
        metavar="HOST:PORT[,HOST:PORT...]",
        help="bootstrap servers of the Kafka cluster (upstream.bootstrap; required, here or in the file)",
    )
    parser.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="where clients bootstrap (listen; required, here or in the file)",
    )
    parser.add_argument(
        "--advertised-host",
        metavar="HOST",
        help="host clients are told to connect to for each broker (advertised_host; default: listen's host)",
    )
    parser.add_argument(
        "--broker-port-base",
        metavar="N",
        type=int,
        help="broker node ID gets its own listener on N + ID (broker_port_base; default: listen port + 1)",
    )
    parser.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        help="serve Prometheus metrics on http://HOST:PORT/metrics (metrics.listen; default: none)",
    )
    parser.add_argument(
        "--instance-id",
        metavar="NAME",
        help="this process's name in usage records, unique in a fleet (usage.instance_id; "
        "default: advertised host:listen port/pid)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", metavar="FILE", help="YAML configuration file (every key: docs/config-example.yaml)"
    )
    add_config_flags(parser)
    parser.add_argument(
        "--workers",
        metavar="N",
        type=int,
        default=1,
        help="run N proxy processes on the same listeners (SO_REUSEPORT), holding quotas together through "
        "the usage topic (needs fleet.enabled when quotas are configured); worker i serves metrics on the "
        "metrics port + i",
    )


def error_hint(message: str) -> str | None:
    if "quota" in message.lower():
        return "Quotas are set in the configuration file's quota: section (docs/config-example.yaml)."
    return None


def config_overrides(args: argparse.Namespace) -> dict[str, object]:
    flags = {
        "upstream.bootstrap": args.upstream,
        "listen": args.listen,
        "advertised_host": args.advertised_host,
        "broker_port_base": args.broker_port_base,
        "metrics.listen": args.metrics,
        "usage.instance_id": getattr(args, "instance_id", None),
    }
    return {key: value for key, value in flags.items() if value is not None}


def run_event_loop(main: Callable[[], Coroutine[Any, Any, int]]) -> int:
    """Run `main` on uvloop when it is installed, on plain asyncio otherwise: same code either way."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main())
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main())


async def _serve(
    config: ProxyConfig,
    path: str | None = None,
    overrides: dict[str, object] | None = None,
    reuse_port: bool = False,
) -> int:
    from ..process.server import SluiceServer

    server = SluiceServer(config, reuse_port=reuse_port)
    # SIGHUP (`sluice reload`) re-reads the same file with the same flags on top.
    server.enable_reload(path, overrides or {})
    await server.start()
    # What exists now (modules, codec tables, the configuration) lives as long as the process: out of the
    # cyclic collector's way, a full collection under load walks only what requests made, not all of it,
    # and every request queued behind it waits less (docs/architecture.md). Start-up's own garbage is
    # collected first, or it would be kept for good.
    gc.collect()
    gc.freeze()
    notify_ready()
    return await server.run_until_stopped()


def run(args: argparse.Namespace) -> int:
    return run_command(args)


def run_command(args: argparse.Namespace) -> int:
    workers = getattr(args, "workers", 1)
    overrides = config_overrides(args)
    try:
        config = load_config(args.config, overrides)
        check_workers(config, workers)
        # Listen hosts are this machine's; some upstream resolves; no upstream is Sluice itself.
        unresolved = check_addresses(config)
    except ConfigError as exc:
        print(f"sluice: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    configure_logging(config.log.level, config.log.format)
    assemble_loggers()
    for key in unresolved:
        get_logger().warning(
            "upstream_unresolved", key=key, detail="does not resolve now; tried again on every connection"
        )
    was, open_files = raise_open_file_limit()
    if open_files <= config.reserved_open_files + MIN_OPEN_FILES_FOR_CLIENTS:
        error = ConfigError(
            "reserved_open_files",
            config.reserved_open_files,
            f"fewer than the open-file limit {open_files} less {MIN_OPEN_FILES_FOR_CLIENTS} "
            "(the hard limit: raise it, or reserve fewer)",
        )
        print(f"sluice: {error}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    get_logger().info(
        "process_limits",
        open_files=open_files,
        open_files_raised_from=was if was != open_files else None,
        reserved_open_files=config.reserved_open_files,
        mmap_large_buffers=return_large_buffers_to_os(),
        python_allocator=allocator_in_use(),
    )
    if workers > 1:
        return run_workers(
            config, workers, lambda worker: _serve_one(worker, args.config, overrides, reuse_port=True)
        )
    return _serve_one(config, args.config, overrides)


def _serve_one(
    config: ProxyConfig, path: str | None, overrides: dict[str, object], reuse_port: bool = False
) -> int:
    try:
        return run_event_loop(lambda: _serve(config, path, overrides, reuse_port))
    except ConfigError as exc:  # a TLS file that cannot be read or does not match, found at start-up
        print(f"sluice: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    except ServiceStartError as exc:  # logged as service_start_failed; the cause decides the exit code
        print(f"sluice: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR if isinstance(exc.cause, ConfigError) else 1
    except OSError as exc:
        get_logger().error("startup_failed", error=str(exc))
        return 1
