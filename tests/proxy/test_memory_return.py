"""Memory comes back after a spike of connections (issue 27 item 3): a real `sluice run` process takes
idle connections (each answered once, then silent) and half-open ones (the start of a request, then
nothing), all of which then close, and the proxy logs `memory_returned`. Before, each closed connection
stayed in memory until a full run of the cyclic collector, and glibc kept what was freed: 9,900 idle
connections took RSS from 43 to 146 MB, and it stayed at 148 MB.

As started (`sluice run` takes Python's objects from glibc's malloc: proxy/allocator.py), RSS comes
back within BACK_WITHIN_MB of where it started. With Python's own allocator, which an operator may choose
(PYTHONMALLOC=pymalloc), it comes back within PYMALLOC_BACK_WITHIN_MB: pymalloc frees a 1 MiB arena only
when every object in it is freed; renewing the event loop's free lists and forgetting the spike's client
ids frees the arenas their spike-born objects held, but objects the proxy keeps making in the spike's
pools keep some of the others (docs/architecture.md)."""

from __future__ import annotations

import contextlib
import resource
import socket
import urllib.error
from collections.abc import Iterator

import pytest
from mock_cluster_process import MockCluster
from proxy_process import ProxyProcess
from throttle_harness import metric_value
from waiting import wait_until

from sluice.protocol.headers import encode_request

pytestmark = pytest.mark.slow  # starts processes (the test broker, the proxy)

IDLE = 3_000
HALF_OPEN = 2_000
BACK_WITHIN_MB = 20
# Measured here (17 runs, load 2-8): 24-33 MB above the start (median 25-26); 38-39 without forgetting the
# client ids, 36-41 without renewing the free lists (tested themselves in test_free_list_renewal.py and
# test_memory_return_trigger.py). The 20 MB of BACK_WITHIN_MB is not met with pymalloc: what pins its
# arenas is in docs/architecture.md.
PYMALLOC_BACK_WITHIN_MB = 35
# The start of a 100 kB Fetch v4 request (read whole: the client-quota filter reads Fetch bodies): the
# proxy holds it while the rest is awaited.
HALF_REQUEST = (100_000).to_bytes(4, "big") + b"\x00\x01\x00\x04\x00\x00\x00\x01\xff\xff" + b"x" * 3_000


def api_versions_v0(client: int) -> bytes:
    """An ApiVersions v0 request from the `client`th idle client: each has its own client id, as the
    clients of a real spike would (the proxy caches the ids it decodes)."""
    return encode_request(18, 0, 7, f"idle-{client}", b"")


@pytest.fixture(scope="module")
def cluster() -> Iterator[MockCluster]:
    with MockCluster(brokers=1) as running:
        yield running


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def wait_for_metric(proxy: ProxyProcess, name: str, value: float, timeout_s: float = 60.0) -> None:
    wait_until(lambda: scraped(proxy, name) == value, f"{name} reaching {value}", timeout_s, interval_s=0.1)


def scraped(proxy: ProxyProcess, name: str) -> float | None:
    """The metric's value, or None when a scrape is not answered within its 5 s: a proxy taking thousands
    of connections at once on a loaded machine may not serve one in time, and the wait then asks again."""
    try:
        return metric_value(proxy.metrics_text(), name)
    except (TimeoutError, urllib.error.URLError):  # URLError: a connect that timed out
        return None


@pytest.mark.parametrize("allocator", ["as started", "pymalloc"])
def test_rss_returns_after_a_spike_of_idle_and_half_open_connections(cluster, allocator, monkeypatch) -> None:
    if allocator == "as started":
        monkeypatch.delenv("PYTHONMALLOC", raising=False)
    else:
        monkeypatch.setenv("PYTHONMALLOC", allocator)  # the proxy process's: the operator's choice
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard > IDLE + HALF_OPEN + 100, "the test needs a descriptor per connection"
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    # Whatever happens, the test's 5,000 sockets close and the limit comes back: a failed run must not
    # leave a worker of the suite with descriptors the next tests would trip on.
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(resource.setrlimit, resource.RLIMIT_NOFILE, (soft, hard))
        sockets: list[socket.socket] = []
        cleanup.callback(lambda: [sock.close() for sock in sockets])
        spike_and_return(cluster, allocator, sockets)


def open_spike(proxy: ProxyProcess, sockets: list[socket.socket]) -> None:
    """Open the idle connections (each answered once) and the half-open ones, kept in `sockets`, until the
    proxy counts them all."""
    idle = [socket.create_connection(("127.0.0.1", proxy.port)) for _ in range(IDLE)]
    sockets += idle
    for client, sock in enumerate(idle):
        sock.sendall(api_versions_v0(client))
    for sock in idle:  # answered: each has its upstream connection, then stays silent
        sock.settimeout(30)
        assert sock.recv(65536)
    half_open = [socket.create_connection(("127.0.0.1", proxy.port)) for _ in range(HALF_OPEN)]
    sockets += half_open
    for sock in half_open:
        sock.sendall(HALF_REQUEST)
    wait_for_metric(proxy, "sluice_connections_active", IDLE + HALF_OPEN)


def spike_and_return(cluster: MockCluster, allocator: str, sockets: list[socket.socket]) -> None:
    """Open the idle and half-open connections (kept in `sockets`), close them, and measure RSS."""
    # Half-open connections have not proven themselves: they would be closed after 10 s of a frame.
    patient = {"sasl": {"unauthenticated_frame_timeout_s": 600}}
    with ProxyProcess(cluster.bootstrap, extra_config=patient, log_level="info") as proxy:
        pid = proxy.process.pid
        start = rss_mb(pid)
        in_use = next(e for e in proxy.events() if e.get("event") == "process_limits")["python_allocator"]
        assert in_use == ("malloc" if allocator == "as started" else allocator)
        open_spike(proxy, sockets)
        peak = rss_mb(pid)
        since = len(proxy.events())
        for sock in sockets:
            sock.close()
        wait_for_metric(proxy, "sluice_connections_active", 0)

        # Collected and trimmed when the count fell, and once more when the connections finished closing
        # (both may be logged before the count reads 0 on a loaded machine: they are counted from `since`).
        def returns() -> list[dict[str, object]]:
            return [e for e in proxy.events()[since:] if e.get("event") == "memory_returned"]

        wait_until(lambda: len(returns()) >= 2, "the second memory_returned event", 60, interval_s=0.1)
        returned = returns()[1]
        after = rss_mb(pid)
        print(f"\n{allocator}: RSS MB start {start:.0f}, peak {peak:.0f}, after {after:.0f} ({returned})")
        assert peak > start + 40  # the spike did take memory
        bound = BACK_WITHIN_MB if allocator == "as started" else PYMALLOC_BACK_WITHIN_MB
        assert after <= start + bound, (start, peak, after)
