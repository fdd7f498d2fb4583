"""QuotaBrokerDouble: a Kafka cluster double that keeps client quotas as brokers do (DescribeClientQuotas,
AlterClientQuotas), for `sluice quotas import`; librdkafka's mock cluster lacks both APIs.

    quotas = {(("client-id", "pump"),): {"producer_byte_rate": 1e6}}
    with QuotaBrokerDouble(broker_count=3, quotas=quotas) as cluster:
        ...  # cluster.bootstrap answers Metadata with 3 brokers, and 48/49 from cluster.quotas

It is AdminBrokerDouble (ApiVersions, Metadata, the topic admin APIs) plus the two quota APIs, which it
answers with a KRaft broker's semantics in a small model of its own (not Sluice's rules, which are what
the tests check): describe matches exact, default and "any" components, strict or not; alter sets and
removes keys, honours validate_only, and refuses unknown keys, values <= 0 and unknown entity types.
Metadata lists `broker_count` brokers, all at this one address. Every answer is built by `protocol/`.
"""

from __future__ import annotations

from typing import Any

from doubles.admin_broker import ADVERTISED_VERSIONS, API_VERSIONS, AdminBrokerDouble

from sluice.protocol.client_quota_codec import (
    ALTER_CLIENT_QUOTAS,
    DESCRIBE_CLIENT_QUOTAS,
    MATCH_DEFAULT,
    MATCH_EXACT,
    AlterResult,
    DescribedEntity,
    decode_alter_request,
    decode_describe_request,
    encode_alter_response,
    encode_describe_response,
)
from sluice.protocol.errors import ProtocolError
from sluice.protocol.headers import RequestHeader, encode_response, parse_request_header
from sluice.protocol.message_codec import decode_request_body, encode_response_body

METADATA = 3
INVALID_REQUEST, UNSUPPORTED_VERSION = 42, 35
KNOWN_KEYS = {
    "user": {"producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate"},
    "client-id": {
        "producer_byte_rate",
        "consumer_byte_rate",
        "request_percentage",
        "controller_mutation_rate",
    },
    "ip": {"connection_creation_rate"},
}
QUOTA_VERSIONS = {DESCRIBE_CLIENT_QUOTAS: (0, 1), ALTER_CLIENT_QUOTAS: (0, 1)}

# An entity as brokers key it: the set of (type, name-or-None) pairs.
Entity = frozenset[tuple[str, str | None]]


class QuotaBrokerDouble(AdminBrokerDouble):
    def __init__(
        self,
        *,
        broker_count: int = 3,
        quotas: dict[tuple[tuple[str, str | None], ...], dict[str, float]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.broker_count = broker_count
        self.quotas: dict[Entity, dict[str, float]] = {
            frozenset(entity): dict(values) for entity, values in (quotas or {}).items()
        }
        self.describe_requests = 0
        self.alter_requests: list[tuple[int, Any]] = []  # (version, decoded AlterRequest)

    def answer(self, request_frame: memoryview) -> bytes | None:
        try:
            header = parse_request_header(request_frame)
        except ProtocolError:
            return None
        body = request_frame[4 + header.size :]
        try:
            if header.api_key in QUOTA_VERSIONS:
                low, high = QUOTA_VERSIONS[header.api_key]
                if not low <= header.api_version <= high:
                    return None
                self.requests_seen.append((header.api_key, header.api_version))
                handler = self._describe if header.api_key == DESCRIBE_CLIENT_QUOTAS else self._alter
                answer = handler(header.api_version, body)
            elif header.api_key == METADATA:
                self.requests_seen.append((header.api_key, header.api_version))
                answer = self._cluster_metadata(header)
            elif (
                header.api_key == API_VERSIONS and header.api_version <= ADVERTISED_VERSIONS[API_VERSIONS][1]
            ):
                self.requests_seen.append((header.api_key, header.api_version))
                answer = self._all_versions(header, body)
            else:
                return super().answer(request_frame)
        except ProtocolError:
            return None
        return encode_response(header.api_key, header.api_version, header.correlation_id, answer)

    def _all_versions(self, header: RequestHeader, body: memoryview) -> bytes:
        decode_request_body(API_VERSIONS, header.api_version, body)
        ranges = {**ADVERTISED_VERSIONS, **QUOTA_VERSIONS}
        keys = [
            {"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in sorted(ranges.items())
        ]
        return encode_response_body(
            API_VERSIONS, header.api_version, error_code=0, api_keys=keys, throttle_time_ms=0
        )

    def _cluster_metadata(self, header: RequestHeader) -> bytes:
        brokers = [
            {"node_id": node, "host": "127.0.0.1", "port": self.port, "rack": None}
            for node in range(self.broker_count)
        ]
        return encode_response_body(
            METADATA,
            header.api_version,
            throttle_time_ms=0,
            brokers=brokers,
            cluster_id="quota-broker-double",
            controller_id=0,
            topics=[],
            error_code=0,
        )

    def _describe(self, version: int, body: memoryview) -> bytes:
        request = decode_describe_request(version, body)
        self.describe_requests += 1
        for component in request.components:
            if component.entity_type not in KNOWN_KEYS:
                return encode_describe_response(
                    version, None, UNSUPPORTED_VERSION, f"Unsupported entity type {component.entity_type}"
                )
        found = []
        for entity, values in self.quotas.items():
            if values and _matches(entity, request.components, request.strict):
                found.append(
                    DescribedEntity(tuple(sorted(entity, key=_order)), tuple(sorted(values.items())))
                )
        return encode_describe_response(version, found)

    def _alter(self, version: int, body: memoryview) -> bytes:
        request = decode_alter_request(version, body)
        self.alter_requests.append((version, request))
        results = []
        for entry in request.entries:
            entity = frozenset(entry.entity)
            code, message = self._check(entity, entry.ops)
            if code == 0 and not request.validate_only:
                values = self.quotas.setdefault(entity, {})
                for op in entry.ops:
                    if op.remove:
                        values.pop(op.key, None)
                    else:
                        values[op.key] = op.value
                if not values:
                    del self.quotas[entity]
            results.append(AlterResult(code, message, entry.entity))
        return encode_alter_response(version, results)

    @staticmethod
    def _check(entity: Entity, ops: Any) -> tuple[int, str | None]:
        kinds = {kind for kind, _ in entity}
        if not kinds or not kinds <= KNOWN_KEYS.keys():
            return INVALID_REQUEST, "Invalid client quota entity"
        allowed = KNOWN_KEYS["ip"] if "ip" in kinds else KNOWN_KEYS["user"]
        for op in ops:
            if op.remove:
                continue
            if op.key not in allowed:
                return INVALID_REQUEST, f"Invalid configuration key {op.key}"
            if op.value <= 0:
                return INVALID_REQUEST, f"Quota {op.key} must be greater than 0"
        return 0, None


def _order(part: tuple[str, str | None]) -> int:
    return ("user", "client-id", "ip").index(part[0]) if part[0] in ("user", "client-id", "ip") else 3


def _matches(entity: Entity, components: Any, strict: bool) -> bool:
    names = dict(entity)
    if strict and len(names) != len(components):
        return False
    for component in components:
        if component.entity_type not in names:
            return False
        name = names[component.entity_type]
        if component.match_type == MATCH_EXACT and name != component.match:
            return False
        if component.match_type == MATCH_DEFAULT and name is not None:
            return False
    return True
