"""Target 5: <= 30 KB of memory per idle client connection, holding 5,000 of them.

The harness opens 5,000 client connections to the proxy's bootstrap listener (each makes its own
upstream connection to one of 3 mock brokers), sends one ApiVersions v0 request on each and reads the
answer, which proves the upstream connection is up, then leaves them all idle and reads the proxy's
resident memory (VmRSS in /proc/<pid>/status) against its value before the first connection. The same
is done against the bare relay (in front of one mock broker) for comparison. Kernel socket buffers are
not part of a process's RSS and are not counted.

librdkafka's mock brokers listen with a backlog of 5, so connections are opened 4 at a time (each batch
answered before the next opens); faster, their SYNs overflow the backlog and wait out the kernel's
1-second retransmission timer.

Run alone: ``.venv/bin/python tests/bench/bench_idle_connections.py`` (one JSON record per line).
"""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parents[1]))  # tests/: the test broker and proxy handles

from harness import BareRelayProcess
from kafka.protocol.metadata import ApiVersionsRequest
from measurements import Record, measurement
from mock_cluster_process import MockCluster
from process_stats import open_fds, raise_fd_limit, rss_bytes
from proxy_process import ProxyProcess
from waiting import wait_until

from sluice.protocol.headers import encode_request_header, frame

TARGET_KB = 30.0
CONNECTIONS = 5_000
BATCH = 4  # below the mock broker's listen backlog of 5
BROKERS = 3
SETTLE_S = 1.0
# Each held connection costs the harness one descriptor, the proxy two and the mock one; plus slack.
FDS_WANTED = 2 * CONNECTIONS + 1_000
_REQUEST = frame(
    encode_request_header(18, 0, 1, "idle-bench") + bytes(ApiVersionsRequest[0]().encode(version=0))
)


def _read_answer(sock: socket.socket) -> None:
    data = b""
    while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before answering ApiVersions")
        data += chunk


def _open_idle(port: int, count: int) -> list[socket.socket]:
    held: list[socket.socket] = []
    try:
        while len(held) < count:
            size = min(BATCH, count - len(held))
            batch = [socket.create_connection(("127.0.0.1", port), timeout=15) for _ in range(size)]
            held.extend(batch)
            for sock in batch:
                sock.sendall(_REQUEST)
            for sock in batch:
                _read_answer(sock)
    except BaseException:
        for sock in held:
            sock.close()
        raise
    return held


def _wait_fds_at_most(pid: int, limit: int, timeout_s: float = 30.0) -> int:
    deadline = time.monotonic() + timeout_s
    fds = open_fds(pid)
    while fds > limit and time.monotonic() < deadline:
        time.sleep(0.1)
        fds = open_fds(pid)
    return fds


def _memory_returned_twice(proxy: ProxyProcess, since: int) -> None:
    """Until the proxy has logged `memory_returned` twice after the log's first `since` events: after the
    connection count fell, and once more as the last connections closed."""

    def returns() -> int:
        return sum(e.get("event") == "memory_returned" for e in proxy.events()[since:])

    wait_until(lambda: returns() >= 2, "the proxy's second memory_returned", 60, interval_s=0.1)


def _rss_steady(pid: int, readings: int = 5, within: int = 64 * 1024) -> None:
    """Until `readings` RSS readings of `pid` in a row, 0.1 s apart, lie within `within` bytes of each
    other: a process that gives nothing more back as its connections close."""
    recent: list[int] = []

    def steady() -> bool:
        recent.append(rss_bytes(pid))
        del recent[:-readings]
        return len(recent) == readings and max(recent) - min(recent) <= within

    wait_until(steady, "the relay's RSS to stop changing after closing", 60, interval_s=0.1)


