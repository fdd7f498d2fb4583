"""The command line of `sluice quotas describe|alter`: kafka-configs.sh's options, the connection from
`--command-config`, and one line (and an exit code) for every way it can fail. The commands themselves
are in quota_configs.py."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from sluice.config.errors import ConfigError
from sluice.config.values import parse_bootstrap

from ..commands.run import run_event_loop
from ..kafka_client import KafkaClient, KafkaClientError
from ..observability.log import configure_logging
from .command_config import ConnectSettings, connect_settings, read_properties
from .quota_configs import (
    EXIT_REFUSED,
    CommandError,
    Refused,
    entity_args,
    parse_adds,
    parse_deletes,
    run_alter,
    run_describe,
)

EXIT_UNREACHABLE = 1


class _EntityPart(argparse.Action):
    """Keeps --entity-type, --entity-name and --entity-default in the order given: kafka-configs.sh pairs
    the n-th name (or default) with the n-th type."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[object] | None,
        option_string: str | None = None,
    ) -> None:
        parts = list(getattr(namespace, "entity_parts", None) or [])
        parts.append((self.const, values if isinstance(values, str) else None))
        namespace.entity_parts = parts


def add_admin_arguments(parser: argparse.ArgumentParser, *, alter: bool) -> None:
    parser.set_defaults(entity_parts=[])
    parser.add_argument(
        "--bootstrap-server",
        required=True,
        metavar="HOST:PORT[,HOST:PORT...]",
        help="Sluice's bootstrap address (or a broker's)",
    )
    parser.add_argument(
        "--command-config",
        type=Path,
        metavar="FILE",
        help="Kafka client properties for TLS and SASL: security.protocol, sasl.mechanism, sasl.username and "
        "sasl.password (or sasl.jaas.config), ssl.ca.location, ssl.endpoint.identification.algorithm, "
        "client.id, request.timeout.ms (default: plaintext, no SASL)",
    )
    parser.add_argument(
        "--entity-type",
        action=_EntityPart,
        const="type",
        dest="entity_parts",
        metavar="users|clients|ips",
        help="the kind of entity; users and clients may be combined, as (user, client-id)"
        + ("" if alter else "; none: every quota"),
    )
    parser.add_argument(
        "--entity-name",
        action=_EntityPart,
        const="name",
        dest="entity_parts",
        metavar="NAME",
        help="the name of the entity type given before it"
        + ("" if alter else " (none: every entity of that type)"),
    )
    parser.add_argument(
        "--entity-default",
        action=_EntityPart,
        nargs=0,
        const="default",
        dest="entity_parts",
        help="the default entity of the entity type given before it",
    )
    if alter:
        parser.add_argument(
            "--add-config",
            metavar="KEY=VALUE[,KEY=VALUE...]",
            help="quotas to set: producer_byte_rate, consumer_byte_rate, request_percentage, "
            "controller_mutation_rate, connection_creation_rate (ips)",
        )
        parser.add_argument("--delete-config", metavar="KEY[,KEY...]", help="quotas to remove")
    parser.add_argument("--json", action="store_true", help="print JSON instead of kafka-configs.sh's lines")


def run_admin(args: argparse.Namespace, out: Callable[[str], None] = print) -> int:
    alter = args.action == "alter"
    try:
        entity = entity_args(args.entity_parts, alter=alter)
        adds = parse_adds(args.add_config) if alter else []
        deletes = parse_deletes(args.delete_config) if alter else []
        bootstrap = [
            (hp.host, hp.port) for hp in parse_bootstrap(args.bootstrap_server, "--bootstrap-server")
        ]
        settings = connect_settings(read_properties(args.command_config)) if args.command_config else None
    except (CommandError, ConfigError) as exc:
        print(f"sluice quotas {args.action}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    # The client's own log lines (a broker that did not answer, ...) would repeat what the error line says.
    configure_logging("error")

    async def command() -> int:
        client = _client(bootstrap, settings or ConnectSettings())
        try:
            if alter:
                return await run_alter(client, entity, adds, deletes, args.json, out)
            return await run_describe(client, entity, args.json, out)
        finally:
            await client.stop()

    try:
        return run_event_loop(command)
    except CommandError as exc:  # kafka-configs.sh's own check, before anything was changed
        print(exc, file=sys.stderr)
        return EXIT_REFUSED
    except Refused as exc:
        if args.json:
            out(json.dumps({"error": exc.name, "message": exc.message}))
        print(f"sluice quotas {args.action}: refused by {args.bootstrap_server}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except (KafkaClientError, OSError) as exc:
        print(f"sluice quotas {args.action}: {args.bootstrap_server}: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE


def _client(bootstrap: list[tuple[str, int]], settings: ConnectSettings) -> KafkaClient:
    return KafkaClient(
        bootstrap,
        client_id=settings.client_id,
        tls=settings.tls,
        sasl=settings.sasl,
        request_timeout_s=settings.request_timeout_s,
    )
