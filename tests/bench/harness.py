"""The processes a benchmark runs against: the proxy with quiet logs, the bare relay, the load generators.

Everything runs as its own process, so the harness (this interpreter) never shares a GIL with what it
measures, and /proc tells each process's CPU apart.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from process_stats import children_cpu_seconds, user_system_seconds

sys.path.append(str(Path(__file__).resolve().parents[1]))  # tests/: the test broker and proxy handles

from proxy_process import ProxyProcess

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parents[1]
PYTHON = sys.executable


class QuietProxy(ProxyProcess):
    """The real proxy with log level "warning", so no per-connection log line costs CPU."""

    def __init__(
        self, upstream: str, extra_config: dict | None = None, run_args: list[str] | None = None
    ) -> None:
        super().__init__(
            upstream, extra_config=extra_config, metrics=True, log_level="warning", run_args=run_args
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def counter(self, family: str, api: str) -> float:
        """One `family{api="..."}` sample from the proxy's Prometheus endpoint (0 if absent)."""
        prefix = f'{family}{{api="{api}"}} '
        for line in self.metrics_text().splitlines():
            if line.startswith(prefix):
                return float(line[len(prefix) :])
        return 0.0


class ListeningProcess:
    """A bench script that prints ``LISTENING <port>`` once it accepts connections, and stops on SIGTERM
    or when its stdin (held here) closes."""

    def __init__(self, script: str, *args: str) -> None:
        self.process = subprocess.Popen(
            [PYTHON, str(BENCH_DIR / script), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], 10)
        line = self.process.stdout.readline().decode().strip() if ready else ""
        if not line.startswith("LISTENING "):
            self.close()
            raise RuntimeError(f"{script} did not start (said {line!r})")
        self.port = int(line.split()[1])
        self.address = f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()

    def __enter__(self) -> ListeningProcess:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class BareRelayProcess(ListeningProcess):
    """tests/bench/bare_relay.py in front of one upstream address."""

    def __init__(self, upstream: str) -> None:
        super().__init__("bare_relay.py", "--upstream", upstream)


class CannedBrokerProcess(ListeningProcess):
    """tests/bench/canned_broker.py: answers Produce and Fetch at memory speed (see its docstring)."""

    def __init__(self, topic: str, fetch_bytes: int | None = None) -> None:
        size = ["--fetch-bytes", str(fetch_bytes)] if fetch_bytes is not None else []
        super().__init__("canned_broker.py", "--topic", topic, *size)


@dataclass(frozen=True)
class ChildRun:
    """A finished load generator: what it printed, how long it took, the CPU it used."""

    command: list[str]
    stdout: str
    stderr: str
    returncode: int
    wall_s: float
    cpu_s: float

    def last_json(self) -> dict[str, Any]:
        lines = [line for line in self.stdout.splitlines() if line.startswith("{")]
        if not lines:
            raise RuntimeError(f"{self.command[:4]}... printed no result: {self.stderr[-2000:]}")
        return json.loads(lines[-1])

    def last_line(self) -> str:
        lines = self.stdout.strip().splitlines()
        return lines[-1] if lines else ""


def run_child(command: list[str], timeout_s: float = 300) -> ChildRun:
    before = children_cpu_seconds()
    start = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=REPO)
    return ChildRun(
        command=command,
        stdout=completed.stdout,
        stderr=completed.stderr,
        returncode=completed.returncode,
        wall_s=time.perf_counter() - start,
        cpu_s=children_cpu_seconds() - before,
    )


@dataclass(frozen=True)
class WindowedRun:
    """A load generator run plus the CPU seconds each watched process used inside its counted window."""

    child: ChildRun
    result: dict[str, Any]
    window_cpu_s: dict[str, float]
    window_user_cpu_s: dict[str, float]  # the user-space part of window_cpu_s


def run_windowed(
    command: list[str],
    watched: dict[str, int],
    timeout_s: float = 300,
    clock: Callable[[int], tuple[float, float]] = user_system_seconds,
) -> WindowedRun:
    """Run a wire_load.py command; read the CPU clocks of the `watched` pids (name -> pid) when it says
    its counted window opens and closes. `clock`: pid -> (user, system) CPU seconds so far."""
    before_children = children_cpu_seconds()
    start = time.perf_counter()
    opened: dict[str, tuple[float, float]] = {}
    window: dict[str, tuple[float, float]] = {}
    lines: list[str] = []
    with tempfile.TemporaryFile("w+") as errors:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True, cwd=REPO)
        assert process.stdout is not None
        timer = threading.Timer(timeout_s, process.kill)
        timer.start()
        try:
            for line in process.stdout:
                lines.append(line)
                if '"window_start"' in line:
                    opened = {name: clock(pid) for name, pid in watched.items()}
                elif '"window_end"' in line:
                    window = {name: _minus(clock(pid), opened[name]) for name, pid in watched.items()}
            returncode = process.wait()
        finally:
            timer.cancel()
        errors.seek(0)
        stderr = errors.read()
    child = ChildRun(
        command=command,
        stdout="".join(lines),
        stderr=stderr,
        returncode=returncode,
        wall_s=time.perf_counter() - start,
        cpu_s=children_cpu_seconds() - before_children,
    )
    if not window:
        raise RuntimeError(
            f"{display(command)} exited {returncode} without a counted window: {stderr[-2000:]}"
        )
    result = child.last_json()
    if result["errors"] or result["closed_early"]:
        raise RuntimeError(f"{display(command)}: the load was refused: {result['failures']}")
    return WindowedRun(
        child,
        result,
        {name: user + system for name, (user, system) in window.items()},
        {name: user for name, (user, _) in window.items()},
    )


def _minus(now: tuple[float, float], then: tuple[float, float]) -> tuple[float, float]:
    return now[0] - then[0], now[1] - then[1]


def wire_load_command(port: int, **options: object) -> list[str]:
    """`wire_load.py --port P --some-option value ...` from keyword arguments (some_option=value)."""
    command = [PYTHON, str(BENCH_DIR / "wire_load.py"), "--port", str(port)]
    for key, value in options.items():
        command += [f"--{key.replace('_', '-')}", str(value)]
    return command


def perf_test_command(
    bootstrap: str, topic: str, num_records: int, record_size: int, props: dict
) -> list[str]:
    """`sluice perf-test` (python -m sluice.proxy perf-test) against `bootstrap`, unthrottled."""
    command = [PYTHON, "-m", "sluice.proxy", "perf-test", "--topic", topic, "--num-records", str(num_records)]
    command += ["--record-size", str(record_size), "--throughput", "-1", "--producer-props"]
    command += [f"bootstrap.servers={bootstrap}"] + [f"{k}={v}" for k, v in props.items()]
    return command


def display(command: list[str]) -> str:
    """A command line as a reader would type it: repo-relative paths, `.venv/bin/python`."""
    shown = []
    for part in command:
        if part == PYTHON:
            part = ".venv/bin/python"
        elif part.startswith(str(REPO) + "/"):
            part = part[len(str(REPO)) + 1 :]
        shown.append(part)
    return " ".join(shown)
