"""Shared fixtures: the test broker (librdkafka's mock cluster) and the real proxy in front of it.

Also: librdkafka's own log lines go to Python logging (quiet_librdkafka), and a test that uses the
`cluster` or `proxy` fixture is marked `slow` (`make test-fast` leaves those out), so a new end-to-end
test is slow even if its module forgets to say so.

Hypothesis runs the `ci` profile unless HYPOTHESIS_PROFILE names another: the same examples on every run
(derandomize), so a property test passes or fails the same way each time and a failure reproduces with a
plain rerun; no deadline, since the time an example takes on a loaded two-core machine says nothing
about the code (a decoder that must not go quadratic says so with its own deadline). The `explore`
profile searches afresh on every run (random examples, more of them, the local example database);
an example it finds failing is kept in its test as an `@example`, so `ci` runs it from then on.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import quiet_librdkafka  # noqa: F401  (imported before any test module takes a client class)
from hypothesis import HealthCheck, settings
from mock_cluster_process import MockCluster
from proxy_process import ProxyProcess

CLIENT_TOPICS = {"roundtrip-confluent": 6, "roundtrip-aiokafka": 6, "roundtrip-kafkapython": 6, "faults": 6}
PROCESS_FIXTURES = frozenset({"cluster", "proxy"})

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "explore", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> Iterator[None]:
    """Marks the end-to-end tests `slow` (before `-m` selects), then, once every other hook has run,
    puts the slow tests first and the others after them in their usual order: xdist hands tests out in
    this order (its groups first, the largest first), so the end-to-end tests start while every worker
    is free and the many short tests fill in around the last of them, instead of a long test starting
    last and holding the run up alone."""
    for item in items:
        if PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    yield
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="module")
def cluster() -> Iterator[MockCluster]:
    with MockCluster(brokers=3, topics=CLIENT_TOPICS) as c:
        yield c


@pytest.fixture(scope="module")
def proxy(cluster: MockCluster) -> Iterator[ProxyProcess]:
    with ProxyProcess(cluster.bootstrap) as p:
        yield p
