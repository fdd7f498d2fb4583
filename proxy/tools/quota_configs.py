"""`sluice quotas describe|alter`: kafka-configs.sh's client-quota commands, without Java.

    sluice quotas describe --bootstrap-server sluice:9092 --entity-type clients --entity-name pump
    Quota configs for client-id 'pump' are producer_byte_rate=2097152.0
    sluice quotas alter --bootstrap-server sluice:9092 --entity-type clients --entity-name pump \\
        --add-config producer_byte_rate=1048576
    Completed updating config for client pump.

They speak DescribeClientQuotas and AlterClientQuotas (KIP-546) to any bootstrap server: Sluice, which
answers them itself, or a broker. The requests are the ones kafka-configs.sh sends through Kafka's
AdminClient, and the lines printed are its lines:
* `describe`: one strict DescribeClientQuotas, a component per `--entity-type` (the name given, the
  default entity for `--entity-default`, any name when none is given); one line per entity, values as
  Java prints doubles. Without any `--entity-type` (kafka-configs.sh requires one) every quota is listed.
* `alter`: first the same describe of the entity, refusing to delete a key that is not set
  (`Invalid config(s): k`), then one AlterClientQuotas: `--add-config` values as doubles, `--delete-config`
  keys as removals.
* A refusal is printed as Kafka sent it, error name and message, on stderr.

Exit codes: 0 done; 1 the cluster could not be reached, refused the credentials or lacks the API; 2 a bad
command line or `--command-config`, or Kafka refused the describe or the alter.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from sluice.protocol.client_quota_codec import (
    ALTER_CLIENT_QUOTAS,
    DESCRIBE_CLIENT_QUOTAS,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    AlterEntry,
    Entity,
    FilterComponent,
    QuotaOp,
    decode_alter_response,
    decode_describe_response,
    encode_alter_request,
    encode_describe_request,
)

from ..kafka_client import KafkaClient, UnsupportedByBroker
from ..kafka_client.connection import BrokerConnection
from ..kafka_client.errors import error_name

EXIT_REFUSED = 2
# kafka-configs.sh's entity types, the quota entity types they stand for, and the words its lines use.
ENTITY_TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}
_WORDS = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}
_ORDER = ("user", "client-id", "ip")
ANY_NAME = object()  # an --entity-type without a name: every entity of that type (describe only)


class CommandError(Exception):
    """A command line kafka-configs.sh would refuse, with its words."""


@dataclass(frozen=True)
class EntityArgs:
    """The `--entity-type`s in order, each with its name: a string, None (`--entity-default`) or ANY_NAME."""

    types: tuple[str, ...]
    names: tuple[object, ...]


def entity_args(parts: Sequence[tuple[str, str | None]], *, alter: bool) -> EntityArgs:
    """Pair `--entity-type`s with `--entity-name`/`--entity-default`s in the order given, as kafka-configs.sh
    does. `parts`: ("type", value), ("name", value), ("default", None)."""
    types: list[str] = []
    names: list[object] = [value for kind, value in parts if kind != "type"]
    for kind, entity_type in parts:
        if kind != "type":
            continue
        if entity_type is None or entity_type not in ENTITY_TYPES:
            raise CommandError(
                f"Invalid entity type {entity_type}, the entity type must be one of users, clients, ips"
            )
        types.append(entity_type)
    if len(set(types)) != len(types):
        raise CommandError("An entity type may be given only once")
    if "ips" in types and len(types) > 1:
        raise CommandError("Only users and clients can be combined; ips stand alone")
    if len(names) > len(types):
        raise CommandError("An entity name or --entity-default was given without its --entity-type")
    if alter and (not types or len(names) != len(types)):
        raise CommandError(
            "--entity-name or --entity-default must be specified with each --entity-type for --alter"
        )
    names += [ANY_NAME] * (len(types) - len(names))
    return EntityArgs(tuple(ENTITY_TYPES[t] for t in types), tuple(names))


def describe_filter(entity: EntityArgs) -> list[FilterComponent]:
    components = []
    for kind, name in zip(entity.types, entity.names, strict=True):
        if name is ANY_NAME:
            components.append(FilterComponent(kind, MATCH_SPECIFIED, None))
        elif name is None:
            components.append(FilterComponent(kind, MATCH_DEFAULT, None))
        else:
            components.append(FilterComponent(kind, MATCH_EXACT, str(name)))
    return components


def java_double(value: float) -> str:
    """Java's Double.toString: 2097152.0, 12.34, 1.048576E7 (scientific from 10^7 and below 10^-3)."""
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        text = repr(float(value))
        return text if "." in text or "e" in text else text + ".0"
    sign, digits, exponent = Decimal(repr(float(value))).normalize().as_tuple()
    mantissa = "".join(map(str, digits))
    power = len(digits) - 1 + int(exponent)
    fraction = mantissa[1:] or "0"
    return f"{'-' if sign else ''}{mantissa[0]}.{fraction}E{power}"


