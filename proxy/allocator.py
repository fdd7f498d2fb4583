"""`sluice run` takes Python's objects from the C library's malloc, so memory a spike of connections took
goes back when they close.

Python's own small-object allocator (pymalloc) gives a 1 MiB arena back only when every object in it is
freed. After a spike of thousands of connections, the objects the proxy keeps making (its quota store's
follower, its periodic services' timers) take blocks in the spike's arenas and hold most of them for as
long as the process runs: 24-36 MB above the start after 5,000-9,000 connections closed, where glibc's
malloc, whose free pages `malloc_trim` returns wherever they lie, ends within 11 MB
(docs/architecture.md, "Memory comes back"). The price is a few per cent of CPU per request.

The allocator is chosen when the interpreter starts (the PYTHONMALLOC variable), before any of Sluice
runs, so the `sluice` command, started without it, starts itself again with PYTHONMALLOC=malloc: the same
process (exec keeps the PID, the descriptors and the arguments). An operator who sets PYTHONMALLOC chooses
for himself (`PYTHONMALLOC=pymalloc` keeps Python's allocator and its few per cent). Only the entry points
exec (`launch.py`); `cli.main`, called by a program of its own, never replaces that program.

Nothing here may import more than the standard library's os and sys: it runs before everything else.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

ALLOCATOR_VARIABLE = "PYTHONMALLOC"
CHOSEN_ALLOCATOR = "malloc"
# The subcommands that are the proxy: the others are short-lived tools that return their memory at exit.
PROXY_SUBCOMMANDS = frozenset({"run"})


def restart_command(
    arguments: Sequence[str], environ: Mapping[str, str], orig_argv: Sequence[str], ignores_environment: bool
) -> tuple[list[str], dict[str, str]] | None:
    """The interpreter's arguments and environment to start `sluice` again with the chosen allocator, or
    None when this process keeps its own: not the proxy, an allocator the operator chose (even an empty
    variable, which is Python's default), or an interpreter that ignores the environment (`python -E`/`-I`,
    where the variable would be set and not read, and the restart would not know it had happened)."""
    if not arguments or arguments[0] not in PROXY_SUBCOMMANDS:
        return None
    if ALLOCATOR_VARIABLE in environ or ignores_environment:
        return None
    return list(orig_argv), {**environ, ALLOCATOR_VARIABLE: CHOSEN_ALLOCATOR}


def choose_allocator() -> None:
    """Exec this interpreter again with the chosen allocator when `restart_command` says so; return
    otherwise, and when the exec fails (the process goes on with pymalloc, as the start-up log says)."""
    command = restart_command(sys.argv[1:], os.environ, sys.orig_argv, bool(sys.flags.ignore_environment))
    if command is None:
        return
    argv, environ = command
    try:
        os.execve(sys.executable, [sys.executable, *argv[1:]], environ)
    except OSError:
        return


def allocator_in_use() -> str:
    """What Python's objects come from in this process, by the variable the interpreter read at start
    (empty or ignored: Python's default, pymalloc)."""
    if sys.flags.ignore_environment:
        return "pymalloc"
    return os.environ.get(ALLOCATOR_VARIABLE) or "pymalloc"


def pymalloc_in_use() -> bool:
    return allocator_in_use() in ("pymalloc", "pymalloc_debug")
