"""A listener that cannot open (issue 14 item 1, and item 7's port collisions found when nodes are known).

At start-up any listener failure stops the proxy with an exit code and the address named. A broker learnt
later whose listener cannot open is never advertised: clients (confluent-kafka here) see its partitions as
leaderless, nothing reaches whatever holds that port, and the proxy says so in its log and its metrics.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from confluent_kafka import KafkaError, Producer
from doubles.sasl_broker import SaslBrokerDouble
from mock_cluster_process import MockCluster
from proxy_process import ProxyProcess
from throttle_harness import metric_value
from waiting import wait_until

from sluice.proxy.listeners.ports import free_port_block

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow  # starts processes (the test broker, the proxy)


@contextlib.contextmanager
def held_port(port: int) -> Iterator[socket.socket]:
    """Another process's listener on `port` (what the issue found: a relay holding the broker port)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(16)
    sock.setblocking(False)
    try:
        yield sock
    finally:
        sock.close()


def accepted(sock: socket.socket) -> int:
    count = 0
    while True:
        try:
            conn, _ = sock.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


def run_to_exit(tmp_path: Path, config: dict, timeout_s: float = 40) -> tuple[int, list[dict], str]:
    """`sluice run` until it exits by itself: (exit code, JSON log events, stderr)."""
    path = tmp_path / "sluice.yaml"
    path.write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [sys.executable, "-m", "sluice.proxy", "run", "--config", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    events = []
    for line in result.stderr.splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            events.append(json.loads(line))
    return result.returncode, events, result.stderr


def proxy_config(cluster: MockCluster, port: int, **extra: object) -> dict:
    return {
        "listen": f"127.0.0.1:{port}",
        "broker_port_base": port + 10,
        "upstream": {"bootstrap": cluster.bootstrap.split(",")},
        "shutdown_timeout_s": 2,
        **extra,
    }


def test_a_taken_bootstrap_port_exits_1_naming_the_address(tmp_path: Path, cluster: MockCluster) -> None:
    port = free_port_block(16)
    with held_port(port):
        code, events, stderr = run_to_exit(tmp_path, proxy_config(cluster, port))
    assert code == 1
    assert f"127.0.0.1:{port}" in stderr
    assert any(e.get("event") == "startup_failed" for e in events)


def test_a_taken_broker_port_at_start_up_exits_1_naming_the_address(tmp_path, cluster: MockCluster) -> None:
    port = free_port_block(16)
    with held_port(port + 12) as other:  # node 2's port
        code, events, _stderr = run_to_exit(tmp_path, proxy_config(cluster, port))
        assert accepted(other) == 0
    assert code == 1
    failed = [e for e in events if e.get("event") == "startup_failed"]
    assert failed and failed[0]["addresses"] == [f"127.0.0.1:{port + 12}"]
    assert any(e.get("event") == "shutdown_complete" for e in events)


@pytest.mark.parametrize(
    ("extra", "key", "why"),
    [
        # base + node id beyond 65535 (node 1 fits, nodes 2 and 3 do not)
        ({"broker_port_base": 65534}, "broker_ports.2", "beyond 65535"),
        # the metrics port is node 1's derived port
        ("metrics_on_node_1", "broker_ports.1", "the metrics port"),
        # an explicit entry takes node 1's derived port
        ("explicit_on_node_1", "broker_ports.1", "an explicit broker_ports entry"),
    ],
)
def test_a_port_collision_found_at_start_up_exits_2_naming_the_key(
    tmp_path: Path, cluster: MockCluster, extra: object, key: str, why: str
) -> None:
    port = free_port_block(16)
    if extra == "metrics_on_node_1":
        extra = {"metrics": {"listen": f"127.0.0.1:{port + 11}"}}
    elif extra == "explicit_on_node_1":
        extra = {"broker_ports": {3: port + 11}}
    code, events, stderr = run_to_exit(tmp_path, proxy_config(cluster, port, **extra))
    assert code == 2, stderr
    failed = [e for e in events if e.get("event") == "startup_failed"]
    assert failed, stderr
    assert key in failed[0]["error"] and why in failed[0]["error"]


# ---- a broker learnt later, from a client's answer ------------------------------------------------

TOPIC = "unadvertised"
USERS = {"alice": "alice-pw-1b2c"}


@pytest.fixture(scope="module")
def sasl_cluster() -> Iterator[MockCluster]:
    with MockCluster(brokers=2, topics={TOPIC: 4}) as c:
        yield c


@pytest.fixture(scope="module")
def sasl_upstream(sasl_cluster: MockCluster) -> Iterator[SaslBrokerDouble]:
    # It refuses the proxy's own unauthenticated Metadata request, so brokers are learnt from clients.
    with SaslBrokerDouble(sasl_cluster.bootstrap, USERS) as double:
        yield double


def test_a_broker_learnt_later_without_a_listener_is_never_advertised(sasl_upstream) -> None:
    base = free_port_block(8)
    with (
        held_port(base + 2) as other,
        ProxyProcess(
            sasl_upstream.bootstrap, extra_config={"broker_port_base": base}, wait_for_brokers=False
        ) as proxy,
    ):
        errors: list[KafkaError] = []
        delivered: dict[int, int] = {}
        failed: dict[int, int] = {}

        def on_delivery(err, msg) -> None:
            bucket = delivered if err is None else failed
            bucket[msg.partition()] = bucket.get(msg.partition(), 0) + 1

        producer = Producer(
            {
                "bootstrap.servers": proxy.bootstrap,
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": "alice",
                "sasl.password": USERS["alice"],
                "message.timeout.ms": 4000,
                "error_cb": errors.append,
            }
        )
        metadata = producer.list_topics(TOPIC, timeout=10)
        assert sorted(metadata.brokers) == [1], "node 2 was advertised"
        leaders = {p.id: p.leader for p in metadata.topics[TOPIC].partitions.values()}
        assert set(leaders.values()) == {1, 2}, leaders  # the mock spreads leaders over both nodes
        for partition in leaders:
            for _ in range(5):
                producer.produce(TOPIC, b"v" * 100, partition=partition, on_delivery=on_delivery)
        producer.flush(20)

        # Node 1's partitions work; node 2's wait (then time out) instead of going anywhere else.
        assert delivered == {p: 5 for p, leader in leaders.items() if leader == 1}
        assert failed == {p: 5 for p, leader in leaders.items() if leader == 2}
        assert accepted(other) == 0, "a client was sent to the process holding node 2's port"

        event = proxy.wait_for_event("broker_not_advertised", node_id=2)
        assert event["address"] == f"127.0.0.1:{base + 2}"
        metrics = proxy.metrics_text()
        assert metric_value(metrics, "sluice_brokers_not_advertised") == 1
        assert metric_value(metrics, "sluice_broker_listener_failures_total") >= 1
        assert proxy.process.poll() is None

        # Once the port is free again the node is advertised on the next answer after the retry period
        # (10 s): asked again and again until an answer names it.
        other.close()
        wait_until(
            lambda: sorted(producer.list_topics(TOPIC, timeout=10).brokers) == [1, 2],
            "node 2 advertised again",
            interval_s=0.5,
        )
        proxy.wait_for_event("broker_advertised_again", node_id=2)
