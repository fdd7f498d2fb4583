"""The KIP-848 and KIP-932 group-describe APIs pass through the proxy untouched: ConsumerGroupDescribe (asked
by librdkafka's AdminClient, which falls back to DescribeGroups only when it is missing) and
ShareGroupDescribe. librdkafka's mock cluster lacks both, so GroupBrokerDouble plays the broker; their
answers carry no broker address, and the proxy offers them because Kafka's schemas say so."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from doubles.group_broker import GroupBrokerDouble
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka_schemas import SHARED_MISSING
from proxy_process import ProxyProcess
from rawclient import RawClient
from schema_codec import encode, message_schema
from throttle_harness import metric_value

from sluice.protocol.api_keys import ApiKey

pytestmark = [
    pytest.mark.slow,  # end to end: the real proxy, a real admin client
    pytest.mark.skipif(SHARED_MISSING is not None, reason=SHARED_MISSING or ""),
]

TOPIC_ID = uuid.UUID(int=0x848)
ASSIGNMENT = {"TopicPartitions": [{"TopicId": TOPIC_ID, "TopicName": "orders", "Partitions": [0, 1]}]}
MEMBER = {
    "MemberId": "member-1",
    "MemberEpoch": 3,
    "ClientId": "orders-app",
    "ClientHost": "/10.1.2.3",
    "SubscribedTopicNames": ["orders"],
    "Assignment": ASSIGNMENT,
    "TargetAssignment": ASSIGNMENT,
}
SHARE_MEMBER = {
    "MemberId": "share-1",
    "MemberEpoch": 2,
    "ClientId": "queue-app",
    "ClientHost": "/10.1.2.4",
    "SubscribedTopicNames": ["orders"],
    "Assignment": ASSIGNMENT,
}


@pytest.fixture(scope="module")
def double_and_proxy() -> Iterator[tuple[GroupBrokerDouble, ProxyProcess]]:
    with (
        GroupBrokerDouble(
            consumer_groups={"orders-848": [MEMBER]},
            share_groups={"orders-queue": [SHARE_MEMBER]},
            topics={"orders": 2},
        ) as double,
        ProxyProcess(double.bootstrap) as proxy,
    ):
        yield double, proxy


def test_both_are_offered(double_and_proxy) -> None:
    _double, proxy = double_and_proxy
    with RawClient("127.0.0.1", proxy.port) as client:
        answer = client.call(ApiVersionsRequest[2](), 2, ApiVersionsResponse)
    offered = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    assert offered[ApiKey.CONSUMER_GROUP_DESCRIBE] == (0, 1)
    assert offered[ApiKey.SHARE_GROUP_DESCRIBE] == (1, 1)


def test_an_admin_client_describes_a_kip848_group_through_the_proxy(double_and_proxy) -> None:
    from confluent_kafka import ConsumerGroupType
    from confluent_kafka.admin import AdminClient

    double, proxy = double_and_proxy
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    (future,) = admin.describe_consumer_groups(["orders-848"], request_timeout=10).values()
    description = future.result(timeout=20)
    assert description.type == ConsumerGroupType.CONSUMER  # from ConsumerGroupDescribe, not DescribeGroups
    (member,) = description.members
    assert (member.member_id, member.client_id, member.host) == ("member-1", "orders-app", "/10.1.2.3")
    assert {tp.partition for tp in member.assignment.topic_partitions} == {0, 1}
    assert any(key == ApiKey.CONSUMER_GROUP_DESCRIBE for key, _v, _b in double.answers)
    assert metric_value(proxy.metrics_text(), "sluice_responses_total", api="ConsumerGroupDescribe") >= 1


def test_a_share_group_description_arrives_byte_for_byte(double_and_proxy) -> None:
    double, proxy = double_and_proxy
    schema = message_schema(ApiKey.SHARE_GROUP_DESCRIBE, "request", 1)
    request = encode(
        schema, 1, {"GroupIds": ["orders-queue", "absent"], "IncludeAuthorizedOperations": False}
    )
    with RawClient("127.0.0.1", proxy.port) as client:
        body = client.call_body(ApiKey.SHARE_GROUP_DESCRIBE, 1, request)
    (sent,) = [b for key, _v, b in double.answers if key == ApiKey.SHARE_GROUP_DESCRIBE]
    assert body == sent
