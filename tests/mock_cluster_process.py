"""The test broker for the suite: `sluice demo`'s mock cluster child, with faults injected over its stdin.

    with MockCluster(brokers=3, topics={"orders": 6}) as cluster:
        producer = Producer({"bootstrap.servers": cluster.bootstrap})
        cluster.broker_down(2)

Like the demo's, the child stops by itself when our end of its stdin closes, so even a test process killed
with SIGKILL leaves no broker behind.
"""

from __future__ import annotations

import threading
from pathlib import Path

from sluice.proxy.tools.demo_processes import MockClusterChild
from sluice.proxy.tools.mock_cluster import MockClusterError

_COMMAND_TIMEOUT_S = 10.0


class MockCluster(MockClusterChild):
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
        self._port_base = port_base
        self._lock = threading.Lock()
        super().__init__(brokers, topics, log_path)

    def _arguments(self, brokers: int, topics: dict[str, int] | None) -> list[str]:
        arguments = super()._arguments(brokers, topics)
        if self._port_base is not None:
            arguments += ["--port-base", str(self._port_base)]
        return arguments

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.poll()

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
