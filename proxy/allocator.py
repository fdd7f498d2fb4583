"""`sluice run` takes Python's objects from glibc's malloc, so memory a spike of connections took goes back
when they close.

Python's own small-object allocator (pymalloc) gives a 1 MiB arena back only when every object in it is
freed. After a spike of thousands of connections, the objects the proxy keeps making (its quota store's
follower, its periodic services' timers) take blocks in the spike's arenas and hold most of them for as
long as the process runs: 24-36 MB above the start after 5,000-9,900 connections closed, where glibc's
malloc, whose free pages `malloc_trim` returns wherever they lie, ends within 12 MB
(docs/architecture.md, "Memory comes back"). The price is a few per cent of CPU per request.

The allocator is chosen when the interpreter starts (the PYTHONMALLOC variable), before any of Sluice
runs, so the `sluice` command, started without it, starts itself again with PYTHONMALLOC=malloc: the same
process (exec keeps the PID, the descriptors and the arguments). An operator who sets PYTHONMALLOC chooses
for himself (`PYTHONMALLOC=pymalloc` keeps Python's allocator and its few per cent). Only the entry points
exec (`launch.py`); `cli.main`, called by a program of its own, never replaces that program. Nothing is
restarted where the restart would not give glibc's malloc or would lose something: another C library
(no `malloc_trim`: the CPU for nothing), a free-threaded Python (which refuses `malloc`), an interpreter
ignoring the environment (`-E`, `-I`: the variable would not be read), or a program that runs the
command line itself with arguments of its own (its whole command line would run again). In Python's
development mode (`-X dev`), which adds the allocator's debug hooks, the restart keeps them (`malloc_debug`).

Nothing here imports more than the standard library's os, sys and typing: it runs before everything else.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

ALLOCATOR_VARIABLE = "PYTHONMALLOC"
CHOSEN_ALLOCATOR = "malloc"
CHOSEN_ALLOCATOR_IN_DEV_MODE = "malloc_debug"
# The subcommands that are the proxy: the others are short-lived tools that return their memory at exit.
PROXY_SUBCOMMANDS = frozenset({"run"})
# What each value of the variable gives on an interpreter with the GIL ("" and unset: the default).
_ALLOCATORS = {"": "pymalloc", "default": "pymalloc", "debug": "pymalloc_debug"}


def restart_command(
    arguments: Sequence[str],
    environ: Mapping[str, str],
    orig_argv: Sequence[str],
    executable: str,
    *,
    ignores_environment: bool = False,
    glibc: bool = True,
    free_threaded: bool = False,
    dev_mode: bool = False,
) -> tuple[list[str], dict[str, str]] | None:
    """The argv and environment to exec `sluice` again with glibc's allocator, or None when this process
    keeps its own: not the proxy, an allocator the operator chose (even an empty variable, Python's
    default), or one of the cases the module's docstring names. `arguments` are the command line's (after
    the program), `orig_argv` the interpreter's own, which must end with them."""
    if not arguments or arguments[0] not in PROXY_SUBCOMMANDS:
        return None
    if ALLOCATOR_VARIABLE in environ or ignores_environment or not glibc or free_threaded:
        return None
    if list(orig_argv[len(orig_argv) - len(arguments) :]) != list(arguments):
        return None
    chosen = CHOSEN_ALLOCATOR_IN_DEV_MODE if dev_mode else CHOSEN_ALLOCATOR
    return [executable, *orig_argv[1:]], {**environ, ALLOCATOR_VARIABLE: chosen}


def choose_allocator() -> None:
    """Exec this interpreter again with glibc's allocator when `restart_command` says so; return
    otherwise, and when the exec fails (saying so on stderr: the process goes on with pymalloc)."""
    command = restart_command(
        sys.argv[1:],
        os.environ,
        sys.orig_argv,
        sys.executable,
        ignores_environment=bool(sys.flags.ignore_environment),
        glibc=_glibc(),
        free_threaded=_free_threaded(),
        dev_mode=bool(sys.flags.dev_mode),
    )
    if command is None:
        return
    argv, environ = command
    try:
        os.execve(argv[0], argv, environ)
    except OSError as exc:
        print(
            f"sluice: could not start again with {ALLOCATOR_VARIABLE}=malloc ({exc}); going on",
            file=sys.stderr,
        )


def allocator_in_use() -> str:
    """What Python's objects come from in this process, by the variable the interpreter read at start."""
    if _free_threaded():
        return "mimalloc"  # its only allocator but the debug one; not one Sluice chooses
    value = "" if sys.flags.ignore_environment else os.environ.get(ALLOCATOR_VARIABLE, "")
    return _ALLOCATORS.get(value, value)


def pymalloc_in_use() -> bool:
    return allocator_in_use() in ("pymalloc", "pymalloc_debug")


def _glibc() -> bool:
    try:
        return bool(os.confstr("CS_GNU_LIBC_VERSION"))
    except (ValueError, OSError, AttributeError):  # not a name this system knows; no confstr (Windows)
        return False


def _free_threaded() -> bool:
    return "t" in getattr(sys, "abiflags", "")
