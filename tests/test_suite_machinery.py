"""The test suite's own machinery: xdist groups hold (`make test` runs Spark, and each fleet sensor, one
test at a time on one worker), and a test's proxies leave their configuration and log where the README's
"When a test fails" says."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import proxy_process
import pytest

GROUPED = """
import os
import pytest

@pytest.mark.xdist_group("together")
@pytest.mark.parametrize("n", range(6))
def test_grouped(n, tmp_path_factory):
    with open(os.environ["WORKERS_SEEN"], "a") as seen:
        seen.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")

@pytest.mark.parametrize("n", range(6))
def test_loose(n):
    pass
"""


@pytest.mark.slow  # starts a pytest with three workers; it guards `make test`'s groups
def test_an_xdist_group_runs_on_one_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest 9.2 with xdist 3.8 spread a group's tests over every worker without a word (pyproject.toml
    pins pytest below 9.2 for it)."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    seen = tmp_path / "workers.txt"
    monkeypatch.setenv("WORKERS_SEEN", str(seen))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "3", "--dist", "loadgroup", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    workers = seen.read_text().split()
    assert len(workers) == 6 and len(set(workers)) == 1, workers


def test_with_sluice_test_logs_a_proxys_folder_is_kept_and_named_after_its_test(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(proxy_process.KEEP_LOGS_ENV, str(tmp_path / "logs"))
    folder, temporary = proxy_process.work_dir()
    assert temporary is None  # nothing removes it
    assert folder.parent == tmp_path / "logs"
    assert folder.name.startswith("tests_test_suite_machinery.py__test_with_sluice_test_logs_")


def test_without_it_the_folder_is_temporary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(proxy_process.KEEP_LOGS_ENV, raising=False)
    folder, temporary = proxy_process.work_dir()
    assert temporary is not None and folder.is_dir()
    temporary.cleanup()
    assert not folder.exists()


def test_a_port_taken_by_another_program_before_the_bind_is_not_mistaken_for_the_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CI, 2026-11-27: a proxy's port was taken between the free-port check and the proxy's bind; the start
    probed the port, found the other program's listener and handed the test a proxy that had exited with
    "Address already in use". The start now waits for the proxy's own `listener_opened` line and retries."""
    from sluice.proxy.tools import demo_processes

    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    blocks = iter([taken])
    real_block = demo_processes.free_port_block
    monkeypatch.setattr(
        demo_processes, "free_port_block", lambda size: next(blocks, None) or real_block(size)
    )
    try:
        with proxy_process.ProxyProcess("127.0.0.1:1", metrics=False, wait_for_brokers=False) as proxy:
            assert proxy.port != taken
            assert proxy.process.poll() is None
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=5):
                pass
    finally:
        squatter.close()