def entity_words(entity: Entity) -> str:
    """kafka-configs.sh's words for an entity: "user-principal 'alice', the default client-id"."""
    names = dict(entity)
    return ", ".join(
        f"the default {_WORDS[kind]}" if names[kind] is None else f"{_WORDS[kind]} '{names[kind]}'"
        for kind in _ORDER
        if kind in names
    )


def quota_line(entity: Entity, values: Sequence[tuple[str, float]]) -> str:
    entries = ", ".join(f"{key}={java_double(value)}" for key, value in values)
    return f"Quota configs for {entity_words(entity)} are {entries}"


def completed_line(entity_types: Sequence[str], first_name: object) -> str:
    """kafka-configs.sh's line after an alter: it names the first entity type given, singular."""
    plural = next(t for t, kind in ENTITY_TYPES.items() if kind == entity_types[0])
    if first_name is None:
        return f"Completed updating default config for {plural} in the cluster."
    return f"Completed updating config for {plural[:-1]} {first_name}."


def as_json(entity: Entity) -> dict[str, str | None]:
    return {kind: name for kind, name in entity}


class Refused(Exception):
    """Kafka answered with an error: its name and message, as sent."""

    def __init__(self, code: int, message: str | None) -> None:
        self.code = code
        self.name = error_name(code)
        self.message = message
        super().__init__(f"{self.name}: {message}" if message else self.name)


async def _api_version(client: KafkaClient, api_key: int, name: str) -> tuple[BrokerConnection, int]:
    connection = await client.cluster.any_connection()
    theirs = connection.versions.get(api_key)
    if theirs is None or theirs[0] > 1:
        raise UnsupportedByBroker(f"{connection.label} does not offer {name} (API {api_key}, Kafka 2.6+)")
    return connection, min(1, theirs[1])


async def describe(
    client: KafkaClient, components: list[FilterComponent], strict: bool = True
) -> list[tuple[Entity, tuple[tuple[str, float], ...]]]:
    """[(entity, values)] matching the filter; Refused for a top-level error."""
    connection, version = await _api_version(client, DESCRIBE_CLIENT_QUOTAS, "DescribeClientQuotas")
    request = encode_describe_request(version, components, strict)
    body = await connection.request(DESCRIBE_CLIENT_QUOTAS, version, request, client.request_timeout_s)
    answer = decode_describe_response(version, body)
    if answer.error_code:
        raise Refused(answer.error_code, answer.error_message)
    return [(entry.entity, entry.values) for entry in answer.entries or ()]


async def alter(client: KafkaClient, entry: AlterEntry) -> None:
    """One entity's changes; Refused with the entity's error."""
    connection, version = await _api_version(client, ALTER_CLIENT_QUOTAS, "AlterClientQuotas")
    request = encode_alter_request(version, [entry], False)
    body = await connection.request(ALTER_CLIENT_QUOTAS, version, request, client.request_timeout_s)
    for result in decode_alter_response(version, body).results:
        if result.error_code:
            raise Refused(result.error_code, result.error_message)


async def run_describe(
    client: KafkaClient, entity: EntityArgs, as_json_out: bool, out: Callable[[str], None]
) -> int:
    found = await describe(client, describe_filter(entity), strict=bool(entity.types))
    if as_json_out:
        out(json.dumps([{"entity": as_json(e), "quotas": dict(values)} for e, values in found]))
    else:
        for e, values in found:
            out(quota_line(e, values))
    return 0


def parse_adds(text: str | None) -> list[tuple[str, float]]:
    """`--add-config k=v,k2=v2`: each value a double, as kafka-configs.sh parses it."""
    adds = []
    for pair in (text or "").split(","):
        if not pair.strip():
            continue
        key, equals, value = pair.partition("=")
        try:
            adds.append((key.strip(), float(value)))
        except ValueError:
            raise CommandError(
                f"Invalid config: {pair.strip()!r} (--add-config takes key=number,...)"
                if equals
                else f"Invalid config: {pair.strip()!r} has no value (--add-config takes key=number,...)"
            ) from None
    return adds


def parse_deletes(text: str | None) -> list[str]:
    return [key.strip() for key in (text or "").split(",") if key.strip()]


async def run_alter(
    client: KafkaClient,
    entity: EntityArgs,
    adds: list[tuple[str, float]],
    deletes: list[str],
    as_json_out: bool,
    out: Callable[[str], None],
) -> int:
    if not adds and not deletes:
        raise CommandError("--add-config or --delete-config must be specified with --alter")
    parts = tuple(
        (kind, None if name is None else str(name))
        for kind, name in zip(entity.types, entity.names, strict=True)
    )
    if deletes:
        current = await describe(client, describe_filter(entity))
        existing = dict(current[0][1]) if current else {}
        missing = [key for key in deletes if key not in existing]
        if missing:
            raise CommandError(f"Invalid config(s): {','.join(missing)}")
    ops = tuple(QuotaOp(k, v, False) for k, v in adds) + tuple(QuotaOp(k, 0.0, True) for k in deletes)
    await alter(client, AlterEntry(parts, ops))
    if as_json_out:
        out(json.dumps({"entity": as_json(parts), "added": dict(adds), "deleted": deletes}))
    else:
        out(completed_line(entity.types, entity.names[0]))
    return 0
