"""kafka-configs.sh for client quotas, without Java: the requests Kafka 3.9's ConfigCommand sends through
its AdminClient (`--bootstrap-server`), and the lines it prints, so tests and docs/quotas.md can show an
operator's session exactly.

    tool = KafkaConfigs("127.0.0.1", port)
    tool.run("--alter", "--add-config", "producer_byte_rate=2097152", "--entity-type", "clients",
             "--entity-name", "pump")
    # Outcome(exit_code=0, stdout=['Completed updating config for client pump.'], stderr=[])

What ConfigCommand does, as read from its source (`core/.../admin/ConfigCommand.scala` in 3.9,
`tools/.../ConfigCommand.java` in 4.x, the same flow):
* ApiVersions first (the AdminClient's connection set-up; v3 in Java, v2 here, see `_api_versions`);
  DescribeClientQuotas and AlterClientQuotas at the highest version both sides know (1), or
  UnsupportedVersionException if the node lacks the API.
* `--describe`: one DescribeClientQuotas, strict, a component per `--entity-type` (EXACT for a name,
  DEFAULT for `--entity-default`, SPECIFIED when no name is given); one line per entity.
* `--alter`: first the same strict describe of the entity, failing with "Invalid config(s): k" if a key
  to delete is not set; then one AlterClientQuotas (values parsed as doubles, deletes as remove ops).
* Errors from the futures come out as ExecutionException stack traces after "Error while executing
  config command with args '...'", exit code 1.
Only users, clients and ips are modelled (no SCRAM credentials, which Sluice forwards to the brokers).
"""

from __future__ import annotations

from decimal import Decimal
from typing import NamedTuple

from rawclient import RawClient

from sluice.protocol.client_quotas import (
    ALTER_CLIENT_QUOTAS,
    DESCRIBE_CLIENT_QUOTAS,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    AlterEntry,
    FilterComponent,
    QuotaOp,
    decode_alter_response,
    decode_describe_response,
    encode_alter_request,
    encode_describe_request,
)

API_VERSIONS = 18
TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}
WORDS = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}
# Errors.forCode(code).exception() class names, for the codes the quota APIs answer with.
EXCEPTIONS = {
    -1: "org.apache.kafka.common.errors.UnknownServerException",
    7: "org.apache.kafka.common.errors.TimeoutException",
    31: "org.apache.kafka.common.errors.ClusterAuthorizationException",
    35: "org.apache.kafka.common.errors.UnsupportedVersionException",
    42: "org.apache.kafka.common.errors.InvalidRequestException",
}


class Outcome(NamedTuple):
    exit_code: int
    stdout: list[str]
    stderr: list[str]


class CommandFailed(Exception):
    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


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


