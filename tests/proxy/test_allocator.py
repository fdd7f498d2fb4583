"""`sluice run` starts itself again with glibc's malloc for Python's objects, unless the operator chose an
allocator (proxy/allocator.py): which process restarts, with what, and that the real command does."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from proxy_process import ProxyProcess

from sluice.proxy.allocator import allocator_in_use, pymalloc_in_use, restart_command

ORIG_ARGV = ["/venv/bin/python", "-m", "sluice.proxy", "run", "--config", "sluice.yaml"]


def test_the_proxy_restarts_with_the_c_librarys_malloc_and_its_own_arguments() -> None:
    environ = {"PATH": "/usr/bin", "SLUICE_X": "1"}
    command = restart_command(["run", "--config", "sluice.yaml"], environ, ORIG_ARGV, False)
    assert command == (ORIG_ARGV, {"PATH": "/usr/bin", "SLUICE_X": "1", "PYTHONMALLOC": "malloc"})
    assert "PYTHONMALLOC" not in environ  # the caller's mapping is left as it was


@pytest.mark.parametrize("chosen", ["pymalloc", "malloc", "malloc_debug", ""])
def test_an_allocator_the_operator_chose_is_kept(chosen: str) -> None:
    # Also the restarted process itself, which finds the variable set, so it never restarts twice.
    assert restart_command(["run"], {"PYTHONMALLOC": chosen}, ORIG_ARGV, False) is None


@pytest.mark.parametrize("arguments", [["check-config", "--config", "x"], ["pipeline", "report"], []])
def test_other_subcommands_are_not_restarted(arguments: list[str]) -> None:
    assert restart_command(arguments, {}, ORIG_ARGV, False) is None


def test_an_interpreter_ignoring_the_environment_is_not_restarted() -> None:
    # `python -E` would not read the variable: a restart would change nothing, and then restart again.
    assert restart_command(["run"], {}, ORIG_ARGV, True) is None


@pytest.mark.parametrize(
    ("variable", "in_use", "pymalloc"),
    [
        (None, "pymalloc", True),
        ("", "pymalloc", True),
        ("malloc", "malloc", False),
        ("pymalloc_debug", "pymalloc_debug", True),
    ],
)
def test_the_allocator_in_use_is_read_from_the_variable(monkeypatch, variable, in_use, pymalloc) -> None:
    if variable is None:
        monkeypatch.delenv("PYTHONMALLOC", raising=False)
    else:
        monkeypatch.setenv("PYTHONMALLOC", variable)
    assert (allocator_in_use(), pymalloc_in_use()) == (in_use, pymalloc)


def _environment_of(pid: int) -> dict[str, str]:
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(pair.decode().partition("=")[::2] for pair in pairs if pair)


@pytest.mark.parametrize(
    "command", [None, [str(Path(sys.executable).parent / "sluice")]], ids=["-m", "script"]
)
def test_a_started_proxy_runs_on_glibcs_malloc_in_the_process_that_was_started(
    cluster, monkeypatch, command
) -> None:
    monkeypatch.delenv("PYTHONMALLOC", raising=False)
    with ProxyProcess(cluster.bootstrap, command=command) as proxy:
        # The same PID (exec), now with the variable its interpreter read at start, and says so.
        assert _environment_of(proxy.process.pid)["PYTHONMALLOC"] == "malloc"
        limits = proxy.wait_for_event("process_limits")
        assert limits["python_allocator"] == "malloc"
        assert len([e for e in proxy.events() if e.get("event") == "process_limits"]) == 1
