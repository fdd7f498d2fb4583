"""Every Metadata and FindCoordinator version the proxy advertises answers with proxy addresses only."""

from __future__ import annotations

import pytest
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from rawclient import RawClient

from sluice.protocol.headers import encode_request

pytestmark = pytest.mark.slow  # end to end: real processes, real clients

METADATA, FIND_COORDINATOR = 3, 10


def advertised_range(proxy, api_key: int) -> range:
    with RawClient("127.0.0.1", proxy.port) as client:
        response = client.call(ApiVersionsRequest[0](), 0, ApiVersionsResponse)
    (entry,) = [k for k in response.api_keys if k.api_key == api_key]
    return range(entry.min_version, entry.max_version + 1)


def proxy_addresses(proxy) -> set[tuple[str, int]]:
    return {("127.0.0.1", proxy.broker_port(n)) for n in (1, 2, 3)}


def test_metadata_every_advertised_version(proxy, cluster) -> None:
    versions = advertised_range(proxy, METADATA)
    assert len(versions) > 5
    mock_ports = {port for _, port in cluster.addresses}
    for version in versions:
        with RawClient("127.0.0.1", proxy.port) as client:
            request = MetadataRequest[version](topics=[MetadataRequest.MetadataRequestTopic(name="faults")])
            response = client.call(request, version, MetadataResponse)
        brokers = {(b.host, b.port) for b in response.brokers}
        assert brokers == proxy_addresses(proxy), (version, brokers)
        assert not {port for _, port in brokers} & mock_ports
        topics = [t for t in response.topics if t.name == "faults"]
        assert topics and len(topics[0].partitions) == 6, version


@pytest.mark.parametrize("key_type", [0])
def test_find_coordinator_every_advertised_version(proxy, key_type: int) -> None:
    versions = advertised_range(proxy, FIND_COORDINATOR)
    assert len(versions) > 1
    for version in versions:
        with RawClient("127.0.0.1", proxy.port) as client:
            if version >= 4:
                request = FindCoordinatorRequest[version](key_type=key_type, coordinator_keys=["g1", "g2"])
            else:
                request = FindCoordinatorRequest[version](key="g1", key_type=key_type)
            response = client.call(request, version, FindCoordinatorResponse)
        if version >= 4:
            found = [(c.host, c.port) for c in response.coordinators if c.error_code == 0]
            assert len(found) == 2, (version, response)
        else:
            assert response.error_code == 0, (version, response)
            found = [(response.host, response.port)]
        assert set(found) <= proxy_addresses(proxy), (version, found)


def offered(proxy) -> dict[int, tuple[int, int]]:
    with RawClient("127.0.0.1", proxy.port) as client:
        response = client.call(ApiVersionsRequest[0](), 0, ApiVersionsResponse)
    return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}


def test_only_vetted_versions_are_offered_and_what_was_not_offered_is_refused(proxy, cluster) -> None:
    """The mock offers the KIP-951, KIP-848 and KIP-932 APIs: they come through, each at a version whose
    answers the proxy rewrites or that carries no address. A request beyond the offer closes its own
    connection, after answering what came before it, and no other."""
    from sluice.protocol.schema_table import KNOWN_APIS

    offer = offered(proxy)
    for api in ("Produce", "Fetch", "ConsumerGroupHeartbeat", "ShareGroupHeartbeat", "ShareFetch"):
        assert any(KNOWN_APIS[key].name == api for key in offer), api
    assert all(key in KNOWN_APIS and high <= KNOWN_APIS[key].versions[1] for key, (_l, high) in offer.items())
    assert offer[0][1] >= 10 and offer[1][1] >= 16  # NodeEndpoints versions, rewritten

    since = len(proxy.events())
    with RawClient("127.0.0.1", proxy.port) as bystander, RawClient("127.0.0.1", proxy.port) as refused:
        newest = offer[METADATA][1]
        body = bytes(MetadataRequest[newest](topics=[]).encode(version=newest))
        refused.send(MetadataRequest[newest](topics=[]), newest)  # answered: it was offered
        refused.sock.sendall(encode_request(METADATA, newest + 1, 99, "raw", body))  # was not
        assert refused.receive_frame()
        assert refused.is_closed_by_peer()
        event = proxy.wait_for_event("protocol_error", since=since, reason="unadvertised_api_version")
        assert event["detail"] == f"Metadata v{newest + 1}: the proxy offers up to v{newest}"
        response = bystander.call(ApiVersionsRequest[0](), 0, ApiVersionsResponse)
        assert response.error_code == 0


def test_an_answer_the_proxy_made_leaves_before_a_refused_request_behind_it_closes_the_connection(
    proxy,
) -> None:
    """DescribeClientQuotas (answered by the proxy itself: the mock lacks it) and a Vote v0 (never offered: a
    controllers' API) in one write: the answer arrives at once, then the connection closes."""
    from sluice.protocol.client_quota_codec import (
        DESCRIBE_CLIENT_QUOTAS,
        decode_describe_response,
        encode_describe_request,
    )
    from sluice.protocol.headers import response_header_size

    since = len(proxy.events())
    with RawClient("127.0.0.1", proxy.port) as client:
        describe = encode_request(DESCRIBE_CLIENT_QUOTAS, 0, 1, "raw", encode_describe_request(0, [], False))
        vote = encode_request(52, 0, 2, "raw", b"\x00" * 8)
        client.sock.sendall(describe + vote)
        frame = client.receive_frame()  # without the answer, the connection's 30 s grace would pass first
        body = frame[4 + response_header_size(DESCRIBE_CLIENT_QUOTAS, 0, frame) :]
        assert decode_describe_response(0, body).error_code == 0
        assert client.is_closed_by_peer()
    event = proxy.wait_for_event("protocol_error", since=since, reason="unadvertised_api_version")
    assert event["detail"] == "Vote v0: the proxy does not offer it"


def test_a_produce_newer_than_offered_is_refused_before_it_reaches_the_broker(proxy) -> None:
    """Produce v13 names topics by id, which topic quotas cannot read: the proxy offers up to v12, and a
    client that sends v13 anyway is refused as Kafka refuses an unsupported version, on its own connection."""
    import uuid

    from kafka.protocol.producer import ProduceRequest

    assert offered(proxy)[0][1] < 13
    topic = ProduceRequest.TopicProduceData(
        topic_id=uuid.UUID(int=1),
        partition_data=[ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=b"x" * 64)],
    )
    body = bytes(ProduceRequest[13](acks=1, timeout_ms=1000, topic_data=[topic]).encode(version=13))
    since = len(proxy.events())
    with RawClient("127.0.0.1", proxy.port) as client:
        client.sock.sendall(encode_request(0, 13, 5, "raw", body))
        assert client.is_closed_by_peer()
    event = proxy.wait_for_event("protocol_error", since=since, reason="unadvertised_api_version")
    assert event["side"] == "client"
    assert event["detail"] == "Produce v13: the proxy offers up to v12"