class KafkaConfigs:
    def __init__(self, host: str, port: int, client_id: str = "adminclient-1") -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.requests: list[tuple[int, int]] = []  # (api key, version) sent, in order

    def run(self, *args: str) -> Outcome:
        try:
            return Outcome(0, self._run(list(args)), [])
        except CommandFailed as failure:
            return Outcome(1, [], failure.lines)

    # -- the command ---------------------------------------------------------------------------------

    def _run(self, args: list[str]) -> list[str]:
        types, names, adds, deletes, mode = self._parse(args)
        with RawClient(self.host, self.port, self.client_id) as client:
            versions = self._api_versions(client)
            if mode == "describe":
                return [
                    self._line(parts, values)
                    for parts, values in self._describe(client, versions, types, names, args)
                ]
            current = self._describe(client, versions, types, names, args)
            existing = dict(current[0][1]) if current else {}
            missing = [key for key in deletes if key not in existing]
            if missing:
                raise CommandFailed([f"Invalid config(s): {','.join(missing)}"])
            entity = tuple((TYPES[t], n or None) for t, n in zip(types, names, strict=True))
            ops = [QuotaOp(k, float(v), False) for k, v in adds] + [QuotaOp(k, 0.0, True) for k in deletes]
            version = self._version(versions, ALTER_CLIENT_QUOTAS, "ALTER_CLIENT_QUOTAS", args)
            body = self._call(
                client,
                ALTER_CLIENT_QUOTAS,
                version,
                encode_alter_request(version, [AlterEntry(entity, tuple(ops))], False),
            )
            for result in decode_alter_response(version, body).results:
                if result.error_code:
                    raise self._execution_error(args, result.error_code, result.error_message)
        if names[0]:
            return [f"Completed updating config for {types[0][:-1]} {names[0]}."]
        return [f"Completed updating default config for {types[0]} in the cluster."]

    def _parse(self, args: list[str]) -> tuple[list[str], list[str], list[tuple[str, str]], list[str], str]:
        types: list[str] = []
        names: list[str] = []
        adds: list[tuple[str, str]] = []
        deletes: list[str] = []
        mode = ""
        items = iter(args)
        for arg in items:
            if arg in ("--alter", "--describe"):
                mode = arg[2:]
            elif arg == "--entity-type":
                types.append(next(items))
            elif arg == "--entity-name":
                names.append(next(items))
            elif arg == "--entity-default":
                names.append("")
            elif arg == "--add-config":
                for pair in next(items).split(","):
                    key, _, value = pair.partition("=")
                    adds.append((key.strip(), value.strip()))
            elif arg == "--delete-config":
                deletes.extend(key.strip() for key in next(items).split(","))
        if mode == "alter" and len(types) != len(names):
            raise CommandFailed(["An entity name must be specified for every entity type"])
        return types, names, adds, deletes, mode

    def _api_versions(self, client: RawClient) -> dict[int, tuple[int, int]]:
        from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

        # The Java client sends v3; v2 here because librdkafka's mock cluster (the test broker behind Sluice)
        # answers v3 with a body nobody can decode. The quota APIs' ranges are the same in both.
        request = ApiVersionsRequest(version=2)
        self.requests.append((API_VERSIONS, 2))
        answer = client.call(request, 2, ApiVersionsResponse)
        return {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}

    def _describe(
        self, client: RawClient, versions: dict, types: list[str], names: list[str], args: list[str]
    ):
        components = []
        for index, entity_type in enumerate(types):
            kind = TYPES[entity_type]
            if index >= len(names):
                components.append(FilterComponent(kind, MATCH_SPECIFIED, None))
            elif names[index] == "":
                components.append(FilterComponent(kind, MATCH_DEFAULT, None))
            else:
                components.append(FilterComponent(kind, MATCH_EXACT, names[index]))
        version = self._version(versions, DESCRIBE_CLIENT_QUOTAS, "DESCRIBE_CLIENT_QUOTAS", args)
        body = self._call(
            client, DESCRIBE_CLIENT_QUOTAS, version, encode_describe_request(version, components, True)
        )
        answer = decode_describe_response(version, body)
        if answer.error_code:
            raise self._execution_error(args, answer.error_code, answer.error_message)
        return [(entry.entity, entry.values) for entry in answer.entries or ()]

    def _version(self, versions: dict, api_key: int, name: str, args: list[str]) -> int:
        if api_key not in versions:
            raise CommandFailed(
                [
                    f"Error while executing config command with args '{' '.join(args)}'",
                    "java.util.concurrent.ExecutionException: org.apache.kafka.common.errors."
                    f"UnsupportedVersionException: The node does not support {name}",
                ]
            )
        return min(1, versions[api_key][1])

    def _call(self, client: RawClient, api_key: int, version: int, body: bytes) -> bytes:
        self.requests.append((api_key, version))
        return client.call_body(api_key, version, body)

    @staticmethod
    def _execution_error(args: list[str], code: int, message: str | None) -> CommandFailed:
        exception = EXCEPTIONS.get(code, f"org.apache.kafka.common.errors.ApiException(code {code})")
        return CommandFailed(
            [
                f"Error while executing config command with args '{' '.join(args)}'",
                f"java.util.concurrent.ExecutionException: {exception}: {message}",
            ]
        )

    @staticmethod
    def _line(parts: tuple, values: tuple) -> str:
        names = dict(parts)
        words = [
            f"the default {WORDS[kind]}" if names[kind] is None else f"{WORDS[kind]} '{names[kind]}'"
            for kind in ("user", "client-id", "ip")
            if kind in names
        ]
        entries = ", ".join(f"{key}={java_double(value)}" for key, value in values)
        return f"Quota configs for {', '.join(words)} are {entries}"