def _hold(
    name: str, pid: int, port: int, count: int, mock_pid: int, proxy: ProxyProcess | None = None
) -> dict[str, Any]:
    time.sleep(SETTLE_S)
    fds_before = open_fds(pid)
    mock_fds_before = open_fds(mock_pid)
    before = rss_bytes(pid)
    start = time.monotonic()
    held = _open_idle(port, count)
    opened_s = time.monotonic() - start
    try:
        time.sleep(SETTLE_S)
        during = rss_bytes(pid)
        fds_during = open_fds(pid)
        mock_fds_during = open_fds(mock_pid)
        since = len(proxy.events()) if proxy is not None else 0
    finally:
        for sock in held:
            sock.close()
    # The next measurement must not start while this process still tears connections down.
    _wait_fds_at_most(pid, fds_before + 4)
    # The proxy's RSS after closing is read once its memory return has run (read at once, it showed the
    # spike's memory); the relay has none and gives back what it gives back as the connections close.
    if proxy is not None:
        _memory_returned_twice(proxy, since)
    else:  # the relay has no memory return: its RSS is read once it has stopped changing
        _rss_steady(pid)
    return {
        "name": name,
        "count": len(held),
        "before": before,
        "during": during,
        "after_close": rss_bytes(pid),
        "fds": fds_during - fds_before,
        "mock_fds": mock_fds_during - mock_fds_before,
        "per_conn_kb": (during - before) / len(held) / 1000,
        "opened_s": opened_s,
    }


def run(count: int = CONNECTIONS) -> list[Record]:
    soft, hard = raise_fd_limit(FDS_WANTED)  # before the children start: they inherit it
    notes: list[str] = []
    if soft < FDS_WANTED:
        count = max(100, (soft - 1_000) // 2)
        notes.append(
            f"RLIMIT_NOFILE is only {soft} (hard {hard}): held {count} connections, not {CONNECTIONS}."
        )
    with (
        MockCluster(brokers=BROKERS, topics={"idle": 1}) as cluster,
        # Logging at info: the memory return's `memory_returned` events are what RSS after closing waits for.
        ProxyProcess(cluster.bootstrap, log_level="info") as proxy,
        BareRelayProcess(cluster.addresses[0][0] + f":{cluster.addresses[0][1]}") as relay,
    ):
        results = [
            _hold("proxy", proxy.process.pid, proxy.port, count, cluster.pid, proxy),
            _hold("bare relay", relay.pid, relay.port, count, cluster.pid),
        ]
    proxy_result = results[0]
    rows = [
        [r["name"], f"{r['count']:,}", f"{r['before'] / 1e6:.1f}", f"{r['during'] / 1e6:.1f}",
         f"{r['per_conn_kb']:.2f}", f"{r['after_close'] / 1e6:.1f}", f"{r['fds']:,}", f"{r['mock_fds']:,}",
         f"{r['opened_s']:.1f}"]
        for r in results
    ]  # fmt: skip
    table = {
        "columns": ["process", "connections", "RSS before MB", "RSS holding MB", "kB/connection",
                    "RSS after closing MB", "extra fds", "extra mock fds", "open time s"],
        "rows": rows,
    }  # fmt: skip
    notes += [
        f"RLIMIT_NOFILE raised to {soft} (hard limit {hard}) in the harness before starting the mock "
        "cluster, the proxy and the relay, which inherit it.",
        f"{count:,} connections, each answered one ApiVersions v0 request before going idle (so its "
        f"upstream connection exists), opened {BATCH} at a time; RSS read {SETTLE_S:.0f} s after the "
        "last one, and after closing once the proxy logged its memory return twice (the relay: once its "
        "RSS stopped changing). The proxy spreads "
        "its upstream connections over 3 mock brokers, the relay sends all "
        "of them to broker 1. kB = 1000 bytes.",
        "'extra fds': descriptors the process had open while holding the connections, beyond those it had "
        "before (two per client connection: the client's and its upstream's); 'extra mock fds': the same "
        "for the mock cluster, which held every upstream connection.",
    ]
    return [
        measurement(
            "proxy_memory_per_idle_connection",
            round(proxy_result["per_conn_kb"], 2),
            "kB",
            TARGET_KB,
            better="lower",
            title=f"Proxy memory per idle client connection, holding {count:,}",
            table=table,
            notes=notes,
            commands=[".venv/bin/python tests/bench/bench_idle_connections.py"],
        ),
        measurement("bare_relay_memory_per_idle_connection", round(results[1]["per_conn_kb"], 2), "kB"),
    ]


if __name__ == "__main__":
    for record in run():
        print(json.dumps(record))
