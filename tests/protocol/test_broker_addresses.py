"""Broker-address rewriting for Metadata (fast path and codec reference), FindCoordinator and
DescribeCluster, every version."""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.admin import DescribeClusterResponse
from kafka.protocol.metadata import FindCoordinatorResponse, MetadataResponse

from sluice.protocol.broker_addresses import (
    REWRITABLE_MAX_VERSIONS,
    decode_brokers,
    rewrite_broker_addresses,
    rewrite_metadata_with_codec,
)
from sluice.protocol.codec_quirks import decode_body, encode_body
from sluice.protocol.errors import ProtocolError
from sluice.protocol.metadata_brokers import rewrite_metadata_brokers

METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER = 3, 10, 60
Broker = MetadataResponse.MetadataResponseBroker
Topic = MetadataResponse.MetadataResponseTopic
Partition = Topic.MetadataResponsePartition


class RecordingAddressMap:
    """Advertises proxy-<node>.sluice:<19000 + node> and records every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, str, int]] = []

    def __call__(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        self.calls.append((node_id, host, port))
        return self.advertised(node_id)

    @staticmethod
    def advertised(node_id: int) -> tuple[str, int]:
        return f"proxy-{node_id}.sluice", 19000 + node_id % 1000


def _metadata_message(version: int) -> Any:
    return MetadataResponse(
        version=version,
        throttle_time_ms=250,
        brokers=[
            Broker(node_id=1, host="kafka-1.internal", port=9092, rack="eu-1a"),
            Broker(node_id=2, host="kafka-2.internal", port=9093, rack=None),
            Broker(node_id=3, host="10.0.0.3", port=9094, rack=""),
        ],
        cluster_id="QmFzZTY0Q2x1c3Rlcg",
        controller_id=2,
        topics=[
            Topic(
                error_code=0,
                name=f"topic-{t}",
                topic_id=uuid.UUID(int=t + 1),
                is_internal=t == 0,
                partitions=[
                    Partition(
                        error_code=0,
                        partition_index=p,
                        leader_id=1 + p % 3,
                        leader_epoch=7,
                        replica_nodes=[1, 2, 3],
                        isr_nodes=[1, 2],
                        offline_replicas=[3],
                    )
                    for p in range(3)
                ],
                authorized_operations={3, 4},
            )
            for t in range(2)
        ],
        authorized_operations={1, 2},
        error_code=0,
    )


def _with_advertised_brokers(original: Any, broker_field: str = "node_id") -> dict[str, Any]:
    """The decoded original as a dict, with only the broker addresses replaced."""
    expected = original.to_dict()
    for broker in expected["brokers"]:
        broker["host"], broker["port"] = RecordingAddressMap.advertised(broker[broker_field])
    return expected


@pytest.mark.parametrize("version", range(14))
def test_metadata_rewrite_changes_only_the_broker_addresses(version: int) -> None:
    message = _metadata_message(version)
    body = bytes(message.encode(version=version))
    address_for = RecordingAddressMap()
    rewritten = rewrite_broker_addresses(METADATA, version, body, address_for)
    assert rewritten is not None
    assert address_for.calls == [
        (1, "kafka-1.internal", 9092),
        (2, "kafka-2.internal", 9093),
        (3, "10.0.0.3", 9094),
    ]
    decoded = decode_body(MetadataResponse, version, rewritten)
    original = decode_body(MetadataResponse, version, body)
    assert decoded.to_dict() == _with_advertised_brokers(original)
    assert decode_brokers(METADATA, version, rewritten) == [
        (n, *RecordingAddressMap.advertised(n)) for n in (1, 2, 3)
    ]


@pytest.mark.parametrize("version", range(14))
def test_metadata_fast_path_equals_codec_path(version: int) -> None:
    body = bytes(_metadata_message(version).encode(version=version))
    fast = rewrite_metadata_brokers(version, body, RecordingAddressMap())
    assert fast == rewrite_metadata_with_codec(version, body, RecordingAddressMap())


def test_metadata_fast_path_keeps_unknown_broker_tags() -> None:
    message = MetadataResponse(
        version=12,
        throttle_time_ms=0,
        brokers=[Broker(node_id=5, host="k", port=1, rack=None, _3=b"tagged")],
        cluster_id=None,
        controller_id=5,
        topics=[],
    )
    body = encode_body(message, 12)
    fast = rewrite_metadata_brokers(12, memoryview(body), RecordingAddressMap())
    assert fast == rewrite_metadata_with_codec(12, body, RecordingAddressMap())
    assert fast is not None
    assert b"tagged" in fast


def test_unchanged_addresses_give_none() -> None:
    body = bytes(_metadata_message(12).encode(version=12))
    assert rewrite_broker_addresses(METADATA, 12, body, lambda _n, host, port: (host, port)) is None


def test_empty_broker_list_gives_none_and_no_calls() -> None:
    message = MetadataResponse(version=1, brokers=[], controller_id=-1, topics=[])
    address_for = RecordingAddressMap()
    assert rewrite_broker_addresses(METADATA, 1, bytes(message.encode(version=1)), address_for) is None
    assert address_for.calls == []


def _metadata_strategy(version: int) -> st.SearchStrategy[Any]:
    int32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
    int16 = st.integers(min_value=-(2**15), max_value=2**15 - 1)
    text = st.text(max_size=20)
    operations = st.none() | st.sets(st.integers(min_value=0, max_value=31), max_size=4)
    brokers = st.lists(
        st.builds(Broker, node_id=int32, host=text, port=int32, rack=st.none() | text), max_size=5
    )
    partition = st.builds(
        Partition,
        error_code=int16,
        partition_index=int32,
        leader_id=int32,
        leader_epoch=int32,
        replica_nodes=st.lists(int32, max_size=3),
        isr_nodes=st.lists(int32, max_size=3),
        offline_replicas=st.lists(int32, max_size=3),
    )
    topic = st.builds(
        Topic,
        error_code=int16,
        name=(st.none() | text) if version >= 12 else text,
        topic_id=st.uuids(),
        is_internal=st.booleans(),
        partitions=st.lists(partition, max_size=3),
        authorized_operations=operations,
    )
    return st.builds(
        MetadataResponse,
        version=st.just(version),
        throttle_time_ms=int32,
        brokers=brokers,
        cluster_id=st.none() | text,
        controller_id=int32,
        topics=st.lists(topic, max_size=3),
        authorized_operations=operations,
        error_code=int16,
    )


@settings(max_examples=400, deadline=None)
@given(data=st.data(), version=st.integers(min_value=0, max_value=13))
def test_property_fast_path_equals_codec_for_random_metadata(data: st.DataObject, version: int) -> None:
    message = data.draw(_metadata_strategy(version))
    body = bytes(message.encode(version=version))
    fast = rewrite_metadata_brokers(version, body, RecordingAddressMap())
    reference = rewrite_metadata_with_codec(version, body, RecordingAddressMap())
    assert (body if fast is None else fast) == reference


@given(data=st.binary(max_size=120), version=st.integers(min_value=0, max_value=13))
def test_fast_path_on_any_bytes_raises_only_protocol_error(data: bytes, version: int) -> None:
    try:
        rewrite_metadata_brokers(version, data, RecordingAddressMap())
    except ProtocolError as exc:
        assert exc.reason == "bad_metadata_response"


@pytest.mark.parametrize(
    ("version", "body"),
    [
        (1, struct.pack(">i", -1)),  # negative broker count
        (9, b"\x00"),  # null compact brokers array
        (1, struct.pack(">iih", 1, 1, -1)),  # null host
        (1, struct.pack(">iih", 1, 1, 3) + b"\xff\xfeh" + struct.pack(">ih", 9092, -1)),  # host not UTF-8
        (3, struct.pack(">iiih", 0, 1, 1, 20) + b"short"),  # host runs past the body
    ],
)
def test_malformed_metadata_brokers_are_protocol_errors(version: int, body: bytes) -> None:
    with pytest.raises(ProtocolError) as info:
        rewrite_broker_addresses(METADATA, version, body, RecordingAddressMap())
    assert info.value.reason == "bad_metadata_response"


@pytest.mark.parametrize(
    ("api_key", "version"), [(METADATA, 14), (FIND_COORDINATOR, 7), (DESCRIBE_CLUSTER, 3)]
)
def test_versions_above_the_rewritable_max_are_refused(api_key: int, version: int) -> None:
    assert REWRITABLE_MAX_VERSIONS[api_key] == version - 1
    with pytest.raises(ProtocolError) as info:
        rewrite_broker_addresses(api_key, version, b"\x00" * 16, RecordingAddressMap())
    assert info.value.reason == "unsupported_version"


def test_apis_without_addresses_give_none() -> None:
    for api_key in (0, 1, 18, 19, 9999):
        assert rewrite_broker_addresses(api_key, 0, b"\x00\x00\x00\x00", RecordingAddressMap()) is None
    with pytest.raises(ValueError):
        decode_brokers(0, 0, b"")


def _find_coordinator(version: int, node_ids: list[int]) -> Any:
    if version < 4:
        (node_id,) = node_ids
        real = (node_id, f"kafka-{node_id}", 9090 + node_id) if node_id != -1 else (-1, "", -1)
        return FindCoordinatorResponse(
            version=version,
            throttle_time_ms=3,
            error_code=0 if node_id != -1 else 15,
            error_message=None if node_id != -1 else "The coordinator is not available.",
            node_id=real[0],
            host=real[1],
            port=real[2],
        )
    coordinators = [
        FindCoordinatorResponse.Coordinator(
            key=f"group-{i}",
            node_id=node_id,
            host=f"kafka-{node_id}" if node_id != -1 else "",
            port=9090 + node_id if node_id != -1 else -1,
            error_code=0 if node_id != -1 else 15,
            error_message=None,
        )
        for i, node_id in enumerate(node_ids)
    ]
    return FindCoordinatorResponse(version=version, throttle_time_ms=3, coordinators=coordinators)


@pytest.mark.parametrize("version", range(7))
def test_find_coordinator_rewrite_every_version(version: int) -> None:
    node_ids = [4] if version < 4 else [4, -1, 6]
    message = _find_coordinator(version, node_ids)
    body = bytes(message.encode(version=version))
    address_for = RecordingAddressMap()
    rewritten = rewrite_broker_addresses(FIND_COORDINATOR, version, body, address_for)
    assert rewritten is not None
    expected = decode_body(FindCoordinatorResponse, version, body).to_dict()
    for node in [expected] if version < 4 else expected["coordinators"]:
        if node["node_id"] != -1:
            node["host"], node["port"] = RecordingAddressMap.advertised(node["node_id"])
    assert decode_body(FindCoordinatorResponse, version, rewritten).to_dict() == expected
    live = [n for n in node_ids if n != -1]
    assert [call[0] for call in address_for.calls] == live
    assert decode_brokers(FIND_COORDINATOR, version, rewritten) == [
        (n, *RecordingAddressMap.advertised(n)) for n in live
    ]


@pytest.mark.parametrize("version", range(7))
def test_find_coordinator_error_answer_is_left_untouched(version: int) -> None:
    message = _find_coordinator(version, [-1])
    body = bytes(message.encode(version=version))
    address_for = RecordingAddressMap()
    assert rewrite_broker_addresses(FIND_COORDINATOR, version, body, address_for) is None
    assert address_for.calls == []


@pytest.mark.parametrize("version", range(3))
def test_describe_cluster_rewrite_every_version(version: int) -> None:
    message = DescribeClusterResponse(
        version=version,
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        endpoint_type=1,
        cluster_id="cluster",
        controller_id=7,
        brokers=[
            DescribeClusterResponse.DescribeClusterBroker(
                broker_id=b, host=f"kafka-{b}", port=9092, rack="r" if b % 2 else None, is_fenced=b == 8
            )
            for b in (7, 8)
        ],
        authorized_operations={5},
    )
    body = bytes(message.encode(version=version))
    address_for = RecordingAddressMap()
    rewritten = rewrite_broker_addresses(DESCRIBE_CLUSTER, version, body, address_for)
    assert rewritten is not None
    assert address_for.calls == [(7, "kafka-7", 9092), (8, "kafka-8", 9092)]
    decoded = decode_body(DescribeClusterResponse, version, rewritten)
    original = decode_body(DescribeClusterResponse, version, body)
    assert decoded.to_dict() == _with_advertised_brokers(original, broker_field="broker_id")
    assert decode_brokers(DESCRIBE_CLUSTER, version, rewritten) == [
        (b, *RecordingAddressMap.advertised(b)) for b in (7, 8)
    ]


def test_truncated_find_coordinator_is_a_protocol_error() -> None:
    body = bytes(_find_coordinator(3, [4]).encode(version=3))
    with pytest.raises(ProtocolError):
        rewrite_broker_addresses(FIND_COORDINATOR, 3, body[:-3], RecordingAddressMap())
