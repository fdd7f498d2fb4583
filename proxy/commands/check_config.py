"""`sluice check-config FILE`: validate a configuration as `sluice run` would, and print what it gives.

Every rule `sluice run` applies before it opens a socket is applied here, the TLS files included (they are
read and matched, as at start-up). On success the effective configuration is printed as YAML on stdout:
every key, defaults filled in, credentials shown as `[hidden]`; it loads back to the same configuration.
On the first problem, one line on stderr names the key, the value and what was expected, and the exit
code is 2.
"""

from __future__ import annotations

import argparse
import sys

import yaml

from sluice.config.effective import effective_config, mask_credentials
from sluice.config.errors import ConfigError
from sluice.config.load import load_config
from sluice.config.model import ProxyConfig

from .run import EXIT_CONFIG_ERROR, add_config_flags, config_overrides

EPILOG = """\
Flags given here override the file exactly as they do for `sluice run`, so
`sluice check-config FILE --listen 0.0.0.0:9092 ...` shows what `sluice run --config FILE --listen ...`
would use. Exit codes: 0 valid (the configuration is printed), 2 refused (the key is named on stderr)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="YAML configuration file")
    add_config_flags(parser)


def _check_tls_files(config: ProxyConfig) -> None:
    # The proxy reads these at start-up; reading them here finds a missing file or a mismatched key now.
    from ..listeners.tls import listener_context, upstream_context

    if config.tls.listener is not None:
        listener_context(config.tls.listener)
    if config.tls.upstream is not None:
        upstream_context(config.tls.upstream)


def render(config: ProxyConfig, source: str) -> str:
    tree = mask_credentials(effective_config(config))
    header = (
        f"# {source} is valid. The configuration it gives: every key with the value Sluice uses,\n"
        "# defaults filled in, credentials [hidden]. Each key is explained in docs/config-example.yaml.\n"
    )
    return header + yaml.safe_dump(tree, sort_keys=False, default_flow_style=False, width=110)


def run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.file, config_overrides(args))
        _check_tls_files(config)
    except ConfigError as exc:
        print(f"sluice check-config: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    sys.stdout.write(render(config, args.file))
    return 0
