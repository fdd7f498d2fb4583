"""Bad input, broker faults and shutdown: one bad connection costs only itself, and nothing else notices."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from proxy_process import ProxyProcess
from rawclient import RawClient
from throttle_harness import FlatOutProducer, metric_value
from waiting import wait_until

from sluice.proxy.listeners.ports import free_port_block, wait_for_port

pytestmark = pytest.mark.slow  # end to end: real processes, real clients

REPO = Path(__file__).resolve().parents[2]

BAD_INPUTS = {
    # A browser pointed at the port: "GET " read as a length is ~1.1 GB, far over max_frame_bytes.
    "garbage": (b"GET / HTTP/1.1\r\nHost: kafka\r\n\r\n", "frame_too_large"),
    "negative_length": (b"\xff\xff\xff\xfe" + b"\x00" * 16, "negative_frame_length"),
    "two_gib_length": (b"\x7f\xff\xff\xff" + b"\x00" * 16, "frame_too_large"),
    "truncated_frame": (b"\x00\x00\x00\x64" + b"\x00\x12\x00\x00\x00\x00\x00\x01\x00", "truncated_frame"),
}


def api_versions_ok(client: RawClient) -> bool:
    response = client.call(ApiVersionsRequest[0](), 0, ApiVersionsResponse)
    return response.error_code == 0 and len(response.api_keys) > 0


def steady_producer(bootstrap: str) -> FlatOutProducer:
    """A healthy confluent-kafka client producing small records the whole time the bad inputs arrive."""
    return FlatOutProducer(bootstrap, "faults", "steady", record_size=16, pause_s=0.005, **{"linger.ms": 1})


@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_bad_frame_closes_only_that_connection(proxy, name: str) -> None:
    payload, reason = BAD_INPUTS[name]
    steady = steady_producer(proxy.bootstrap)
    steady.start()
    with RawClient("127.0.0.1", proxy.port) as healthy, RawClient("127.0.0.1", proxy.port) as bad:
        assert api_versions_ok(healthy)
        # After a first request, as every client's: the limits before it (test_request_limits.py) apart.
        assert api_versions_ok(bad)
        bad_peer = "{}:{}".format(*bad.sock.getsockname()[:2])
        bad.sock.sendall(payload)
        if name == "truncated_frame":
            bad.sock.shutdown(socket.SHUT_WR)
        assert bad.is_closed_by_peer(), "the proxy kept the bad connection open"
        event = proxy.wait_for_event("protocol_error", peer=bad_peer)
        assert event["reason"] == reason
        assert api_versions_ok(healthy), "a healthy connection was disturbed"
    delivered = steady.delivered
    wait_until(lambda: steady.delivered > delivered, "the steady producer delivering after the bad input")
    steady.stop()
    assert steady.errors == []
    assert steady.delivered == len(steady.sent) > 0
    assert proxy.process.poll() is None, "the proxy process died"


def test_broker_down_and_up(proxy, cluster) -> None:
    steady = steady_producer(proxy.bootstrap)
    steady.start()
    wait_until(lambda: steady.delivered > 0, "the steady producer delivering")
    for node in (1, 2):
        cluster.broker_down(node)
        time.sleep(1.5)  # the outage itself: the producer's requests to that broker meet it meanwhile
        cluster.broker_up(node)
        wait_until(
            lambda before=steady.delivered: steady.delivered > before, "deliveries after the broker came back"
        )
    steady.stop()
    assert proxy.process.poll() is None
    assert steady.errors == []
    assert steady.delivered == len(steady.sent) > 0
    # A fresh client after the outage works as well.
    with RawClient("127.0.0.1", proxy.port) as client:
        assert api_versions_ok(client)


def run_sluice(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sluice.proxy", *args], cwd=REPO, capture_output=True, text=True, timeout=30
    )


@pytest.mark.parametrize(
    ("yaml_text", "flags", "key"),
    [
        (
            "listen: 127.0.0.1:9092\nupstream: {bootstrap: ['127.0.0.1:1']}\nlisten_port: 3\n",
            [],
            "listen_port",
        ),
        ("", ["--listen", "127.0.0.1:99999", "--upstream", "127.0.0.1:9092"], "listen"),
        ("", ["--listen", "127.0.0.1:9092"], "upstream.bootstrap"),
        (
            "listen: 127.0.0.1:9092\nupstream: {bootstrap: ['127.0.0.1:1']}\nidle_timeout_s: -1\n",
            [],
            "idle_timeout_s",
        ),
    ],
)
def test_bad_config_exits_2_naming_the_key(tmp_path, yaml_text: str, flags: list[str], key: str) -> None:
    args = ["run", *flags]
    if yaml_text:
        path = tmp_path / "bad.yaml"
        path.write_text(yaml_text)
        args += ["--config", str(path)]
    result = run_sluice(*args)
    assert result.returncode == 2, result
    assert key in result.stderr


def test_sigterm_lets_in_flight_requests_finish(cluster) -> None:
    with ProxyProcess(cluster.bootstrap) as proxy:
        try:
            with RawClient("127.0.0.1", proxy.port) as client:
                assert api_versions_ok(client)  # its upstream connection is open: a request goes on at once
                for node in (1, 2, 3):
                    cluster.set_rtt(node, 1500)
                correlation_id = client.send(MetadataRequest[1](topics=[]), 1)
                # The request is in flight (forwarded to the slow broker) before the stop is asked for.
                wait_until(
                    lambda: metric_value(proxy.metrics_text(), "sluice_requests_total", api="Metadata") >= 1,
                    "the Metadata request forwarded",
                )
                proxy.process.send_signal(15)
                data = client.receive_frame()
                assert int.from_bytes(data[4:8], "big") == correlation_id
                response = MetadataResponse[1].decode(data[8:])
                assert {b.port for b in response.brokers} <= {proxy.broker_port(n) for n in (1, 2, 3)}
                assert client.is_closed_by_peer()
            assert proxy.process.wait(15) == 0
        finally:
            for node in (1, 2, 3):
                cluster.set_rtt(node, 0)
        proxy.wait_for_event("shutdown_complete")


def test_idle_connection_is_closed(cluster) -> None:
    with ProxyProcess(cluster.bootstrap, extra_config={"idle_timeout_s": 0.5}) as proxy:
        with RawClient("127.0.0.1", proxy.port) as client:
            peer = "{}:{}".format(*client.sock.getsockname()[:2])
            assert api_versions_ok(client)
            assert client.is_closed_by_peer(timeout_s=10)
        proxy.wait_for_event("connection_closed", peer=peer, cause="idle_timeout")
        assert proxy.stop() == 0


def test_flags_alone_run_the_proxy(cluster) -> None:
    # The documented command line, no file: every flag reaches the config with its proper type.
    base = free_port_block(8)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "proxy",
            "run",
            "--upstream",
            cluster.bootstrap,
            "--listen",
            f"127.0.0.1:{base}",
            "--advertised-host",
            "127.0.0.1",
            "--broker-port-base",
            str(base + 1),
            "--metrics",
            f"127.0.0.1:{base + 7}",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_port(base)
        wait_for_port(base + 1 + 1)  # broker node 1's listener, opened after discovery
        with RawClient("127.0.0.1", base) as client:
            assert api_versions_ok(client)
    finally:
        process.send_signal(15)
        _out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
