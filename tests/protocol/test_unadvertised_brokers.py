"""A broker the proxy cannot listen for is never advertised (issue 14 item 1): Metadata and DescribeCluster
leave it out, FindCoordinator answers COORDINATOR_NOT_AVAILABLE, every version, fast path = codec path."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.admin import DescribeClusterResponse
from kafka.protocol.metadata import FindCoordinatorResponse, MetadataResponse

from sluice.protocol.broker_addresses import (
    COORDINATOR_NOT_ADVERTISED,
    COORDINATOR_NOT_AVAILABLE,
    decode_brokers,
    rewrite_broker_addresses,
    rewrite_metadata_with_codec,
)
from sluice.protocol.codec_quirks import decode_body
from sluice.protocol.metadata_brokers import rewrite_metadata_brokers

METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER = 3, 10, 60
Broker = MetadataResponse.MetadataResponseBroker
Topic = MetadataResponse.MetadataResponseTopic
Partition = Topic.MetadataResponsePartition


class WithoutNodes:
    """Advertises proxy:<19000 + node>, except for `missing` nodes (no listener): None."""

    def __init__(self, missing: set[int]) -> None:
        self.missing = missing

    def __call__(self, node_id: int, host: str, port: int) -> tuple[str, int] | None:
        return None if node_id in self.missing else ("proxy", 19000 + node_id)


def metadata(version: int, nodes: list[int]) -> Any:
    return MetadataResponse(
        version=version,
        throttle_time_ms=5,
        brokers=[Broker(node_id=n, host=f"kafka-{n}", port=9092, rack=f"r{n}") for n in nodes],
        cluster_id="c",
        controller_id=nodes[0],
        topics=[
            Topic(
                error_code=0,
                name="t",
                topic_id=uuid.UUID(int=9),
                is_internal=False,
                partitions=[
                    Partition(
                        error_code=0,
                        partition_index=i,
                        leader_id=n,
                        leader_epoch=1,
                        replica_nodes=[n],
                        isr_nodes=[n],
                        offline_replicas=[],
                    )
                    for i, n in enumerate(nodes)
                ],
                authorized_operations=None,
            )
        ],
        authorized_operations=None,
        error_code=0,
    )


@pytest.mark.parametrize("version", range(14))
def test_metadata_leaves_out_a_broker_without_a_listener(version: int) -> None:
    body = bytes(metadata(version, [1, 2, 3]).encode(version=version))
    rewritten = rewrite_broker_addresses(METADATA, version, body, WithoutNodes({2}))
    assert rewritten is not None
    assert decode_brokers(METADATA, version, rewritten) == [(1, "proxy", 19001), (3, "proxy", 19003)]
    # Everything else is the broker's: partition 1 still names leader 2, which clients then treat as
    # unavailable (no such broker) and retry, never sending its requests elsewhere.
    before = decode_body(MetadataResponse, version, body).to_dict()
    after = decode_body(MetadataResponse, version, rewritten).to_dict()
    assert {k: v for k, v in after.items() if k != "brokers"} == {
        k: v for k, v in before.items() if k != "brokers"
    }
    assert rewritten == rewrite_metadata_with_codec(version, body, WithoutNodes({2}))


@pytest.mark.parametrize("version", [0, 9, 13])
def test_metadata_with_every_broker_left_out(version: int) -> None:
    body = bytes(metadata(version, [1, 2]).encode(version=version))
    rewritten = rewrite_metadata_brokers(version, body, WithoutNodes({1, 2}))
    assert rewritten is not None
    assert decode_brokers(METADATA, version, rewritten) == []
    assert rewritten == rewrite_metadata_with_codec(version, body, WithoutNodes({1, 2}))


@settings(max_examples=100, deadline=None)
@given(
    version=st.integers(0, 13),
    nodes=st.lists(st.integers(0, 2000), min_size=1, max_size=6, unique=True),
    data=st.data(),
)
def test_property_fast_path_equals_codec_when_nodes_are_left_out(
    version: int, nodes: list[int], data
) -> None:
    missing = set(data.draw(st.lists(st.sampled_from(nodes), max_size=len(nodes))))
    body = bytes(metadata(version, nodes).encode(version=version))
    fast = rewrite_metadata_brokers(version, body, WithoutNodes(missing))
    assert fast == rewrite_metadata_with_codec(version, body, WithoutNodes(missing))
    assert [n for n, _h, _p in decode_brokers(METADATA, version, fast)] == [
        n for n in nodes if n not in missing
    ]


@pytest.mark.parametrize("version", range(7))
def test_find_coordinator_on_a_node_without_a_listener_is_not_available(version: int) -> None:
    if version < 4:
        message = FindCoordinatorResponse(
            version=version, throttle_time_ms=0, error_code=0, error_message=None, node_id=4, host="k", port=1
        )
    else:
        message = FindCoordinatorResponse(
            version=version,
            throttle_time_ms=0,
            coordinators=[
                FindCoordinatorResponse.Coordinator(
                    key=f"g{n}", node_id=n, host="k", port=1, error_code=0, error_message=None
                )
                for n in (4, 5)
            ],
        )
    body = bytes(message.encode(version=version))
    rewritten = rewrite_broker_addresses(FIND_COORDINATOR, version, body, WithoutNodes({4}))
    decoded = decode_body(FindCoordinatorResponse, version, rewritten)
    node = decoded if version < 4 else decoded.coordinators[0]
    assert (node.error_code, node.node_id, node.host, node.port) == (COORDINATOR_NOT_AVAILABLE, -1, "", -1)
    if version >= 1:
        assert node.error_message == COORDINATOR_NOT_ADVERTISED
    if version >= 4:
        other = decoded.coordinators[1]
        assert (other.key, other.error_code, other.node_id, other.port) == ("g5", 0, 5, 19005)
    assert decode_brokers(FIND_COORDINATOR, version, rewritten) == (
        [] if version < 4 else [(5, "proxy", 19005)]
    )


@pytest.mark.parametrize("version", range(3))
def test_describe_cluster_leaves_out_a_broker_without_a_listener(version: int) -> None:
    message = DescribeClusterResponse(
        version=version,
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        endpoint_type=1,
        cluster_id="c",
        controller_id=7,
        brokers=[
            DescribeClusterResponse.DescribeClusterBroker(
                broker_id=b, host="k", port=1, rack=None, is_fenced=False
            )
            for b in (7, 8)
        ],
        authorized_operations=None,
    )
    body = bytes(message.encode(version=version))
    rewritten = rewrite_broker_addresses(DESCRIBE_CLUSTER, version, body, WithoutNodes({7}))
    assert decode_brokers(DESCRIBE_CLUSTER, version, rewritten) == [(8, "proxy", 19008)]
