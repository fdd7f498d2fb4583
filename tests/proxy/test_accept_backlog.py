"""The accept queue is real and configurable (issue 14 item 6).

`loop.create_server(sock=...)` used to call listen(100) on a socket bound with listen(1024), so with 3,000
connections arriving together 975 overflowed. Here a stopped proxy (SIGSTOP: it accepts nothing) shows the
kernel holding `listen_backlog` connections for it, and 10,000 clients connecting at once are all accepted
and answered.
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

from throttle_harness import metric_value

from sluice.config.model import DEFAULT_RESERVED_OPEN_FILES
from sluice.protocol.headers import encode_request
from sluice.proxy.tools.proxy_process import ProxyProcess

CONNECTIONS = 10_000
API_VERSIONS_V0 = encode_request(18, 0, 7, "backlog", b"")


def established_within(port: int, count: int, seconds: float) -> tuple[int, list[socket.socket]]:
    """Start `count` non-blocking connects at once; how many complete their handshake within `seconds`."""
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
    deadline = time.monotonic() + seconds
    while done < count and time.monotonic() < deadline:
        for key, _ in selector.select(0.1):
            selector.unregister(key.fileobj)
            if key.fileobj.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:  # type: ignore[union-attr]
                done += 1
    selector.close()
    return done, sockets


def test_the_configured_backlog_holds_connections_while_the_proxy_cannot_accept(cluster) -> None:
    with ProxyProcess(cluster.bootstrap, extra_config={"listen_backlog": 600}) as proxy:
        os.kill(proxy.process.pid, signal.SIGSTOP)
        try:
            done, sockets = established_within(proxy.port, 900, seconds=2.0)
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


def test_ten_thousand_connections_arriving_together_are_all_accepted_and_answered(cluster) -> None:
    # Each client connection costs the proxy two descriptors (client + upstream) and this test one.
    own_limit = _raise_limit(None, CONNECTIONS + 500)
    with ProxyProcess(cluster.bootstrap) as proxy:
        proxy_limit = _raise_limit(proxy.process.pid, 2 * CONNECTIONS + 500)
        # Where the machine's hard limit stops us lower (20,000 descriptors and no CAP_SYS_RESOURCE on the
        # project's machines: 9,886 connections, the proxy keeping reserved_open_files for itself), the test
        # runs as many as it allows and says so.
        count = min(CONNECTIONS, own_limit - 100, (proxy_limit - DEFAULT_RESERVED_OPEN_FILES - 100) // 2)
        print(f"\n{count} connections (open-file limit: test {own_limit}, proxy {proxy_limit})")
        assert count >= 9_000, f"open-file limits allow only {count} connections here"

        sockets: list[socket.socket] = []
        selector = selectors.DefaultSelector()
        try:
            for _ in range(count):  # every SYN sent before the first handshake is waited for
                sock = socket.socket()
                sock.setblocking(False)
                sock.connect_ex(("127.0.0.1", proxy.port))
                sockets.append(sock)
                selector.register(sock, selectors.EVENT_WRITE)
            answered = 0
            pending: dict[socket.socket, bytes] = {}
            deadline = time.monotonic() + 180
            while answered < count and time.monotonic() < deadline:
                for key, events in selector.select(0.5):
                    sock = key.fileobj  # type: ignore[assignment]
                    if events & selectors.EVENT_WRITE:
                        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
                        sock.send(API_VERSIONS_V0)
                        selector.modify(sock, selectors.EVENT_READ)
                        pending[sock] = b""
                        continue
                    data = pending[sock] + sock.recv(65536)
                    assert data, f"the proxy closed a connection instead of answering it: {_closes(proxy)}"
                    pending[sock] = data
                    if len(data) >= 8 and len(data) >= 4 + struct.unpack(">i", data[:4])[0]:
                        assert struct.unpack(">i", data[4:8])[0] == 7
                        selector.unregister(sock)
                        answered += 1
            assert answered == count, f"{count - answered} of {count} clients were never answered"
            assert metric_value(proxy.metrics_text(), "sluice_connections_total") >= count
        finally:
            selector.close()
            for sock in sockets:
                sock.close()
        assert proxy.process.poll() is None
