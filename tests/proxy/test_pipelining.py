"""Pipelined requests through the proxy: answers come back in request order, acks=0 Produce gets none and
still lands, and nothing is lost."""

from __future__ import annotations

import struct

import pytest
from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import ProduceRequest
from mock_cluster_process import MockCluster
from proxy_process import ProxyProcess
from rawclient import RawClient
from records import one_batch_produce
from throttle_harness import metric_value

pytestmark = pytest.mark.slow  # end to end: real processes, real clients

TOPIC = "pipeline"
RECORDS_PER_BATCH = 5


@pytest.fixture(scope="module")
def cluster():
    with MockCluster(brokers=3, topics={TOPIC: 1}) as c:
        yield c


# A produce quota the pipeline below overruns (a 2 x 1 s x 2 kB/s bucket against ~6 kB of requests), so
# throttles mute the connection mid-pipeline and requests already read are held, then released in order.
THROTTLING = {
    "quota": {
        "sensor": "token_bucket",
        "window": {"samples": 2, "size_seconds": 1},
        "entities": [{"client_id": "raw-test", "producer_byte_rate": 2000}],
    }
}


@pytest.fixture(scope="module", params=["unthrottled", "throttled"])
def proxy(cluster, request):
    with ProxyProcess(
        cluster.bootstrap, extra_config=THROTTLING if request.param == "throttled" else None
    ) as p:
        yield p


def produce_request(acks: int, batch_no: int) -> ProduceRequest:
    values = [b"batch-%d-record-%d" % (batch_no, i) for i in range(RECORDS_PER_BATCH)]
    return one_batch_produce(TOPIC, values, keys=[b"k%d" % i for i in range(RECORDS_PER_BATCH)], acks=acks)


def latest_offset(client: RawClient) -> int:
    partition = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, timestamp=-1)
    request = ListOffsetsRequest[1](
        replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(name=TOPIC, partitions=[partition])]
    )
    response = client.call(request, 1, ListOffsetsResponse)
    (topic,) = response.topics
    (part,) = topic.partitions
    assert part.error_code == 0
    return part.offset


def test_pipelined_answers_in_order_and_acks0_lands(proxy) -> None:
    # Partition 0 of a single-replica topic lives on broker 1; talk to the proxy's listener for it.
    with RawClient("127.0.0.1", proxy.broker_port(1)) as client:
        start = latest_offset(client)
        expected: list[int] = []
        wire = []
        batches = 0
        for i in range(80):
            kind = i % 4
            if kind == 0:
                correlation_id, data = client.encode(ApiVersionsRequest[0](), 0)
            elif kind == 1:
                correlation_id, data = client.encode(MetadataRequest[1](topics=[]), 1)
            else:
                acks = 0 if kind == 2 else 1
                correlation_id, data = client.encode(produce_request(acks, batches), 3)
                batches += 1
                if acks == 0:
                    wire.append(data)
                    continue
            expected.append(correlation_id)
            wire.append(data)
        client.sock.sendall(b"".join(wire))
        answered = [struct.unpack_from(">i", client.receive_frame(), 4)[0] for _ in expected]
        assert answered == expected
        assert latest_offset(client) - start == batches * RECORDS_PER_BATCH
    if "quota" in proxy.config_path.read_text():
        throttles = metric_value(proxy.metrics_text(), "sluice_throttles_total", type="Produce")
        assert throttles > 0, "the throttled variant never throttled: it tests nothing more"
