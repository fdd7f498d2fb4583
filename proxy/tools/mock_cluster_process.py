"""A handle on `sluice mock-cluster` (as a child process) for the demo, benchmarks and tests: start, inject
faults, stop.

    with MockCluster(brokers=3, topics={"orders": 6}) as cluster:
        producer = Producer({"bootstrap.servers": cluster.bootstrap})
        cluster.broker_down(2)

The child process also stops by itself when our end of its stdin closes, so even a test process killed
with SIGKILL leaves no broker behind.
"""

from __future__ import annotations

import atexit
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

from sluice.proxy.tools.mock_cluster import MockClusterError, parse_bootstrap

_START_TIMEOUT_S = 10.0
_COMMAND_TIMEOUT_S = 10.0
_STOP_TIMEOUT_S = 5.0

_running: set[MockCluster] = set()


class MockCluster:
    """librdkafka's mock cluster in a child process; broker ids are 1..brokers."""

    def __init__(
        self,
        brokers: int = 3,
        topics: dict[str, int] | None = None,
        port_base: int | None = None,
        log_path: Path | None = None,
    ) -> None:
        """`port_base`: broker N on 127.0.0.1:port_base + N (relayed), instead of kernel-chosen ports.
        `log_path`: where the child's log lines go (default: this process's stderr)."""
        self.brokers = brokers
        command = [sys.executable, "-m", "sluice.proxy.tools.mock_cluster", "--brokers", str(brokers)]
        command.append("--commands")  # faults are injected over stdin, and its end stops the child
        for name, partitions in (topics or {}).items():
            command += ["--topic", f"{name}:{partitions}"]
        if port_base is not None:
            command += ["--port-base", str(port_base)]
        # By default stderr is inherited so pytest's fd capture shows the broker's log next to a failing test.
        log = None if log_path is None else open(log_path, "ab")  # noqa: SIM115  # the child keeps it
        try:
            self._process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log
            )
        finally:
            if log is not None:
                log.close()
        self._buffer = b""
        self._lock = threading.Lock()
        _running.add(self)
        try:
            line = self._read_line(_START_TIMEOUT_S)
        except MockClusterError:
            self.close()
            raise
        if not line.startswith("BOOTSTRAP "):
            self.close()
            raise MockClusterError(f"mock cluster announced {line!r} instead of BOOTSTRAP")
        self.bootstrap: str = line.removeprefix("BOOTSTRAP ")
        self.addresses: list[tuple[str, int]] = parse_bootstrap(self.bootstrap)

    @property
    def pid(self) -> int:
        return self._process.pid

    def __enter__(self) -> MockCluster:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def broker_down(self, broker_id: int) -> None:
        self._command(f"down {broker_id}")

    def broker_up(self, broker_id: int) -> None:
        self._command(f"up {broker_id}")

    def set_rtt(self, broker_id: int, rtt_ms: int) -> None:
        self._command(f"rtt {broker_id} {rtt_ms}")

    def set_leader(self, topic: str, partition: int, broker_id: int) -> None:
        """Move the partition's leadership to `broker_id` (a leader change, as after a broker failover)."""
        if not topic or any(char.isspace() for char in topic):
            raise MockClusterError(f"topic name {topic!r}: no whitespace allowed")
        self._command(f"leader {topic} {partition} {broker_id}")

    def advertise(self, broker_id: int, host: str, port: int) -> None:
        """Have every answer name host:port for `broker_id` (it still listens on its own port)."""
        if not host or any(char.isspace() for char in host):
            raise MockClusterError(f"host {host!r}: no whitespace allowed")
        self._command(f"advertise {broker_id} {host} {port}")

    def create_topic(self, name: str, partitions: int, replication: int = 1) -> None:
        if not name or any(char.isspace() for char in name):
            # Whitespace would split (or, with a newline, multiply) the one-line command.
            raise MockClusterError(f"topic name {name!r}: no whitespace allowed")
        self._command(f"topic {name} {partitions} {replication}")

    def close(self) -> None:
        """SIGTERM the child, wait for it, SIGKILL it only if it hangs. Safe to call twice."""
        _running.discard(self)
        process = self._process
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for pipe in (process.stdin, process.stdout):
            if pipe is not None and not pipe.closed:
                pipe.close()

    @property
    def returncode(self) -> int | None:
        return self._process.poll()

    def _command(self, line: str) -> None:
        with self._lock:
            stdin = self._process.stdin
            assert stdin is not None
            try:
                stdin.write(line.encode() + b"\n")
                stdin.flush()
            except BrokenPipeError:
                raise MockClusterError(f"{line!r}: the mock cluster has exited") from None
            answer = self._read_line(_COMMAND_TIMEOUT_S)
        if answer != "ok":
            raise MockClusterError(f"{line!r}: {answer}")

    def _read_line(self, timeout_s: float) -> str:
        stdout = self._process.stdout
        assert stdout is not None
        deadline = time.monotonic() + timeout_s
        # Raw reads on the fd: a buffered readline() could not be given a deadline. poll(), not select():
        # a test process holding thousands of sockets has descriptors past select's 1024.
        poller = select.poll()
        poller.register(stdout.fileno(), select.POLLIN)
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise MockClusterError(f"no answer from the mock cluster within {timeout_s} s")
            if poller.poll(remaining * 1000):
                chunk = os.read(stdout.fileno(), 4096)
                if not chunk:
                    raise MockClusterError(f"the mock cluster exited (code {self._process.wait()})")
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()


def running_mock_cluster(brokers: int = 3, topics: dict[str, int] | None = None) -> Iterator[MockCluster]:
    """Generator for a pytest fixture: ``yield from running_mock_cluster(3, {"t": 6})``."""
    with MockCluster(brokers, topics) as cluster:
        yield cluster


@atexit.register
def _close_all() -> None:
    for cluster in list(_running):
        cluster.close()
