"""The Kafka API table: versions, flexible versions and where `throttle_time_ms` sits.

Source: spec section 5 (/work/shared/spec/kafka-quotas.md, Kafka trunk 2024-10 snapshot) plus the
APIs it lists as having no throttle field. kafka-python 3.0.12 bundles Kafka 4.x schemas, which know
newer versions of some APIs (Produce 13, Fetch 18, ListOffsets 11, Metadata 13, OffsetCommit 10,
OffsetFetch 10, DescribeGroups 6, InitProducerId 6, WriteTxnMarkers 2, TxnOffsetCommit 5,
DescribeLogDirs 5, AlterPartitionReassignments 1, DescribeCluster 2, ListTransactions 2,
ListClientMetricsResources 1): the table keeps the spec's minimum (older brokers still speak those
versions; KIP-896 only dropped them in 4.0) and takes the newer maximum, so the range covers every
version a client or broker of either generation may put on the wire. Flexible versions, throttle
field versions and positions agree with the schemas; tests/protocol/test_api_table.py checks that.

Lookups run per request, so they are plain dict reads on tables computed once at import.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from sluice.protocol.errors import ProtocolError
from sluice.protocol.primitives import (
    read_int16,
    skip_compact_nullable_string,
    skip_nullable_string,
)


class _ParsedHeader(Protocol):
    """What `produce_acks` needs of a request header (headers.py imports this module, not the reverse)."""

    @property
    def size(self) -> int: ...

    @property
    def api_version(self) -> int: ...


class ThrottlePosition(Enum):
    """Where the int32 `throttle_time_ms` sits inside a response body."""

    FIRST = "first"
    SECOND = "second"  # OffsetDelete: after the top-level ErrorCode
    AFTER_RESPONSES = "after_responses"  # Produce: after the Responses array
    AFTER_API_KEYS = "after_api_keys"  # ApiVersions: after ErrorCode and ApiKeys
    LAST = "last"  # delegation-token APIs: last non-tagged field


@dataclass(slots=True, frozen=True)
class ApiSpec:
    key: int
    name: str
    min_version: int
    max_version: int
    flexible_from: int | None  # first flexible version, None = never flexible
    throttle_field_from: int | None  # first response version with throttle_time_ms, None = never
    throttle_position: ThrottlePosition | None
    client_throttles_from: int | None  # shouldClientThrottle: None = never, 0 = every version

    def has_throttle_field(self, version: int) -> bool:
        return self.throttle_field_from is not None and version >= self.throttle_field_from

    def client_throttles(self, version: int) -> bool:
        return self.client_throttles_from is not None and version >= self.client_throttles_from


_F = ThrottlePosition.FIRST
_NEVER = None

# (key, name, min, max, flexible from, field from, client throttles from, position)
_ROWS: tuple[tuple[int, str, int, int, int | None, int | None, int | None, ThrottlePosition | None], ...] = (
    (0, "Produce", 0, 13, 9, 1, 6, ThrottlePosition.AFTER_RESPONSES),
    (1, "Fetch", 0, 18, 12, 1, 8, _F),
    (2, "ListOffsets", 0, 11, 6, 2, 3, _F),
    (3, "Metadata", 0, 13, 9, 3, 6, _F),
    (4, "LeaderAndIsr", 0, 7, 4, None, None, None),
    (5, "StopReplica", 0, 4, 2, None, None, None),
    (6, "UpdateMetadata", 0, 8, 6, None, None, None),
    (7, "ControlledShutdown", 0, 3, 3, None, None, None),
    (8, "OffsetCommit", 0, 10, 8, 3, 4, _F),
    (9, "OffsetFetch", 0, 10, 6, 3, 4, _F),
    (10, "FindCoordinator", 0, 6, 3, 1, 2, _F),
    (11, "JoinGroup", 0, 9, 6, 2, 3, _F),
    (12, "Heartbeat", 0, 4, 4, 1, 2, _F),
    (13, "LeaveGroup", 0, 5, 4, 1, 2, _F),
    (14, "SyncGroup", 0, 5, 4, 1, 2, _F),
    (15, "DescribeGroups", 0, 6, 5, 1, 2, _F),
    (16, "ListGroups", 0, 5, 3, 1, 2, _F),
    (17, "SaslHandshake", 0, 1, None, None, None, None),
    (18, "ApiVersions", 0, 4, 3, 1, 2, ThrottlePosition.AFTER_API_KEYS),
    (19, "CreateTopics", 0, 7, 5, 2, 3, _F),
    (20, "DeleteTopics", 0, 6, 4, 1, 2, _F),
    (21, "DeleteRecords", 0, 2, 2, 0, 1, _F),
    (22, "InitProducerId", 0, 6, 2, 0, 1, _F),
    (23, "OffsetForLeaderEpoch", 0, 4, 4, 2, _NEVER, _F),
    (24, "AddPartitionsToTxn", 0, 5, 3, 0, 1, _F),
    (25, "AddOffsetsToTxn", 0, 4, 3, 0, 1, _F),
    (26, "EndTxn", 0, 5, 3, 0, 1, _F),
    (27, "WriteTxnMarkers", 0, 2, 1, None, None, None),
    (28, "TxnOffsetCommit", 0, 5, 3, 0, 1, _F),
    (29, "DescribeAcls", 0, 3, 2, 0, 1, _F),
    (30, "CreateAcls", 0, 3, 2, 0, 1, _F),
    (31, "DeleteAcls", 0, 3, 2, 0, 1, _F),
    (32, "DescribeConfigs", 0, 4, 4, 0, 2, _F),
    (33, "AlterConfigs", 0, 2, 2, 0, 1, _F),
    (34, "AlterReplicaLogDirs", 0, 2, 2, 0, 1, _F),
    (35, "DescribeLogDirs", 0, 5, 2, 0, 1, _F),
    (36, "SaslAuthenticate", 0, 2, 2, None, None, None),
    (37, "CreatePartitions", 0, 3, 2, 0, 1, _F),
    (38, "CreateDelegationToken", 0, 3, 2, 0, 1, ThrottlePosition.LAST),
    (39, "RenewDelegationToken", 0, 2, 2, 0, 1, ThrottlePosition.LAST),
    (40, "ExpireDelegationToken", 0, 2, 2, 0, 1, ThrottlePosition.LAST),
    (41, "DescribeDelegationToken", 0, 3, 2, 0, 1, ThrottlePosition.LAST),
    (42, "DeleteGroups", 0, 2, 2, 0, 1, _F),
    (43, "ElectLeaders", 0, 2, 2, 0, 0, _F),
    (44, "IncrementalAlterConfigs", 0, 1, 1, 0, 0, _F),
    (45, "AlterPartitionReassignments", 0, 1, 0, 0, 0, _F),
    (46, "ListPartitionReassignments", 0, 0, 0, 0, 0, _F),
    (47, "OffsetDelete", 0, 0, None, 0, 0, ThrottlePosition.SECOND),
    (48, "DescribeClientQuotas", 0, 1, 1, 0, _NEVER, _F),
    (49, "AlterClientQuotas", 0, 1, 1, 0, _NEVER, _F),
    (50, "DescribeUserScramCredentials", 0, 0, 0, 0, 0, _F),
    (51, "AlterUserScramCredentials", 0, 0, 0, 0, 0, _F),
    (52, "Vote", 0, 1, 0, None, None, None),
    (53, "BeginQuorumEpoch", 0, 1, 1, None, None, None),
    (54, "EndQuorumEpoch", 0, 1, 1, None, None, None),
    (55, "DescribeQuorum", 0, 2, 0, None, None, None),
    (56, "AlterPartition", 0, 3, 0, 0, _NEVER, _F),
    (57, "UpdateFeatures", 0, 2, 0, 0, _NEVER, _F),
    (58, "Envelope", 0, 0, 0, None, None, None),
    (59, "FetchSnapshot", 0, 1, 0, 0, _NEVER, _F),
    (60, "DescribeCluster", 0, 2, 0, 0, _NEVER, _F),
    (61, "DescribeProducers", 0, 0, 0, 0, _NEVER, _F),
    (62, "BrokerRegistration", 0, 4, 0, 0, 0, _F),
    (63, "BrokerHeartbeat", 0, 1, 0, 0, 0, _F),
    (64, "UnregisterBroker", 0, 0, 0, 0, 0, _F),
    (65, "DescribeTransactions", 0, 0, 0, 0, _NEVER, _F),
    (66, "ListTransactions", 0, 2, 0, 0, _NEVER, _F),
    (67, "AllocateProducerIds", 0, 0, 0, 0, _NEVER, _F),
    (68, "ConsumerGroupHeartbeat", 0, 1, 0, 0, _NEVER, _F),
    (69, "ConsumerGroupDescribe", 0, 0, 0, 0, _NEVER, _F),
    (70, "ControllerRegistration", 0, 0, 0, 0, _NEVER, _F),
    (71, "GetTelemetrySubscriptions", 0, 0, 0, 0, _NEVER, _F),
    (72, "PushTelemetry", 0, 0, 0, 0, _NEVER, _F),
    (73, "AssignReplicasToDirs", 0, 0, 0, 0, _NEVER, _F),
    (74, "ListClientMetricsResources", 0, 1, 0, 0, _NEVER, _F),
    (75, "DescribeTopicPartitions", 0, 0, 0, 0, 0, _F),
    (76, "ShareGroupHeartbeat", 0, 0, 0, 0, _NEVER, _F),
    (77, "ShareGroupDescribe", 0, 0, 0, 0, _NEVER, _F),
    (78, "ShareFetch", 0, 0, 0, 0, _NEVER, _F),
    (79, "ShareAcknowledge", 0, 0, 0, 0, _NEVER, _F),
    (80, "AddRaftVoter", 0, 0, 0, 0, _NEVER, _F),
    (81, "RemoveRaftVoter", 0, 0, 0, 0, _NEVER, _F),
    (82, "UpdateRaftVoter", 0, 0, 0, 0, _NEVER, _F),
    (83, "InitializeShareGroupState", 0, 0, 0, None, None, None),
    (84, "ReadShareGroupState", 0, 0, 0, None, None, None),
    (85, "WriteShareGroupState", 0, 0, 0, None, None, None),
    (86, "DeleteShareGroupState", 0, 0, 0, None, None, None),
    (87, "ReadShareGroupStateSummary", 0, 0, 0, None, None, None),
)

API_SPECS: dict[int, ApiSpec] = {
    key: ApiSpec(
        key=key,
        name=name,
        min_version=min_version,
        max_version=max_version,
        flexible_from=flexible_from,
        throttle_field_from=field_from,
        throttle_position=position,
        client_throttles_from=client_from,
    )
    for key, name, min_version, max_version, flexible_from, field_from, client_from, position in _ROWS
}

# Flexibility never switches off again once a version has it, so a version above the known max
# (a client newer than this table) is still judged flexible. Unknown keys are never flexible: see
# request_header_version for why that is the only safe guess.
NOT_FLEXIBLE = 1 << 30
FLEXIBLE_FROM: dict[int, int] = {
    key: (spec.flexible_from if spec.flexible_from is not None else NOT_FLEXIBLE)
    for key, spec in API_SPECS.items()
}

API_VERSIONS_KEY = 18
CONTROLLED_SHUTDOWN_KEY = 7
PRODUCE_KEY = 0


def api_spec(key: int) -> ApiSpec | None:
    return API_SPECS.get(key)


def is_flexible(key: int, version: int) -> bool:
    return version >= FLEXIBLE_FROM.get(key, NOT_FLEXIBLE)


def request_header_version(key: int, version: int) -> int:
    """0 for ControlledShutdown v0, 2 for flexible versions, otherwise 1.

    An unknown key is read as header v1. Its flexibility cannot be known, and v1 is a prefix of v2
    (v2 only appends a tagged-field block), so api key, version, correlation id and client id are
    still right; only the header size misses the tagged block. The proxy forwards unknown APIs as
    opaque bytes, so it never needs their body offset.
    """
    if version >= FLEXIBLE_FROM.get(key, NOT_FLEXIBLE):
        return 2
    if key == CONTROLLED_SHUTDOWN_KEY and version == 0:
        return 0
    return 1


def response_header_version(key: int, version: int) -> int:
    """1 (correlation id + tagged fields) for flexible versions, else 0; ApiVersions is always 0."""
    if key == API_VERSIONS_KEY:
        return 0
    return 1 if version >= FLEXIBLE_FROM.get(key, NOT_FLEXIBLE) else 0


def produce_acks(frame: memoryview | bytes, header: _ParsedHeader) -> int:
    """Read `acks` from a Produce request without decoding the rest of the body.

    `frame` includes the 4-byte length prefix; the body starts at 4 + header.size.
    v0-2: acks is the first field. v3+: it follows the nullable transactional_id, which is a compact
    string in flexible versions (v9+).
    """
    pos = 4 + header.size
    version = header.api_version
    try:
        if version >= 3:
            if version >= FLEXIBLE_FROM[PRODUCE_KEY]:
                pos = skip_compact_nullable_string(frame, pos)
            else:
                pos = skip_nullable_string(frame, pos)
        acks, _ = read_int16(frame, pos)
    except ProtocolError as exc:
        raise ProtocolError("bad_produce_request", exc.detail or exc.reason) from None
    return acks
