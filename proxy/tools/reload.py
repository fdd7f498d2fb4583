"""`sluice reload`: ask a running proxy to re-read its configuration file (it is sent SIGHUP).

    sluice reload --pid 4242 [--config sluice.yaml]

With `--config`, the file is checked here first: an invalid one is refused with the key named (exit 2)
and the proxy is not disturbed. The proxy itself checks the file again and logs `config_reloaded` or
`config_reload_failed`; a reload never drops a connection.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence

from sluice.config.errors import ConfigError
from sluice.config.load import load_config

EXIT_CONFIG_ERROR = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pid", type=int, required=True, help="process id of the running proxy")
    parser.add_argument("--config", metavar="FILE", help="check this file before asking for the reload")


def run(args: argparse.Namespace) -> int:
    if args.config is not None:
        try:
            load_config(args.config)
        except ConfigError as exc:
            print(f"sluice: not reloaded: {exc}", file=sys.stderr)
            return EXIT_CONFIG_ERROR
    try:
        os.kill(args.pid, signal.SIGHUP)
    except ProcessLookupError:
        print(f"sluice: no process {args.pid}", file=sys.stderr)
        return 1
    except PermissionError:
        print(f"sluice: not allowed to signal process {args.pid}", file=sys.stderr)
        return 1
    print(f"Asked process {args.pid} to reload its configuration (SIGHUP); see its log for the outcome.")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="sluice reload", description="re-read a running proxy's configuration"
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
