"""The real proxy (`sluice run ...`) as a child process, for the demo, benchmarks and tests."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from ..listeners.ports import free_port_block, wait_for_port

_START_ATTEMPTS = 3
# A directory to keep every proxy's configuration and log in (one folder per proxy, named after the test
# that started it); unset, they go to a temporary directory removed when the proxy is closed.
KEEP_LOGS_ENV = "SLUICE_TEST_LOGS"


def _work_dir() -> tuple[Path, tempfile.TemporaryDirectory[str] | None]:
    keep = os.environ.get(KEEP_LOGS_ENV)
    if not keep:
        temporary = tempfile.TemporaryDirectory(prefix="sluice-test-")
        return Path(temporary.name), temporary
    # pytest names the running test: "tests/proxy/test_x.py::test_y[a] (call)"
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
    prefix = "".join(c if c.isalnum() or c in "-_." else "_" for c in test)[-120:] or "sluice"
    Path(keep).mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir=keep)), None


class ProxyProcess:
    """The proxy in front of `upstream`; bootstrap on `port`, broker node N on `broker_port_base + N`."""

    def __init__(
        self,
        upstream: str,
        extra_config: dict[str, object] | None = None,
        metrics: bool = True,
        log_level: str = "info",
        wait_for_brokers: bool = True,
        command: list[str] | None = None,
        run_args: list[str] | None = None,
    ) -> None:
        """`wait_for_brokers=False` for an upstream that refuses the proxy's own unauthenticated Metadata
        request (SASL): the proxy then learns brokers from its clients' answers. `command` starts the proxy
        (default: this interpreter's `-m sluice.proxy`; the wheel smoke test uses the `sluice` script);
        `run_args` are more flags for `sluice run` (`--workers 2`)."""
        self._run_args = list(run_args or [])
        # A port can still be taken between choosing the block and the proxy's bind (parallel tests):
        # then the proxy exits at once naming the address, and a new block is tried.
        for attempt in range(_START_ATTEMPTS):
            self._launch(free_port_block(16), upstream, extra_config, metrics, log_level, command)
            try:
                self._wait_for_listener()
                if wait_for_brokers:
                    self.wait_until_ready()
                return
            except Exception:
                self.stop()
                if attempt + 1 < _START_ATTEMPTS and "Address already in use" in self.log_path.read_text():
                    continue
                raise

    def _wait_for_listener(self, timeout_s: float = 60.0) -> None:
        """Until the proxy listens, or it exits (its log says why). Start-up is the event: on a loaded
        machine importing and binding can take several seconds, so the bound is generous."""
        deadline = time.monotonic() + timeout_s
        while self.process.poll() is None:
            try:
                wait_for_port(self.port, timeout_s=min(2.0, max(0.1, deadline - time.monotonic())))
                return
            except TimeoutError:
                if time.monotonic() >= deadline:
                    raise
        raise RuntimeError(f"the proxy exited with {self.process.returncode} before listening")

    def _launch(
        self,
        block: int,
        upstream: str,
        extra_config: dict[str, object] | None,
        metrics: bool,
        log_level: str,
        command: list[str] | None,
    ) -> None:
        self.port = block
        self.metrics_port = block + 1 if metrics else None
        # Node ids of the mock cluster are small (1..N), so base + N stays inside the block.
        self.broker_port_base = block + 2
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.work_dir, self._temporary = _work_dir()
        self.log_path = self.work_dir / "proxy.log"
        config = {
            "listen": self.bootstrap,
            "advertised_host": "127.0.0.1",
            "broker_port_base": self.broker_port_base,
            "upstream": {"bootstrap": upstream.split(",")},
            "log": {"level": log_level, "format": "json"},
            "shutdown_timeout_s": 5,
        }
        if metrics:
            config["metrics"] = {"listen": f"127.0.0.1:{self.metrics_port}"}
        for key, value in (extra_config or {}).items():
            config[key] = value
        self.config_path = self.work_dir / "sluice.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self._log_file = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen(
            [
                *(command or [sys.executable, "-m", "sluice.proxy"]),
                "run",
                "--config",
                str(self.config_path),
                *self._run_args,
            ],
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=env,
        )

    def wait_until_ready(self, timeout_s: float = 10.0) -> None:
        """Until the proxy knows the cluster's brokers (and so listens for each of them)."""
        if self.metrics_port is None:
            self.wait_for_event("brokers_discovered", timeout_s)
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                for line in self.metrics_text().splitlines():
                    if line.startswith("sluice_broker_listeners ") and float(line.split()[1]) > 0:
                        return
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"proxy exited with {self.process.returncode}: {self.log_path.read_text()}"
                )
            time.sleep(0.05)
        raise TimeoutError(f"the proxy did not discover the brokers:\n{self.log_path.read_text()}")

    def broker_port(self, node_id: int) -> int:
        return self.broker_port_base + node_id

    def events(self) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        for line in self.log_path.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                out.append(json.loads(line))
        return out

    def wait_for_event(
        self, name: str, timeout_s: float = 10.0, *, since: int = 0, **match: object
    ) -> dict[str, object]:
        """The first event `name` with the fields in `match`, among the log's events from index `since` on
        (`len(events())` taken before an action waits for that action's event, not an earlier one's)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for event in self.events()[since:]:
                if event.get("event") == name and all(event.get(k) == v for k, v in match.items()):
                    return event
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"proxy exited with {self.process.returncode}: {self.log_path.read_text()}"
                )
            time.sleep(0.05)
        raise TimeoutError(f"no {name} {match} event in the proxy log:\n{self.log_path.read_text()}")

    def metrics_text(self) -> str:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            body: bytes = r.read()
        return body.decode()

    def stop(self, timeout_s: float = 15.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log_file.close()
        return self.process.returncode

    def close(self) -> None:
        self.stop()
        if self._temporary is not None:
            self._temporary.cleanup()

    def __enter__(self) -> ProxyProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
