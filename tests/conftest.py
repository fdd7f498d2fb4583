"""Shared fixtures: the test broker (librdkafka's mock cluster) and the real proxy in front of it.

Also: librdkafka's own log lines go to Python logging (quiet_librdkafka), and a test that uses the
`cluster` or `proxy` fixture is marked `slow` (`make test-fast` leaves those out), so a new end-to-end
test is slow even if its module forgets to say so.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import quiet_librdkafka  # noqa: F401  (imported before any test module takes a client class)

from sluice.proxy.tools.mock_cluster_process import MockCluster
from sluice.proxy.tools.proxy_process import ProxyProcess

CLIENT_TOPICS = {"roundtrip-confluent": 6, "roundtrip-aiokafka": 6, "roundtrip-kafkapython": 6, "faults": 6}
PROCESS_FIXTURES = frozenset({"cluster", "proxy"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="module")
def cluster() -> Iterator[MockCluster]:
    with MockCluster(brokers=3, topics=CLIENT_TOPICS) as c:
        yield c


@pytest.fixture(scope="module")
def proxy(cluster: MockCluster) -> Iterator[ProxyProcess]:
    with ProxyProcess(cluster.bootstrap) as p:
        yield p
