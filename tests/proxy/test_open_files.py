"""When file descriptors run short, the proxy stops accepting instead of breaking connections it serves,
says so once with the numbers, and resumes when they come back (issue 27 item 4).

The proxy's open-file limit is lowered (prlimit on the running process) to what it holds now, its
`reserved_open_files`, and room for ALLOWED connections of two descriptors each."""

from __future__ import annotations

import os
import resource
import socket
import struct
from collections.abc import Iterator

import pytest
from mock_cluster_process import MockCluster
from proxy_process import ProxyProcess
from throttle_harness import metric_value

from sluice.protocol.headers import encode_request

pytestmark = pytest.mark.slow  # starts processes (the test broker, the proxy)

RESERVED = 32
ALLOWED = 20
API_VERSIONS_V0 = encode_request(18, 0, 7, "open-files", b"")


@pytest.fixture(scope="module")
def cluster() -> Iterator[MockCluster]:
    with MockCluster(brokers=1) as running:
        yield running


def answered(sock: socket.socket, timeout_s: float) -> bool:
    """Send ApiVersions; whether its answer comes within `timeout_s` (False: it is not being served)."""
    sock.sendall(API_VERSIONS_V0)
    sock.settimeout(timeout_s)
    try:
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = sock.recv(65536)
            assert chunk, "the proxy closed a connection instead of answering it"
            data += chunk
    except TimeoutError:
        return False
    return struct.unpack(">i", data[4:8])[0] == 7


def receive_answer(sock: socket.socket, timeout_s: float = 10.0) -> None:
    sock.settimeout(timeout_s)
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
        chunk = sock.recv(65536)
        assert chunk, "the proxy closed a waiting connection"
        data += chunk


def test_accepting_pauses_while_descriptors_are_short_and_resumes_when_they_come_back(cluster) -> None:
    with ProxyProcess(cluster.bootstrap, extra_config={"reserved_open_files": RESERVED}) as proxy:
        pid = proxy.process.pid
        limit = len(os.listdir(f"/proc/{pid}/fd")) + RESERVED + 2 * ALLOWED
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, limit))
        since = len(proxy.events())
        # Clients one after another until one is not served: the kernel completes its connect (the accept
        # queue), but the proxy does not accept it. Before, each took two descriptors until none was left
        # and connections failed with "Too many open files".
        served: list[socket.socket] = []
        while True:
            sock = socket.create_connection(("127.0.0.1", proxy.port))
            if not answered(sock, 2.0):
                waiting = sock
                break
            served.append(sock)
            # What the process held of its own when the limit was set may have included a descriptor or
            # two of passing work (a scrape, a connect to the broker), which gives room back when it ends;
            # the pause's own numbers, checked below, say whether the line held.
            assert len(served) <= ALLOWED + 2, "the proxy accepted more connections than it has room for"
        assert len(served) >= ALLOWED - 4  # what it holds of its own may have grown a little meanwhile
        paused = proxy.wait_for_event("accepting_paused", since=since)
        assert (paused["limit"], paused["reserved"]) == (limit, RESERVED)
        assert paused["open_files"] + 2 > limit - RESERVED, paused
        assert metric_value(proxy.metrics_text(), "sluice_accepting_paused") == 1
        assert all(answered(sock, 10) for sock in served)  # those already served go on being served
        for sock in served[: len(served) // 2]:
            sock.close()
        proxy.wait_for_event("accepting_resumed", since=since)
        receive_answer(waiting)  # accepted at last: the request it sent while it waited is answered
        closes = [e for e in proxy.events()[since:] if e.get("event") == "connection_closed"]
        assert {e["cause"] for e in closes} == {"client_closed"}, closes
        assert metric_value(proxy.metrics_text(), "sluice_accepting_paused") == 0
        for sock in [*served, waiting]:
            sock.close()
