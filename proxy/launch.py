"""The entry point of the `sluice` command and of `python -m sluice.proxy`: the allocator first, then the
command line.

`sluice run` may start itself again on another allocator (`allocator.py`), which only a new interpreter can
take, so the choice is made before the command line and its configuration modules are imported (130 ms
that an exec would spend twice). `cli.main`, which programs and tests call themselves, never execs.
"""

from __future__ import annotations

from .allocator import choose_allocator


def main() -> int:
    choose_allocator()
    from .cli import main as command_line  # after the choice: see above

    return command_line()
