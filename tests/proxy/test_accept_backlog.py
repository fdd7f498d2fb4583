"""The accept queue is real and configurable.

`loop.create_server(sock=...)` used to call listen(100) on a socket bound with listen(1024), so with 3,000
connections arriving together 975 overflowed. Here a stopped proxy (SIGSTOP: it accepts nothing) shows the
kernel holding `listen_backlog` connections for it, and 10,000 clients connecting in bursts as large as
the accept queue are all accepted and answered.
"""

from __future__ import annotations

import contextlib
import os
import resource
import selectors
import signal
import socket
import struct
import time

from proxy_process import ProxyProcess
from throttle_harness import metric_value

from sluice.config.model import DEFAULT_LISTEN_BACKLOG, DEFAULT_RESERVED_OPEN_FILES
from sluice.protocol.headers import encode_request

CONNECTIONS = 10_000
API_VERSIONS_V0 = encode_request(18, 0, 7, "backlog", b"")


def established(port: int, count: int, expected: int) -> tuple[int, list[socket.socket]]:
    """Start `count` non-blocking connects at once; how many complete their handshake, counted until
    `expected` have and then for as long again (at least half a second): time in which more would have
    completed had the kernel had room for them, on a machine however loaded."""
    sockets = []
    for _ in range(count):
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port))
        sockets.append(sock)
    selector = selectors.DefaultSelector()
    for sock in sockets:
        selector.register(sock, selectors.EVENT_WRITE)
    done = 0
    started = time.monotonic()
    deadline = started + 60
    reached = False
    while done < count and time.monotonic() < deadline:
        for key, _ in selector.select(0.1):
            selector.unregister(key.fileobj)
            if key.fileobj.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:  # type: ignore[union-attr]
                done += 1
        if done >= expected and not reached:
            # Once: set again on every pass, "as long again" moved on with the clock, and on a machine slow
            # enough to take over a second to get there, the count never ended (300 s, the test's timeout).
            reached = True
            now = time.monotonic()
            deadline = min(deadline, now + max(0.5, now - started))
    selector.close()
    return done, sockets


def test_the_configured_backlog_holds_connections_while_the_proxy_cannot_accept(cluster) -> None:
    with ProxyProcess(cluster.bootstrap, extra_config={"listen_backlog": 600}) as proxy:
        os.kill(proxy.process.pid, signal.SIGSTOP)
        try:
            done, sockets = established(proxy.port, 900, expected=600)
        finally:
            os.kill(proxy.process.pid, signal.SIGCONT)
        for sock in sockets:
            sock.close()
    # Linux completes backlog + 1 handshakes for a listener that does not accept; the rest wait for room.
    assert 600 <= done <= 602, done


def _closes(proxy: ProxyProcess) -> dict[str, int]:
    causes: dict[str, int] = {}
    for event in proxy.events():
        if event.get("event") in ("connection_closed", "protocol_error"):
            cause = f"{event.get('cause')}: {event.get('error') or event.get('reason')}"
            causes[cause] = causes.get(cause, 0) + 1
    return causes


