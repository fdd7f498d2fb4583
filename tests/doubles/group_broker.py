"""GroupBrokerDouble: one broker answering the group-describe APIs librdkafka's mock cluster lacks, the
KIP-848 ConsumerGroupDescribe and the KIP-932 ShareGroupDescribe, for the tests that show they pass through
the proxy.

    with GroupBrokerDouble(consumer_groups={"g848": [member]}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.describe_consumer_groups(["g848"])  # ConsumerGroupDescribe, answered here

On top of AdminBrokerDouble (ApiVersions, Metadata, the topic APIs: answers built by `protocol/`) it answers
FindCoordinator (itself for every key, built by `protocol/`) and the two describe APIs. Sluice has no codec
for those two, since it never reads them (they carry no broker address), so their answers are encoded by
tests/schema_codec.py from Kafka's own schemas (beside the repository): built from the schema, never by
hand. `answers` keeps every describe answer's body as sent, for the tests to compare with what a client got.
"""

from __future__ import annotations

from typing import Any

from doubles.admin_broker import NONE, AdminBrokerDouble
from schema_codec import decode, encode, message_schema

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.headers import RequestHeader
from sluice.protocol.message_codec import decode_request_body, encode_response_body

GROUP_ID_NOT_FOUND = 69
DESCRIBE_VERSIONS = {ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1), ApiKey.SHARE_GROUP_DESCRIBE: (1, 1)}


class GroupBrokerDouble(AdminBrokerDouble):
    def __init__(
        self,
        *,
        consumer_groups: dict[str, list[dict[str, Any]]] | None = None,
        share_groups: dict[str, list[dict[str, Any]]] | None = None,
        topics: dict[str, int] | None = None,
    ) -> None:
        """Groups by id, each a list of members in the describe answer's own field names."""
        super().__init__(topics=topics)
        self.groups = {
            ApiKey.CONSUMER_GROUP_DESCRIBE: dict(consumer_groups or {}),
            ApiKey.SHARE_GROUP_DESCRIBE: dict(share_groups or {}),
        }
        self.answers: list[tuple[int, int, bytes]] = []  # (api key, version, body) of each describe answer
        self.advertised.update({ApiKey.FIND_COORDINATOR: (0, 6), **DESCRIBE_VERSIONS})
        self._handlers[ApiKey.FIND_COORDINATOR] = self._find_coordinator
        self._handlers[ApiKey.CONSUMER_GROUP_DESCRIBE] = self._describe
        self._handlers[ApiKey.SHARE_GROUP_DESCRIBE] = self._describe

    def _find_coordinator(self, header: RequestHeader, body: memoryview) -> bytes:
        version = header.api_version
        request = decode_request_body(ApiKey.FIND_COORDINATOR, version, body)
        here = {"node_id": self.node_id, "host": "127.0.0.1", "port": self.port, "error_code": NONE}
        if version < 4:
            return encode_response_body(ApiKey.FIND_COORDINATOR, version, throttle_time_ms=0, **here)
        coordinators = [{"key": key, **here} for key in request.coordinator_keys]
        return encode_response_body(
            ApiKey.FIND_COORDINATOR, version, throttle_time_ms=0, coordinators=coordinators
        )

    def _describe(self, header: RequestHeader, body: memoryview) -> bytes:
        key, version = header.api_key, header.api_version
        request = decode(message_schema(key, "request", version), version, bytes(body))
        groups = [self._group(key, group) for group in request["GroupIds"]]
        answer = encode(message_schema(key, "response", version), version, {"Groups": groups})
        self.answers.append((key, version, answer))
        return answer

    def _group(self, key: int, group: str) -> dict[str, Any]:
        members = self.groups[key].get(group)
        if members is None:
            return {
                "GroupId": group,
                "ErrorCode": GROUP_ID_NOT_FOUND,
                "ErrorMessage": f"Group {group} not found.",
            }
        return {
            "GroupId": group,
            "GroupState": "Stable",
            "GroupEpoch": 3,
            "AssignmentEpoch": 3,
            "AssignorName": "uniform",
            "Members": members,
        }
