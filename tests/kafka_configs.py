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

The product's `sluice quotas describe|alter` (proxy/tools/quota_configs.py) is the Java-free tool for
operators; this helper shares its entity pairing, filters and printed lines, and adds only what tests of
the Java tool need: the requests in their order, and Java's exception lines for a failure.
"""

from __future__ import annotations

from typing import NamedTuple

from rawclient import RawClient

from sluice.protocol.client_quota_codec import (
    ALTER_CLIENT_QUOTAS,
    DESCRIBE_CLIENT_QUOTAS,
    AlterEntry,
    QuotaOp,
    decode_alter_response,
    decode_describe_response,
    encode_alter_request,
    encode_describe_request,
)
from sluice.proxy.tools.quota_configs import (
    CommandError,
    completed_line,
    describe_filter,
    entity_args,
    java_double,
    parse_adds,
    parse_deletes,
    quota_line,
)

__all__ = ["KafkaConfigs", "Outcome", "java_double"]

API_VERSIONS = 18
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
        entity, adds, deletes, mode = self._parse(args)
        with RawClient(self.host, self.port, self.client_id) as client:
            versions = self._api_versions(client)
            if mode == "describe":
                return [quota_line(e, values) for e, values in self._describe(client, versions, entity, args)]
            current = self._describe(client, versions, entity, args)
            existing = dict(current[0][1]) if current else {}
            missing = [key for key in deletes if key not in existing]
            if missing:
                raise CommandFailed([f"Invalid config(s): {','.join(missing)}"])
            parts = tuple(zip(entity.types, entity.names, strict=True))
            ops = [QuotaOp(k, v, False) for k, v in adds] + [QuotaOp(k, 0.0, True) for k in deletes]
            version = self._version(versions, ALTER_CLIENT_QUOTAS, "ALTER_CLIENT_QUOTAS", args)
            body = self._call(
                client,
                ALTER_CLIENT_QUOTAS,
                version,
                encode_alter_request(version, [AlterEntry(parts, tuple(ops))], False),
            )
            for result in decode_alter_response(version, body).results:
                if result.error_code:
                    raise self._execution_error(args, result.error_code, result.error_message)
        return [completed_line(entity.types, entity.names[0])]

    def _parse(self, args: list[str]):
        parts: list[tuple[str, str | None]] = []
        adds: list[tuple[str, float]] = []
        deletes: list[str] = []
        mode = ""
        items = iter(args)
        for arg in items:
            if arg in ("--alter", "--describe"):
                mode = arg[2:]
            elif arg == "--entity-type":
                parts.append(("type", next(items)))
            elif arg == "--entity-name":
                parts.append(("name", next(items)))
            elif arg == "--entity-default":
                parts.append(("default", None))
            elif arg == "--add-config":
                adds += parse_adds(next(items))
            elif arg == "--delete-config":
                deletes += parse_deletes(next(items))
        try:
            return entity_args(parts, alter=mode == "alter"), adds, deletes, mode
        except CommandError as exc:
            raise CommandFailed([str(exc)]) from None

    def _api_versions(self, client: RawClient) -> dict[int, tuple[int, int]]:
        from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

        # The Java client sends v3; v2 here because librdkafka's mock cluster (the test broker behind Sluice)
        # answers v3 with a body nobody can decode. The quota APIs' ranges are the same in both.
        request = ApiVersionsRequest(version=2)
        self.requests.append((API_VERSIONS, 2))
        answer = client.call(request, 2, ApiVersionsResponse)
        return {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}

    def _describe(self, client: RawClient, versions: dict, entity, args: list[str]):
        version = self._version(versions, DESCRIBE_CLIENT_QUOTAS, "DESCRIBE_CLIENT_QUOTAS", args)
        request = encode_describe_request(version, describe_filter(entity), True)
        body = self._call(client, DESCRIBE_CLIENT_QUOTAS, version, request)
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
