"""`sluice run` starts itself again with glibc's malloc for Python's objects, unless the operator chose an
allocator (proxy/allocator.py): which process restarts, with what, and that the real command does."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from proxy_process import ProxyProcess

from sluice.proxy.allocator import allocator_in_use, pymalloc_in_use, restart_command

PYTHON = "/venv/bin/python3.11"
ORIG_ARGV = ["/venv/bin/python", "-X", "faulthandler", "-m", "sluice.proxy", "run", "--config", "sluice.yaml"]
ARGUMENTS = ["run", "--config", "sluice.yaml"]


def restart(arguments: list[str] = ARGUMENTS, environ: dict[str, str] | None = None, **flags: bool):
    return restart_command(arguments, {} if environ is None else environ, ORIG_ARGV, PYTHON, **flags)


def test_the_proxy_restarts_on_glibcs_malloc_with_its_interpreter_flags_and_arguments() -> None:
    environ = {"PATH": "/usr/bin", "NOTIFY_SOCKET": "/run/systemd/notify"}
    assert restart(environ=environ) == (
        [PYTHON, "-X", "faulthandler", "-m", "sluice.proxy", "run", "--config", "sluice.yaml"],
        {"PATH": "/usr/bin", "NOTIFY_SOCKET": "/run/systemd/notify", "PYTHONMALLOC": "malloc"},
    )
    assert "PYTHONMALLOC" not in environ  # the caller's mapping is left as it was


def test_in_development_mode_the_restart_keeps_the_allocators_debug_hooks() -> None:
    restarted = restart(dev_mode=True)
    assert restarted is not None and restarted[1]["PYTHONMALLOC"] == "malloc_debug"


@pytest.mark.parametrize("chosen", ["pymalloc", "malloc", "malloc_debug", "default", ""])
def test_an_allocator_the_operator_chose_is_kept(chosen: str) -> None:
    # Also the restarted process itself, which finds the variable set, so it never restarts twice.
    assert restart(environ={"PYTHONMALLOC": chosen}) is None


@pytest.mark.parametrize("arguments", [["check-config", "--config", "x"], ["pipeline", "report"], []])
def test_other_subcommands_are_not_restarted(arguments: list[str]) -> None:
    assert restart(arguments) is None


@pytest.mark.parametrize(
    "flag",
    [
        "ignores_environment",  # `python -E`: the variable would not be read, and the restart would loop
        "free_threaded",  # refuses PYTHONMALLOC=malloc at start: the proxy would not start at all
    ],
)
def test_interpreters_that_would_not_take_the_allocator_are_not_restarted(flag: str) -> None:
    assert restart(**{flag: True}) is None


def test_without_glibc_there_is_nothing_to_gain_and_no_restart() -> None:
    # Another C library's malloc has no malloc_trim: the CPU would be paid for nothing.
    assert restart(glibc=False) is None


def test_a_program_running_the_command_line_with_arguments_of_its_own_is_not_run_again() -> None:
    # A host that set sys.argv itself and ran sluice.proxy: exec would start the whole host again.
    orig_argv = ["/venv/bin/python", "host.py", "--port", "1"]
    assert restart_command(ARGUMENTS, {}, orig_argv, PYTHON) is None


@pytest.mark.parametrize(
    ("variable", "in_use", "pymalloc"),
    [
        (None, "pymalloc", True),
        ("", "pymalloc", True),
        ("default", "pymalloc", True),
        ("debug", "pymalloc_debug", True),
        ("pymalloc_debug", "pymalloc_debug", True),
        ("malloc", "malloc", False),
        ("malloc_debug", "malloc_debug", False),
    ],
)
def test_the_allocator_in_use_is_read_from_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str | None, in_use: str, pymalloc: bool
) -> None:
    if variable is None:
        monkeypatch.delenv("PYTHONMALLOC", raising=False)
    else:
        monkeypatch.setenv("PYTHONMALLOC", variable)
    assert (allocator_in_use(), pymalloc_in_use()) == (in_use, pymalloc)


def _proc(pid: int, name: str) -> list[str]:
    return [part.decode() for part in Path(f"/proc/{pid}/{name}").read_bytes().split(b"\0") if part]


@pytest.mark.parametrize(
    "command",
    [[sys.executable, "-W", "default", "-m", "sluice.proxy"], [str(Path(sys.executable).parent / "sluice")]],
    ids=["-m", "script"],
)
def test_a_started_proxy_runs_on_glibcs_malloc_in_the_process_that_was_started(
    cluster, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    monkeypatch.delenv("PYTHONMALLOC", raising=False)
    with ProxyProcess(cluster.bootstrap, command=command) as proxy:
        pid = proxy.process.pid  # the PID started, which exec keeps
        assert "PYTHONMALLOC=malloc" in _proc(pid, "environ")
        # Started again with what it was started with: the interpreter's flags and the arguments.
        assert _proc(pid, "cmdline")[-3:-1] == ["run", "--config"]
        if command[0] == sys.executable:
            assert _proc(pid, "cmdline")[1:5] == ["-W", "default", "-m", "sluice.proxy"]
        # The start-up event, logged once (after the restart), names the allocator in use.
        limits = [e for e in proxy.events() if e.get("event") == "process_limits"]
        assert [e["python_allocator"] for e in limits] == ["malloc"]
