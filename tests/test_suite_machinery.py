"""The test suite's own machinery: xdist groups hold (`make test` runs Spark, and each fleet sensor, one
test at a time on one worker), and a test's proxies leave their configuration and log where the README's
"When a test fails" says."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
from pathlib import Path

import proxy_process
import pytest
from kafka.protocol.consumer import FetchRequest
from mock_cluster_process import MockCluster
from rawclient import RawClient

from sluice.proxy.listeners.ports import wait_for_port

GROUPED = """
import os
import pytest

@pytest.mark.xdist_group("together")
@pytest.mark.parametrize("n", range(6))
def test_grouped(n, tmp_path_factory):
    with open(os.environ["WORKERS_SEEN"], "a") as seen:
        seen.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")

@pytest.mark.parametrize("n", range(6))
def test_loose(n):
    pass
"""


@pytest.mark.slow  # starts a pytest with three workers; it guards `make test`'s groups
def test_an_xdist_group_runs_on_one_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest 9.2 with xdist 3.8 spread a group's tests over every worker without a word (pyproject.toml
    pins pytest below 9.2 for it)."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    seen = tmp_path / "workers.txt"
    monkeypatch.setenv("WORKERS_SEEN", str(seen))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "3", "--dist", "loadgroup", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    workers = seen.read_text().split()
    assert len(workers) == 6 and len(set(workers)) == 1, workers


def test_with_sluice_test_logs_a_proxys_folder_is_kept_and_named_after_its_test(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(proxy_process.KEEP_LOGS_ENV, str(tmp_path / "logs"))
    folder, temporary = proxy_process.work_dir()
    assert temporary is None  # nothing removes it
    assert folder.parent == tmp_path / "logs"
    assert folder.name.startswith("tests_test_suite_machinery.py__test_with_sluice_test_logs_")


def test_without_it_the_folder_is_temporary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(proxy_process.KEEP_LOGS_ENV, raising=False)
    folder, temporary = proxy_process.work_dir()
    assert temporary is not None and folder.is_dir()
    temporary.cleanup()
    assert not folder.exists()


def test_a_port_taken_by_another_program_before_the_bind_is_not_mistaken_for_the_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CI, 2026-11-27: a proxy's port was taken between the free-port check and the proxy's bind; the start
    probed the port, found the other program's listener and handed the test a proxy that had exited with
    "Address already in use". The start now waits for the proxy's own `listener_opened` line and retries."""
    from sluice.proxy.tools import demo_processes

    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    blocks = iter([taken])
    real_block = demo_processes.free_port_block
    monkeypatch.setattr(
        demo_processes, "free_port_block", lambda size: next(blocks, None) or real_block(size)
    )
    try:
        with proxy_process.ProxyProcess("127.0.0.1:1", metrics=False, wait_for_brokers=False) as proxy:
            assert proxy.port != taken
            assert proxy.process.poll() is None
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=5):
                pass
    finally:
        squatter.close()


# How long the first proxy's drain lasts (a long poll it forwarded waits this long at the broker) and how
# slow every broker answers (so that the long poll is forwarded before the discovery's Metadata comes back).
LONG_POLL_MS = 2000
BROKER_RTT_MS = 300


def hold_a_long_poll(port: int) -> None:
    """Connect to the proxy's bootstrap listener as soon as it opens (before its discovery's Metadata
    answer) and keep a Fetch in flight there: a proxy that stops then drains for LONG_POLL_MS, its metrics
    still answering, as a loaded machine in CI made it linger by chance."""
    partition = FetchRequest.FetchTopic.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1024)
    request = FetchRequest[4](
        replica_id=-1,
        max_wait_ms=LONG_POLL_MS,
        min_bytes=1,
        max_bytes=1024,
        isolation_level=0,
        topics=[FetchRequest.FetchTopic(topic="quiet", partitions=[partition])],
    )
    wait_for_port(port)
    with RawClient("127.0.0.1", port) as client:
        client.send(request, 4)
        with contextlib.suppress(OSError):
            client.receive_frame()  # the answer, or the end of the connection


@pytest.mark.slow  # two proxies in front of a slowed broker, the first draining for LONG_POLL_MS
@pytest.mark.parametrize("metrics", [True, False], ids=["by-metrics", "by-log"])
def test_a_broker_port_taken_at_start_up_gets_the_proxy_a_new_block(
    monkeypatch: pytest.MonkeyPatch, metrics: bool
) -> None:
    """CI: a test's proxy said READY=1 and its metrics showed a broker listener open, so the start handed
    it to the test; but another broker's port was taken (parallel workers draw blocks at random), so the
    start-up discovery stopped the proxy (exit 1, as designed) and the test's connections were refused.
    The start now waits until every broker the discovery found has its listener, and when the proxy exits
    for a taken port it tries a new block, with metrics or without (by the log)."""
    from sluice.proxy.tools import demo_processes

    real_block = demo_processes.free_port_block
    first = real_block(16)
    drawn: list[int] = []
    holder = threading.Thread(target=hold_a_long_poll, args=(first,), daemon=True)

    def block(size: int) -> int:
        drawn.append(real_block(size) if drawn else first)
        if len(drawn) == 1:
            holder.start()
        return drawn[-1]

    monkeypatch.setattr(demo_processes, "free_port_block", block)
    squatter = socket.socket()
    # broker_port_base is the block's third port; node 2's, so node 1's listener opens before it fails.
    squatter.bind(("127.0.0.1", first + 2 + 2))
    squatter.listen()
    try:
        with MockCluster(brokers=3, topics={"quiet": 1}) as cluster:
            for broker_id in range(1, 4):
                cluster.set_rtt(broker_id, BROKER_RTT_MS)
            with proxy_process.ProxyProcess(cluster.bootstrap, metrics=metrics) as proxy:
                assert drawn[0] == first and proxy.port == drawn[-1] != first
                for node_id in range(1, 4):
                    with socket.create_connection(("127.0.0.1", proxy.broker_port(node_id)), timeout=5):
                        pass
                assert proxy.process.poll() is None
    finally:
        squatter.close()
        holder.join(10)


def test_a_metrics_port_taken_at_start_up_gets_the_proxy_a_new_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """CI: a test's proxy exited with 1 before serving (the error did not show its log; now it does). One way
    to it, reproduced here: the block's metrics port (its second) is taken, the metrics endpoint's bind said
    so in asyncio's words ("address already in use", lower case), and the start's retry, which looks for
    "Address already in use", gave up on the first block. The endpoint now says it as every listener does."""
    from sluice.proxy.tools import demo_processes

    real_block = demo_processes.free_port_block
    first = real_block(16)
    drawn: list[int] = []

    def block(size: int) -> int:
        drawn.append(real_block(size) if drawn else first)
        return drawn[-1]

    monkeypatch.setattr(demo_processes, "free_port_block", block)
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", first + 1))  # the block's metrics port
    squatter.listen()
    try:
        with MockCluster(brokers=1) as cluster, proxy_process.ProxyProcess(cluster.bootstrap) as proxy:
            assert drawn[0] == first and proxy.port == drawn[-1] != first
            assert proxy.metrics_port == proxy.port + 1
            proxy.metrics_text()  # its metrics answer on the new block's port
    finally:
        squatter.close()
