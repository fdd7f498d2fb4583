"""Produce, Fetch, ShareFetch and ShareAcknowledge answers carrying NodeEndpoints, built from Kafka's schemas
by tests/schema_codec.py, for the tests and benchmarks of the NodeEndpoints rewrite."""

from __future__ import annotations

import uuid
from typing import Any

from schema_codec import Schema, encode, message_schema

from sluice.protocol.api_keys import ApiKey

FETCH, SHARE_FETCH = ApiKey.FETCH, ApiKey.SHARE_FETCH
# Two leaders' real addresses, as a broker names them after NOT_LEADER_OR_FOLLOWER.
REAL = [(2, "kafka-2.internal", 9092), (3, "kafka-3.internal", 9093)]


def proxy_address(node_id: int, host: str, port: int) -> tuple[str, int]:
    return "sluice.example", 9000 + node_id


def _partition(key: int, index: int, records: bytes | None, leader: int | None) -> dict[str, Any]:
    partition: dict[str, Any] = {"PartitionIndex": index, "Index": index, "Records": records}
    partition["ErrorCode"] = 6 if leader is not None else 0
    if leader is not None:
        partition["CurrentLeader"] = {"LeaderId": leader, "LeaderEpoch": 3}
    if key == SHARE_FETCH:
        partition["AcquiredRecords"] = [{"FirstOffset": 1, "LastOffset": 4, "DeliveryCount": 1}]
    if key == FETCH:
        partition["AbortedTransactions"] = [{"ProducerId": 9, "FirstOffset": 2}] if index % 2 else None
    return partition


def _leader(partition: int) -> int | None:
    return 2 if partition == 1 else None  # partition 1 moved to node 2: NOT_LEADER_OR_FOLLOWER


def answer(
    key: int, version: int, endpoints: list[tuple[int, str, int]], **extra: Any
) -> tuple[Schema, bytes]:
    """(schema, body) of an answer with three topics of partitions whose records take 0 to 20,000 bytes."""
    schema = message_schema(key, "response", version)
    sizes = [None, b"", b"r", b"x" * 127, b"y" * 128, b"z" * 16383, b"w" * 16384, b"v" * 20000]
    topics = [
        {
            "Name": f"topic-{t}",
            "TopicId": uuid.UUID(int=t + 1),
            "Partitions": [
                _partition(key, p, sizes[(t + p) % len(sizes)], 2 if p == 1 else None) for p in range(3)
            ],
            "PartitionResponses": [_partition(key, p, None, _leader(p)) for p in range(3)],
        }
        for t in range(3)
    ]
    message = {"ThrottleTimeMs": 0, "Responses": topics, **extra}
    fields = {f["name"] for f in schema["fields"]}
    message = {name: value for name, value in message.items() if name in fields or name.startswith("_")}
    if endpoints:
        message["NodeEndpoints"] = [
            {"NodeId": node, "Host": host, "Port": port, "Rack": f"rack-{node}"}
            for node, host, port in endpoints
        ]
    return schema, encode(schema, version, message)
