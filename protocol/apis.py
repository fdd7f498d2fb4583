"""The Kafka API table: versions, flexible versions and where `throttle_time_ms` sits.

Source: spec section 5 (docs/kafka-quotas-spec.md, Kafka trunk 2024-10 snapshot) plus the APIs it lists as
having no throttle field, brought up to Kafka's message schemas: kafka-python's bundled ones and Kafka's own
of 3.9.1 and a 2026 trunk (the same sources protocol/schema_table.py is generated from). Each row spans
every version any of them defines: the spec's minimum (older brokers still speak those versions; KIP-896
only dropped some in 4.0) up to the newest schema's maximum, so the range covers every version a client or
broker of either generation may put on the wire. Names are the newest schema's (Kafka 4.1 renamed
ListClientMetricsResources ListConfigResources, KIP-1142). Versions, flexible versions and the throttle
field's versions and position agree with the schemas: tests/protocol/test_api_table.py checks every row
against every source, and that every API the schema table knows has its row.

`client_throttles_from` is not in the schemas: it is each response class's `shouldClientThrottle` in
Kafka's Java code (an API whose class does not override it, as every KIP-848, KIP-932 and KIP-1071 API,
never has its clients throttle themselves).

Lookups run per request, so they are plain dict reads on tables computed once at import.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from sluice.protocol.api_keys import ApiKey


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
_ROWS: tuple[
    tuple[ApiKey, str, int, int, int | None, int | None, int | None, ThrottlePosition | None], ...
] = (
    (ApiKey.PRODUCE, "Produce", 0, 13, 9, 1, 6, ThrottlePosition.AFTER_RESPONSES),
    (ApiKey.FETCH, "Fetch", 0, 18, 12, 1, 8, _F),
    (ApiKey.LIST_OFFSETS, "ListOffsets", 0, 11, 6, 2, 3, _F),
    (ApiKey.METADATA, "Metadata", 0, 13, 9, 3, 6, _F),
    (ApiKey.LEADER_AND_ISR, "LeaderAndIsr", 0, 7, 4, None, None, None),
    (ApiKey.STOP_REPLICA, "StopReplica", 0, 4, 2, None, None, None),
    (ApiKey.UPDATE_METADATA, "UpdateMetadata", 0, 8, 6, None, None, None),
    (ApiKey.CONTROLLED_SHUTDOWN, "ControlledShutdown", 0, 3, 3, None, None, None),
    (ApiKey.OFFSET_COMMIT, "OffsetCommit", 0, 10, 8, 3, 4, _F),
    (ApiKey.OFFSET_FETCH, "OffsetFetch", 0, 10, 6, 3, 4, _F),
    (ApiKey.FIND_COORDINATOR, "FindCoordinator", 0, 6, 3, 1, 2, _F),
    (ApiKey.JOIN_GROUP, "JoinGroup", 0, 9, 6, 2, 3, _F),
    (ApiKey.HEARTBEAT, "Heartbeat", 0, 4, 4, 1, 2, _F),
    (ApiKey.LEAVE_GROUP, "LeaveGroup", 0, 5, 4, 1, 2, _F),
    (ApiKey.SYNC_GROUP, "SyncGroup", 0, 5, 4, 1, 2, _F),
    (ApiKey.DESCRIBE_GROUPS, "DescribeGroups", 0, 6, 5, 1, 2, _F),
    (ApiKey.LIST_GROUPS, "ListGroups", 0, 5, 3, 1, 2, _F),
    (ApiKey.SASL_HANDSHAKE, "SaslHandshake", 0, 1, None, None, None, None),
    (ApiKey.API_VERSIONS, "ApiVersions", 0, 5, 3, 1, 2, ThrottlePosition.AFTER_API_KEYS),
    (ApiKey.CREATE_TOPICS, "CreateTopics", 0, 7, 5, 2, 3, _F),
    (ApiKey.DELETE_TOPICS, "DeleteTopics", 0, 6, 4, 1, 2, _F),
    (ApiKey.DELETE_RECORDS, "DeleteRecords", 0, 2, 2, 0, 1, _F),
    (ApiKey.INIT_PRODUCER_ID, "InitProducerId", 0, 6, 2, 0, 1, _F),
    (ApiKey.OFFSET_FOR_LEADER_EPOCH, "OffsetForLeaderEpoch", 0, 4, 4, 2, _NEVER, _F),
    (ApiKey.ADD_PARTITIONS_TO_TXN, "AddPartitionsToTxn", 0, 5, 3, 0, 1, _F),
    (ApiKey.ADD_OFFSETS_TO_TXN, "AddOffsetsToTxn", 0, 4, 3, 0, 1, _F),
    (ApiKey.END_TXN, "EndTxn", 0, 5, 3, 0, 1, _F),
    (ApiKey.WRITE_TXN_MARKERS, "WriteTxnMarkers", 0, 2, 1, None, None, None),
    (ApiKey.TXN_OFFSET_COMMIT, "TxnOffsetCommit", 0, 6, 3, 0, 1, _F),
    (ApiKey.DESCRIBE_ACLS, "DescribeAcls", 0, 3, 2, 0, 1, _F),
    (ApiKey.CREATE_ACLS, "CreateAcls", 0, 3, 2, 0, 1, _F),
    (ApiKey.DELETE_ACLS, "DeleteAcls", 0, 3, 2, 0, 1, _F),
    (ApiKey.DESCRIBE_CONFIGS, "DescribeConfigs", 0, 4, 4, 0, 2, _F),
    (ApiKey.ALTER_CONFIGS, "AlterConfigs", 0, 2, 2, 0, 1, _F),
    (ApiKey.ALTER_REPLICA_LOG_DIRS, "AlterReplicaLogDirs", 0, 2, 2, 0, 1, _F),
    (ApiKey.DESCRIBE_LOG_DIRS, "DescribeLogDirs", 0, 5, 2, 0, 1, _F),
    (ApiKey.SASL_AUTHENTICATE, "SaslAuthenticate", 0, 2, 2, None, None, None),
    (ApiKey.CREATE_PARTITIONS, "CreatePartitions", 0, 3, 2, 0, 1, _F),
    (ApiKey.CREATE_DELEGATION_TOKEN, "CreateDelegationToken", 0, 3, 2, 0, 1, ThrottlePosition.LAST),
    (ApiKey.RENEW_DELEGATION_TOKEN, "RenewDelegationToken", 0, 2, 2, 0, 1, ThrottlePosition.LAST),
    (ApiKey.EXPIRE_DELEGATION_TOKEN, "ExpireDelegationToken", 0, 2, 2, 0, 1, ThrottlePosition.LAST),
    (ApiKey.DESCRIBE_DELEGATION_TOKEN, "DescribeDelegationToken", 0, 3, 2, 0, 1, ThrottlePosition.LAST),
    (ApiKey.DELETE_GROUPS, "DeleteGroups", 0, 3, 2, 0, 1, _F),
    (ApiKey.ELECT_LEADERS, "ElectLeaders", 0, 2, 2, 0, 0, _F),
    (ApiKey.INCREMENTAL_ALTER_CONFIGS, "IncrementalAlterConfigs", 0, 1, 1, 0, 0, _F),
    (ApiKey.ALTER_PARTITION_REASSIGNMENTS, "AlterPartitionReassignments", 0, 1, 0, 0, 0, _F),
    (ApiKey.LIST_PARTITION_REASSIGNMENTS, "ListPartitionReassignments", 0, 0, 0, 0, 0, _F),
    (ApiKey.OFFSET_DELETE, "OffsetDelete", 0, 0, None, 0, 0, ThrottlePosition.SECOND),
    (ApiKey.DESCRIBE_CLIENT_QUOTAS, "DescribeClientQuotas", 0, 1, 1, 0, _NEVER, _F),
    (ApiKey.ALTER_CLIENT_QUOTAS, "AlterClientQuotas", 0, 1, 1, 0, _NEVER, _F),
    (ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, "DescribeUserScramCredentials", 0, 0, 0, 0, 0, _F),
    (ApiKey.ALTER_USER_SCRAM_CREDENTIALS, "AlterUserScramCredentials", 0, 0, 0, 0, 0, _F),
    (ApiKey.VOTE, "Vote", 0, 2, 0, None, None, None),
    (ApiKey.BEGIN_QUORUM_EPOCH, "BeginQuorumEpoch", 0, 1, 1, None, None, None),
    (ApiKey.END_QUORUM_EPOCH, "EndQuorumEpoch", 0, 1, 1, None, None, None),
    (ApiKey.DESCRIBE_QUORUM, "DescribeQuorum", 0, 2, 0, None, None, None),
    (ApiKey.ALTER_PARTITION, "AlterPartition", 0, 3, 0, 0, _NEVER, _F),
    (ApiKey.UPDATE_FEATURES, "UpdateFeatures", 0, 2, 0, 0, _NEVER, _F),
    (ApiKey.ENVELOPE, "Envelope", 0, 0, 0, None, None, None),
    (ApiKey.FETCH_SNAPSHOT, "FetchSnapshot", 0, 1, 0, 0, _NEVER, _F),
    (ApiKey.DESCRIBE_CLUSTER, "DescribeCluster", 0, 2, 0, 0, _NEVER, _F),
    (ApiKey.DESCRIBE_PRODUCERS, "DescribeProducers", 0, 0, 0, 0, _NEVER, _F),
    (ApiKey.BROKER_REGISTRATION, "BrokerRegistration", 0, 4, 0, 0, 0, _F),
    (ApiKey.BROKER_HEARTBEAT, "BrokerHeartbeat", 0, 2, 0, 0, 0, _F),
    (ApiKey.UNREGISTER_BROKER, "UnregisterBroker", 0, 0, 0, 0, 0, _F),
    (ApiKey.DESCRIBE_TRANSACTIONS, "DescribeTransactions", 0, 0, 0, 0, _NEVER, _F),
    (ApiKey.LIST_TRANSACTIONS, "ListTransactions", 0, 2, 0, 0, _NEVER, _F),
    (ApiKey.ALLOCATE_PRODUCER_IDS, "AllocateProducerIds", 0, 0, 0, 0, _NEVER, _F),
    (ApiKey.CONSUMER_GROUP_HEARTBEAT, "ConsumerGroupHeartbeat", 0, 1, 0, 0, _NEVER, _F),
    (ApiKey.CONSUMER_GROUP_DESCRIBE, "ConsumerGroupDescribe", 0, 1, 0, 0, _NEVER, _F),
    (ApiKey.CONTROLLER_REGISTRATION, "ControllerRegistration", 0, 0, 0, 0, _NEVER, _F),
    (ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, "GetTelemetrySubscriptions", 0, 0, 0, 0, _NEVER, _F),
    (ApiKey.PUSH_TELEMETRY, "PushTelemetry", 0, 0, 0, 0, _NEVER, _F),
    (ApiKey.ASSIGN_REPLICAS_TO_DIRS, "AssignReplicasToDirs", 0, 0, 0, 0, _NEVER, _F),
    (ApiKey.LIST_CONFIG_RESOURCES, "ListConfigResources", 0, 1, 0, 0, _NEVER, _F),
    (ApiKey.DESCRIBE_TOPIC_PARTITIONS, "DescribeTopicPartitions", 0, 0, 0, 0, 0, _F),
    (ApiKey.SHARE_GROUP_HEARTBEAT, "ShareGroupHeartbeat", 0, 1, 0, 0, _NEVER, _F),
    (ApiKey.SHARE_GROUP_DESCRIBE, "ShareGroupDescribe", 0, 1, 0, 0, _NEVER, _F),
    (ApiKey.SHARE_FETCH, "ShareFetch", 0, 2, 0, 0, _NEVER, _F),
    (ApiKey.SHARE_ACKNOWLEDGE, "ShareAcknowledge", 0, 2, 0, 0, _NEVER, _F),
    (ApiKey.ADD_RAFT_VOTER, "AddRaftVoter", 0, 1, 0, 0, _NEVER, _F),
    (ApiKey.REMOVE_RAFT_VOTER, "RemoveRaftVoter", 0, 0, 0, 0, _NEVER, _F),
    (ApiKey.UPDATE_RAFT_VOTER, "UpdateRaftVoter", 0, 0, 0, 0, _NEVER, _F),
    (ApiKey.INITIALIZE_SHARE_GROUP_STATE, "InitializeShareGroupState", 0, 0, 0, None, None, None),
    (ApiKey.READ_SHARE_GROUP_STATE, "ReadShareGroupState", 0, 0, 0, None, None, None),
    (ApiKey.WRITE_SHARE_GROUP_STATE, "WriteShareGroupState", 0, 1, 0, None, None, None),
    (ApiKey.DELETE_SHARE_GROUP_STATE, "DeleteShareGroupState", 0, 0, 0, None, None, None),
    (ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, "ReadShareGroupStateSummary", 0, 1, 0, None, None, None),
    (ApiKey.STREAMS_GROUP_HEARTBEAT, "StreamsGroupHeartbeat", 0, 1, 0, 0, _NEVER, _F),
    (ApiKey.STREAMS_GROUP_DESCRIBE, "StreamsGroupDescribe", 0, 1, 0, 0, _NEVER, _F),
    (ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, "DescribeShareGroupOffsets", 0, 1, 0, 0, _NEVER, _F),
    (ApiKey.ALTER_SHARE_GROUP_OFFSETS, "AlterShareGroupOffsets", 0, 0, 0, 0, _NEVER, _F),
    (ApiKey.DELETE_SHARE_GROUP_OFFSETS, "DeleteShareGroupOffsets", 0, 0, 0, 0, _NEVER, _F),
    (
        ApiKey.STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE,
        "StreamsGroupTopologyDescriptionUpdate",
        0,
        0,
        0,
        0,
        _NEVER,
        _F,
    ),
    (ApiKey.UNREGISTER_CONTROLLER, "UnregisterController", 0, 0, 0, 0, _NEVER, _F),
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
# The same as a tuple indexed by API key, for the look-up made per request (indexing a tuple costs a third
# of a dict's get); a key past its end is not flexible.
FLEXIBLE_FROM_BY_KEY: tuple[int, ...] = tuple(
    FLEXIBLE_FROM.get(key, NOT_FLEXIBLE) for key in range(max(FLEXIBLE_FROM) + 1)
)
# Bound once: a member read through the enum class costs several times a module global's.
_API_VERSIONS = ApiKey.API_VERSIONS
_CONTROLLED_SHUTDOWN = ApiKey.CONTROLLED_SHUTDOWN


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
    if key == _CONTROLLED_SHUTDOWN and version == 0:
        return 0
    return 1


def response_header_version(key: int, version: int) -> int:
    """1 (correlation id + tagged fields) for flexible versions, else 0; ApiVersions is always 0."""
    if key == _API_VERSIONS:
        return 0
    return 1 if version >= FLEXIBLE_FROM.get(key, NOT_FLEXIBLE) else 0
