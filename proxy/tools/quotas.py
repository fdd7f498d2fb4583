"""`sluice quotas describe|alter|import`: client quotas from a shell, without Java.

`describe` and `alter` are kafka-configs.sh's quota commands, against any bootstrap server (Sluice or a
broker): see quota_configs.py. `import` adopts the client quotas the brokers already hold into Sluice's
quota store:

    sluice quotas import --config sluice.yaml [--dry-run] [--overwrite] [--remove-from-brokers]

It reaches the cluster as the proxy does (`upstream.bootstrap`, `tls.upstream`, and the proxy's own
credentials from the `client:` section), so it needs no running Sluice:

1. reads every client quota the brokers hold (DescribeClientQuotas, an empty non-strict filter) and how
   many brokers there are (Metadata);
2. reads Sluice's store topic to the end, so it knows what Sluice enforces (file + store);
3. plans (proxy/control_plane/quota_import.py) and prints the plan: a dry run stops here;
4. writes the adds (and, with --overwrite, the updates) to the store topic as Sluice's own alters do,
   in one batch; running instances follow the topic and apply them at once;
5. with --remove-from-brokers, removes from the brokers exactly the quotas Sluice now holds with the
   same value (one AlterClientQuotas), and says what the brokers answered.

Exit codes of `import`: 0 done, 1 the cluster or a write failed, 2 a bad configuration.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from sluice.config.errors import ConfigError
from sluice.config.load import load_config
from sluice.config.model import ProxyConfig
from sluice.config.values import parse_bootstrap
from sluice.protocol.client_quota_codec import (
    ALTER_CLIENT_QUOTAS,
    DESCRIBE_CLIENT_QUOTAS,
    AlterEntry,
    Entity,
    QuotaOp,
    decode_alter_response,
    decode_describe_response,
    encode_alter_request,
    encode_describe_request,
)
from sluice.proxy.control_plane.client_quota_entity import ClientQuotaEntity
from sluice.proxy.control_plane.quota_alter import apply_changes
from sluice.proxy.control_plane.quota_import import ImportPlan, plan_import, render_plan
from sluice.proxy.control_plane.quota_records import encode_key, encode_value
from sluice.proxy.control_plane.quota_state import QuotaState

from ..cli import HelpFormatter
from ..commands.run import EXIT_CONFIG_ERROR, run_event_loop
from ..control_plane.quota_admin import StoreRecord
from ..control_plane.quota_store_service import QuotaStoreService, StoreUnavailable
from ..kafka_client import KafkaClient, KafkaClientError, UnsupportedByBroker
from ..kafka_client.connection import BrokerConnection
from ..listeners.tls import UpstreamTlsTarget, upstream_context
from ..observability.log import configure_logging
from .quota_admin_cli import add_admin_arguments, run_admin

DESCRIPTION = """Client quotas without Java: `describe` and `alter` speak kafka-configs.sh's words to Sluice
or a broker; `import` adopts the client quotas the brokers already hold into Sluice's store.

  sluice quotas describe --bootstrap-server HOST:PORT [--entity-type clients [--entity-name pump]]
  sluice quotas alter --bootstrap-server HOST:PORT --entity-type clients --entity-name pump \\
      --add-config producer_byte_rate=1048576
  sluice quotas import --config sluice.yaml --dry-run"""
EPILOG = "`sluice quotas ACTION --help` describes an action's options."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, purpose in (
        ("describe", "show client quotas (kafka-configs.sh --describe)"),
        ("alter", "set or remove client quotas (kafka-configs.sh --alter)"),
    ):
        add_admin_arguments(
            sub.add_parser(action, help=purpose, description=purpose, formatter_class=HelpFormatter),
            alter=action == "alter",
        )
    p = sub.add_parser(
        "import",
        help="copy the brokers' client quotas into Sluice's store",
        description="Copy the brokers' client quotas into Sluice's store.",
        formatter_class=HelpFormatter,
    )
    p.add_argument("--config", metavar="FILE", help="Sluice's YAML configuration file")
    p.add_argument("--upstream", metavar="HOST:PORT[,HOST:PORT...]", help="bootstrap servers of the cluster")
    p.add_argument(
        "--brokers",
        metavar="HOST:PORT[,HOST:PORT...]",
        help="read (and remove) the quotas of these brokers; default: upstream.bootstrap",
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    p.add_argument(
        "--overwrite", action="store_true", help="take the brokers' value where Sluice has another"
    )
    p.add_argument(
        "--remove-from-brokers", action="store_true", help="then remove the imported quotas from the brokers"
    )


def run(args: argparse.Namespace) -> int:
    if args.action in ("describe", "alter"):
        return run_admin(args)
    overrides: dict[str, object] = {"upstream.bootstrap": args.upstream} if args.upstream else {}
    if args.config is None:
        overrides["listen"] = "127.0.0.1:9092"  # required by the schema; this tool listens on nothing
    try:
        config = load_config(args.config, overrides)
    except ConfigError as exc:
        print(f"sluice: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    configure_logging("warning", config.log.format)
    brokers = None
    if args.brokers:
        try:
            brokers = [(hp.host, hp.port) for hp in parse_bootstrap(args.brokers, "--brokers")]
        except ConfigError as exc:
            print(f"sluice: {exc}", file=sys.stderr)
            return EXIT_CONFIG_ERROR
    return run_event_loop(
        lambda: import_quotas(config, args.dry_run, args.overwrite, args.remove_from_brokers, brokers=brokers)
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sluice quotas", description=DESCRIPTION)
    add_arguments(parser)
    return run(parser.parse_args(argv))


def _client(config: ProxyConfig, bootstrap: Sequence[tuple[str, int]]) -> KafkaClient:
    upstream = config.tls.upstream
    return KafkaClient(
        bootstrap,
        client_id=config.client.client_id,
        tls=None
        if upstream is None
        else UpstreamTlsTarget(upstream_context(upstream), upstream.server_hostname),
        bind_address=config.upstream_bind_address,  # brokers may let in only Sluice's address
        sasl=config.client.sasl,
        request_timeout_s=config.client.request_timeout_s,
    )


async def import_quotas(
    config: ProxyConfig,
    dry_run: bool,
    overwrite: bool,
    remove_from_brokers: bool,
    *,
    brokers: Sequence[tuple[str, int]] | None = None,
    out: Callable[[str], None] = print,
) -> int:
    """The import; `brokers` (default: the cluster's bootstrap) is where the quotas are read and removed."""
    client = _client(config, [(hp.host, hp.port) for hp in config.upstream_bootstrap])
    broker_client = client if brokers is None else _client(config, brokers)
    state = QuotaState(config.quota)
    store = QuotaStoreService(
        client, state, config.quota.store, startup_wait_s=config.client.request_timeout_s
    )
    try:
        metadata = await broker_client.metadata(())
        broker_quotas = await _describe_brokers(broker_client)
        await store.start()
        if not store.caught_up:
            out(f"sluice: the quota store topic {store.topic} could not be read; nothing was imported")
            return 1
        plan = plan_import(broker_quotas, state.in_force(), len(metadata.brokers), overwrite=overwrite)
        for line in render_plan(plan, dry_run=dry_run, remove_from_brokers=remove_from_brokers):
            out(line)
        if dry_run:
            return 0
        written = await _write(store, state, plan)
        out(f"Wrote {written} entit{'y' if written == 1 else 'ies'} to the quota store topic {store.topic}.")
        if remove_from_brokers:
            await _remove_from_brokers(broker_client, plan, out)
        return 0
    except (KafkaClientError, StoreUnavailable) as exc:
        out(f"sluice: {exc}")
        return 1
    finally:
        await store.stop()
        await client.stop()
        if broker_client is not client:
            await broker_client.stop()


async def _describe_brokers(client: KafkaClient) -> list[tuple[Entity, tuple[tuple[str, float], ...]]]:
    connection = await client.cluster.any_connection()
    version = _version(connection, DESCRIBE_CLIENT_QUOTAS, "DescribeClientQuotas")
    body = await connection.request(
        DESCRIBE_CLIENT_QUOTAS, version, encode_describe_request(version, [], False), client.request_timeout_s
    )
    answer = decode_describe_response(version, body)
    if answer.error_code:
        raise KafkaClientError(
            f"DescribeClientQuotas on {connection.label}: error {answer.error_code}: {answer.error_message}"
        )
    return [(entry.entity, entry.values) for entry in answer.entries or ()]


async def _write(store: QuotaStoreService, state: QuotaState, plan: ImportPlan) -> int:
    writes: dict[ClientQuotaEntity, dict[str, float]] = {
        entity: apply_changes(state.store.get(entity), values) for entity, values in plan.writes().items()
    }
    if not writes:
        return 0
    offset = await store.write([StoreRecord(encode_key(e), encode_value(v)) for e, v in writes.items()])
    state.store_written(writes, offset)
    return len(writes)


async def _remove_from_brokers(client: KafkaClient, plan: ImportPlan, out: Callable[[str], None]) -> None:
    removals = plan.broker_removals()
    if not removals:
        out("Nothing to remove from the brokers.")
        return
    connection = await client.cluster.any_connection()
    version = _version(connection, ALTER_CLIENT_QUOTAS, "AlterClientQuotas")
    entries = [
        AlterEntry(entity, tuple(QuotaOp(key, 0.0, True) for key in keys))
        for entity, keys in removals.items()
    ]
    body = await connection.request(
        ALTER_CLIENT_QUOTAS, version, encode_alter_request(version, entries, False), client.request_timeout_s
    )
    removed = 0
    for entry, result in zip(entries, decode_alter_response(version, body).results, strict=False):
        if result.error_code:
            out(f"  the brokers kept {entry.entity}: error {result.error_code}: {result.error_message}")
        else:
            removed += len(entry.ops)
    out(f"Removed {removed} quota(s) from the brokers.")


def _version(connection: BrokerConnection, api_key: int, name: str) -> int:
    theirs = connection.versions.get(api_key)
    if theirs is None or theirs[0] > 1:
        raise UnsupportedByBroker(f"{connection.label}: the broker does not offer {name} (API {api_key})")
    return min(1, theirs[1])


if __name__ == "__main__":
    sys.exit(main())
