"""The two child processes `sluice demo` runs: librdkafka's mock cluster (`sluice mock-cluster`) and Sluice
(`sluice run`), each a handle that starts the child, waits until it serves and stops it.

    with MockClusterChild(topics={"orders": 6}) as cluster, SluiceChild(cluster.bootstrap) as proxy:
        producer = Producer({"bootstrap.servers": proxy.bootstrap})

The mock cluster child also stops by itself when our end of its stdin closes, so even a demo killed with
SIGKILL leaves no broker behind. The test suite's handles (tests/mock_cluster_process.py,
tests/proxy_process.py) extend these two with fault injection and log reading.
"""

from __future__ import annotations

import atexit
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from ..listeners.ports import free_port_block
from .mock_cluster import MockClusterError, parse_bootstrap

_START_TIMEOUT_S = 10.0
_STOP_TIMEOUT_S = 5.0
_SLUICE_START_ATTEMPTS = 3
# Broker listeners open, and broker nodes learnt without one (at start-up, a proxy that is stopping).
_READY_METRICS = ("sluice_broker_listeners", "sluice_brokers_not_advertised")

_running: set[MockClusterChild] = set()


class MockClusterChild:
    """librdkafka's mock cluster in a child process; broker ids are 1..brokers."""

    def __init__(
        self, brokers: int = 3, topics: dict[str, int] | None = None, log_path: Path | None = None
    ) -> None:
        """`log_path`: where the child's log lines go (default: this process's stderr)."""
        self.brokers = brokers
        command = [sys.executable, "-m", "sluice.proxy.tools.mock_cluster", *self._arguments(brokers, topics)]
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

    def _arguments(self, brokers: int, topics: dict[str, int] | None) -> list[str]:
        # --commands: the child reads commands on stdin, and the end of its stdin stops it.
        arguments = ["--brokers", str(brokers), "--commands"]
        for name, partitions in (topics or {}).items():
            arguments += ["--topic", f"{name}:{partitions}"]
        return arguments

    def __enter__(self) -> MockClusterChild:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

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

    def _read_line(self, timeout_s: float) -> str:
        stdout = self._process.stdout
        assert stdout is not None
        deadline = time.monotonic() + timeout_s
        # Raw reads on the fd: a buffered readline() could not be given a deadline. poll(), not select():
        # a process holding thousands of sockets has descriptors past select's 1024.
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


@atexit.register
def _close_all() -> None:
    for cluster in list(_running):
        cluster.close()


