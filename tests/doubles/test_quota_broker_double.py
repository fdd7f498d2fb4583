"""QuotaBrokerDouble (tests/doubles/quota_broker.py) over a socket: ApiVersions lists 48/49, Metadata
lists the configured brokers, DescribeClientQuotas and AlterClientQuotas keep quotas as a broker does."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from doubles.quota_broker import QuotaBrokerDouble
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from rawclient import RawClient

from sluice.protocol.client_quota_codec import (
    ALTER_CLIENT_QUOTAS,
    DESCRIBE_CLIENT_QUOTAS,
    MATCH_DEFAULT,
    MATCH_EXACT,
    AlterEntry,
    FilterComponent,
    QuotaOp,
    decode_alter_response,
    decode_describe_response,
    encode_alter_request,
    encode_describe_request,
)

QUOTAS = {
    (("client-id", "pump"),): {"producer_byte_rate": 1048576.0},
    (("user", "alice"), ("client-id", None)): {"consumer_byte_rate": 2048.0},
    (("ip", "10.0.0.1"),): {"connection_creation_rate": 5.0},
}


@pytest.fixture
def cluster() -> Iterator[QuotaBrokerDouble]:
    with QuotaBrokerDouble(broker_count=3, quotas=QUOTAS) as double:
        yield double


@pytest.fixture
def client(cluster: QuotaBrokerDouble) -> Iterator[RawClient]:
    with RawClient("127.0.0.1", cluster.port) as raw:
        yield raw


def describe(client: RawClient, version: int, components: list[FilterComponent], strict: bool):
    body = client.call_body(
        DESCRIBE_CLIENT_QUOTAS, version, encode_describe_request(version, components, strict)
    )
    return decode_describe_response(version, body)


def test_api_versions_and_metadata(client: RawClient) -> None:
    versions = client.call(
        ApiVersionsRequest(version=3, client_software_name="t", client_software_version="1"),
        3,
        ApiVersionsResponse,
    )
    ranges = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
    assert ranges[48] == (0, 1) and ranges[49] == (0, 1)
    metadata = client.call(MetadataRequest(version=1, topics=[]), 1, MetadataResponse)
    assert [b.node_id for b in metadata.brokers] == [0, 1, 2]


@pytest.mark.parametrize("version", [0, 1])
def test_describe_everything_and_by_filter(client: RawClient, version: int) -> None:
    everything = describe(client, version, [], False)
    assert everything.error_code == 0
    assert {entry.entity: dict(entry.values) for entry in everything.entries} == {
        (("client-id", "pump"),): {"producer_byte_rate": 1048576.0},
        (("user", "alice"), ("client-id", None)): {"consumer_byte_rate": 2048.0},
        (("ip", "10.0.0.1"),): {"connection_creation_rate": 5.0},
    }
    assert describe(client, version, [], True).entries == ()
    default_client = describe(client, version, [FilterComponent("client-id", MATCH_DEFAULT, None)], False)
    assert [e.entity for e in default_client.entries] == [(("user", "alice"), ("client-id", None))]
    exact = describe(client, version, [FilterComponent("client-id", MATCH_EXACT, "pump")], True)
    assert len(exact.entries) == 1
    unknown = describe(client, version, [FilterComponent("group", MATCH_EXACT, "g")], False)
    assert (unknown.error_code, unknown.entries) == (35, None)


@pytest.mark.parametrize("version", [0, 1])
def test_alter_sets_removes_and_validates(
    cluster: QuotaBrokerDouble, client: RawClient, version: int
) -> None:
    entries = [
        AlterEntry((("client-id", "pump"),), (QuotaOp("producer_byte_rate", 0.0, True),)),
        AlterEntry((("user", "bob"),), (QuotaOp("request_percentage", 25.0, False),)),
        AlterEntry((("user", "eve"),), (QuotaOp("bogus", 1.0, False),)),
    ]
    body = client.call_body(ALTER_CLIENT_QUOTAS, version, encode_alter_request(version, entries, True))
    assert [r.error_code for r in decode_alter_response(version, body).results] == [0, 0, 42]
    assert frozenset({("client-id", "pump")}) in cluster.quotas  # validate_only changed nothing
    body = client.call_body(ALTER_CLIENT_QUOTAS, version, encode_alter_request(version, entries, False))
    assert [r.error_code for r in decode_alter_response(version, body).results] == [0, 0, 42]
    assert frozenset({("client-id", "pump")}) not in cluster.quotas
    assert cluster.quotas[frozenset({("user", "bob")})] == {"request_percentage": 25.0}