def _raise_limit(process_pid: int | None, wanted: int) -> int:
    """Raise the open-file limit of this process (or `process_pid`) to `wanted`, or as far as allowed."""
    soft, hard = resource.prlimit(process_pid or 0, resource.RLIMIT_NOFILE)
    with contextlib.suppress(OSError, ValueError):  # raising the hard limit needs CAP_SYS_RESOURCE
        resource.prlimit(process_pid or 0, resource.RLIMIT_NOFILE, (max(wanted, soft), max(wanted, hard)))
        return max(wanted, soft)
    resource.prlimit(process_pid or 0, resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def _accepted(proxy: ProxyProcess) -> float:
    """Connections the proxy has accepted so far; 0 while a scrape cannot be answered in time (the loop is
    busy with a burst of thousands of connections on a loaded machine): the wait's own deadline bounds it."""
    try:
        return metric_value(proxy.metrics_text(), "sluice_connections_total")
    except (TimeoutError, OSError):
        return 0


def _sysctl(name: str) -> list[int]:
    return [int(v) for v in open(f"/proc/sys/{name.replace('.', '/')}").read().split()]


def test_ten_thousand_connections_in_bursts_the_accept_queue_holds_are_all_accepted_and_answered(
    cluster,
) -> None:
    """Sized to what the machine grants, and says so: open files (the test, the proxy with two
    descriptors per client, the test broker with one), ephemeral ports, and the accept queue. The kernel
    holds at most min(listen_backlog, net.core.somaxconn) connections for a listener; beyond that it
    drops handshakes and, once they time out, resets the clients (seen on a loaded two-core machine:
    9,950 connects at once, a reset at 28 s). So the SYNs go in bursts of one queue each, the next as
    soon as the proxy has accepted the last: every burst arrives together, every connection stays open,
    and a connection lost or unanswered is the proxy's doing."""
    own_limit = _raise_limit(None, CONNECTIONS + 500)
    cluster_limit = _raise_limit(cluster.pid, CONNECTIONS + 500)
    low, high = _sysctl("net.ipv4.ip_local_port_range")
    queue = min(DEFAULT_LISTEN_BACKLOG, _sysctl("net.core.somaxconn")[0])
    with ProxyProcess(cluster.bootstrap) as proxy:
        proxy_limit = _raise_limit(proxy.process.pid, 2 * CONNECTIONS + 500)
        count = min(
            CONNECTIONS,
            own_limit - 100,
            (proxy_limit - DEFAULT_RESERVED_OPEN_FILES - 100) // 2,
            cluster_limit - 100,
            high - low,
        )
        bursts = [min(queue, count - start) for start in range(0, count, queue)]
        print(
            f"\n{count} connections in {len(bursts)} bursts of up to {queue} (the accept queue); open-file "
            f"limits: test {own_limit}, proxy {proxy_limit}, test broker {cluster_limit}; "
            f"ephemeral ports {high - low + 1}"
        )
        assert count >= 9_000, f"this machine's limits allow only {count} connections"
        accepted_before = metric_value(proxy.metrics_text(), "sluice_connections_total")

        sockets: list[socket.socket] = []
        selector = selectors.DefaultSelector()
        answered = 0
        pending: dict[socket.socket, bytes] = {}

        def serve(timeout_s: float) -> None:
            nonlocal answered
            for key, events in selector.select(timeout_s):
                sock = key.fileobj  # type: ignore[assignment]
                if events & selectors.EVENT_WRITE:
                    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
                    sock.send(API_VERSIONS_V0)
                    selector.modify(sock, selectors.EVENT_READ)
                    pending[sock] = b""
                    continue
                try:
                    data = pending[sock] + sock.recv(65536)
                except ConnectionResetError:
                    data = b""
                assert data, f"the proxy closed a connection instead of answering it: {_closes(proxy)}"
                pending[sock] = data
                if len(data) >= 8 and len(data) >= 4 + struct.unpack(">i", data[:4])[0]:
                    assert struct.unpack(">i", data[4:8])[0] == 7
                    selector.unregister(sock)
                    answered += 1

        try:
            for burst in bursts:
                for _ in range(burst):  # every SYN of the burst sent before its first handshake is waited for
                    sock = socket.socket()
                    sock.setblocking(False)
                    sock.connect_ex(("127.0.0.1", proxy.port))
                    sockets.append(sock)
                    selector.register(sock, selectors.EVENT_WRITE)
                deadline = time.monotonic() + 120
                while _accepted(proxy) < accepted_before + len(sockets):
                    assert time.monotonic() < deadline, f"the proxy did not accept a burst: {_closes(proxy)}"
                    serve(0.2)
            deadline = time.monotonic() + 180
            while answered < count and time.monotonic() < deadline:
                serve(0.5)
            assert answered == count, f"{count - answered} of {count} clients were never answered"
        finally:
            selector.close()
            for sock in sockets:
                sock.close()
        assert proxy.process.poll() is None