class SluiceChild:
    """`sluice run` in front of `upstream`; bootstrap on `port`, broker node N on `broker_port_base + N`."""

    def __init__(self, upstream: str, extra_config: dict[str, Any] | None = None) -> None:
        self._start(upstream, extra_config)

    def _start(
        self,
        upstream: str,
        extra_config: dict[str, Any] | None,
        *,
        metrics: bool = True,
        log_level: str = "info",
        wait_for_brokers: bool = True,
    ) -> None:
        # A port can still be taken between choosing the block and the proxy's bind (another program, or
        # another test worker's proxy, starting beside us): then the proxy exits naming the address (at
        # once for the bootstrap port, once its discovery finds the brokers for a broker's), and a new block
        # is tried.
        for attempt in range(_SLUICE_START_ATTEMPTS):
            self._launch(free_port_block(16), upstream, extra_config, metrics, log_level)
            try:
                self._wait_for_listener()
                if wait_for_brokers:
                    self.wait_until_ready()
                return
            except Exception:
                self.stop()
                if (
                    attempt + 1 < _SLUICE_START_ATTEMPTS
                    and "Address already in use" in self.log_path.read_text()
                ):
                    continue
                raise

    def _wait_for_listener(self, timeout_s: float = 60.0) -> None:
        """Until the proxy says it serves (systemd's READY=1 on the notify socket we gave it), or it exits
        (its log says why).

        Not a connection to the port: between choosing the port and the bind, another program can take
        it, and a probe would find that program's listener while our proxy exits with "Address already in
        use". Start-up on a loaded machine (imports, bind, services) can take several seconds, so the bound
        is generous."""
        deadline = time.monotonic() + timeout_s
        while self.process.poll() is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                log = self.log_path.read_text()
                raise TimeoutError(f"the proxy did not say it serves 127.0.0.1:{self.port}:\n{log}")
            readable, _, _ = select.select([self._notify], [], [], min(0.5, remaining))
            if readable and b"READY=1" in self._notify.recv(4096):
                return
        log = self.log_path.read_text()
        raise RuntimeError(f"the proxy exited with {self.process.returncode} before serving:\n{log}")

    def _launch(
        self, block: int, upstream: str, extra_config: dict[str, Any] | None, metrics: bool, log_level: str
    ) -> None:
        self.port = block
        self.metrics_port = block + 1 if metrics else None
        # Node ids of the mock cluster are small (1..N), so base + N stays inside the block.
        self.broker_port_base = block + 2
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.work_dir, self._temporary = self._new_work_dir()
        self.log_path = self.work_dir / "proxy.log"
        config: dict[str, Any] = {
            "listen": self.bootstrap,
            "advertised_host": "127.0.0.1",
            "broker_port_base": self.broker_port_base,
            "upstream": {"bootstrap": upstream.split(",")},
            "log": {"level": log_level, "format": "json"},
            "shutdown_timeout_s": 5,
        }
        if metrics:
            config["metrics"] = {"listen": f"127.0.0.1:{self.metrics_port}"}
        config.update(extra_config or {})
        self.config_path = self.work_dir / "sluice.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self._log_file = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        # The proxy's READY=1 arrives here (proxy/process/readiness.py); a short path, as a Unix socket's
        # must be (the work directory's may be long).
        self._notify_dir = tempfile.TemporaryDirectory(prefix="sluice-")
        notify_path = os.path.join(self._notify_dir.name, "notify")
        self._notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._notify.bind(notify_path)
        env = dict(os.environ, PYTHONUNBUFFERED="1", NOTIFY_SOCKET=notify_path)
        self.process = subprocess.Popen(
            self._command(self.config_path), stdout=self._log_file, stderr=subprocess.STDOUT, env=env
        )

    def _new_work_dir(self) -> tuple[Path, tempfile.TemporaryDirectory[str] | None]:
        """Where the configuration and the log go, and the temporary directory to remove at close."""
        temporary = tempfile.TemporaryDirectory(prefix="sluice-demo-")
        return Path(temporary.name), temporary

    def _command(self, config_path: Path) -> list[str]:
        return [sys.executable, "-m", "sluice.proxy", "run", "--config", str(config_path)]

    def wait_until_ready(self, timeout_s: float = 10.0) -> None:
        """Until the proxy listens for every broker its start-up discovery found, or it exits (a broker's
        port taken: `_start` then tries a new block).

        One broker listener open is not enough: a start-up listener that cannot open stops the proxy
        (exit 1), and its metrics still answer while it drains. The discovery opens its listeners in one
        turn of the proxy's loop (BrokerDirectory.advertise is synchronous), and a scrape is answered on
        that loop, so a scrape sees all of them or none; a failed one is in `sluice_brokers_not_advertised`.
        """
        self._poll_until(self._listens_for_every_broker, timeout_s, "listen for every broker it discovered")

    def _listens_for_every_broker(self) -> bool:
        try:
            text = self.metrics_text()
        except OSError:
            return False
        values = {
            name: float(value)
            for name, _, value in (line.partition(" ") for line in text.splitlines())
            if name in _READY_METRICS
        }
        listeners, not_advertised = (values.get(name) for name in _READY_METRICS)
        return listeners is not None and listeners > 0 and not_advertised == 0

    def _poll_until(self, ready: Callable[[], bool], timeout_s: float, what: str) -> None:
        """Until `ready()`; RuntimeError once the proxy exited, TimeoutError after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ready():
                return
            self._raise_if_exited()
            time.sleep(0.05)
        raise TimeoutError(f"the proxy did not {what}:\n{self.log_path.read_text()}")

    def _raise_if_exited(self) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(f"proxy exited with {self.process.returncode}: {self.log_path.read_text()}")

    def metrics_text(self) -> str:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def stop(self, timeout_s: float = 15.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log_file.close()
        self._notify.close()
        self._notify_dir.cleanup()
        return self.process.returncode

    def close(self) -> None:
        self.stop()
        if self._temporary is not None:
            self._temporary.cleanup()

    def __enter__(self) -> SluiceChild:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
