"""Shared fixtures: the test broker (librdkafka's mock cluster) and the real proxy in front of it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sluice.proxy.tools.mock_cluster_process import MockCluster
from sluice.proxy.tools.proxy_process import ProxyProcess

CLIENT_TOPICS = {"roundtrip-confluent": 6, "roundtrip-aiokafka": 6, "roundtrip-kafkapython": 6, "faults": 6}


@pytest.fixture(scope="module")
def cluster() -> Iterator[MockCluster]:
    with MockCluster(brokers=3, topics=CLIENT_TOPICS) as c:
        yield c


@pytest.fixture(scope="module")
def proxy(cluster: MockCluster) -> Iterator[ProxyProcess]:
    with ProxyProcess(cluster.bootstrap) as p:
        yield p
