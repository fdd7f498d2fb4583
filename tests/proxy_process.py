"""The real proxy (`sluice run ...`) as a child process for tests and benchmarks: `sluice demo`'s Sluice
child, with the log kept per test, its events read, and the command and flags chosen by the test."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sluice.proxy.tools.demo_processes import SluiceChild

# A directory to keep every proxy's configuration and log in (one folder per proxy, named after the test
# that started it); unset, they go to a temporary directory removed when the proxy is closed.
KEEP_LOGS_ENV = "SLUICE_TEST_LOGS"


def work_dir() -> tuple[Path, tempfile.TemporaryDirectory[str] | None]:
    """A proxy's folder: under KEEP_LOGS_ENV named after the running test, else a temporary one."""
    keep = os.environ.get(KEEP_LOGS_ENV)
    if not keep:
        temporary = tempfile.TemporaryDirectory(prefix="sluice-test-")
        return Path(temporary.name), temporary
    # pytest names the running test: "tests/proxy/test_x.py::test_y[a] (call)"
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
    prefix = "".join(c if c.isalnum() or c in "-_." else "_" for c in test)[-120:] or "sluice"
    Path(keep).mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir=keep)), None


class ProxyProcess(SluiceChild):
    """The proxy in front of `upstream`; bootstrap on `port`, broker node N on `broker_port_base + N`."""

    def __init__(
        self,
        upstream: str,
        extra_config: dict[str, Any] | None = None,
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
        self._program = list(command or [sys.executable, "-m", "sluice.proxy"])
        self._run_args = list(run_args or [])
        self._start(
            upstream, extra_config, metrics=metrics, log_level=log_level, wait_for_brokers=wait_for_brokers
        )

    def _command(self, config_path: Path) -> list[str]:
        return [*self._program, "run", "--config", str(config_path), *self._run_args]

    def _new_work_dir(self) -> tuple[Path, tempfile.TemporaryDirectory[str] | None]:
        return work_dir()

    def wait_until_ready(self, timeout_s: float = 10.0) -> None:
        """Until the proxy listens for every broker its start-up discovery found, or it exits; without
        metrics, by its log: a `listener_opened` for each node `brokers_discovered` names (one whose
        listener cannot open has none, and the proxy stops)."""
        if self.metrics_port is None:
            self._poll_until(self._logged_every_broker_listener, timeout_s, "log a listener per broker")
        else:
            super().wait_until_ready(timeout_s)

    def _logged_every_broker_listener(self) -> bool:
        events = self.events()
        discovered = next((e for e in events if e.get("event") == "brokers_discovered"), None)
        if discovered is None:
            return False
        opened = {e.get("node_id") for e in events if e.get("event") == "listener_opened"}
        return {int(node_id) for node_id in discovered["brokers"]} <= opened

    def broker_port(self, node_id: int) -> int:
        return self.broker_port_base + node_id

    def events(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log_path.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                out.append(json.loads(line))
        return out

    def wait_for_event(
        self, name: str, timeout_s: float = 10.0, *, since: int = 0, **match: object
    ) -> dict[str, Any]:
        """The first event `name` with the fields in `match`, among the log's events from index `since` on
        (`len(events())` taken before an action waits for that action's event, not an earlier one's)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for event in self.events()[since:]:
                if event.get("event") == name and all(event.get(k) == v for k, v in match.items()):
                    return event
            self._raise_if_exited()
            time.sleep(0.05)  # a poll of the log: the event is the line it waits for
        raise TimeoutError(f"no {name} {match} event in the proxy log:\n{self.log_path.read_text()}")

    def __enter__(self) -> ProxyProcess:
        return self
