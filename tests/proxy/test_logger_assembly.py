"""`sluice run` assembles every module's logger at start-up (`assemble_loggers`), where structlog would
assemble each at its first line and keep it: a first line during a spike of connections would leave the
kept logger's objects among the spike's, pinning arenas pymalloc could otherwise free (docs/architecture.md).

Run in a child interpreter: assembled loggers keep the configuration they were assembled with, which this
test process's other tests (capturing logs) must not inherit."""

from __future__ import annotations

import subprocess
import sys

# Counts the memory blocks a logger's first line leaves allocated by structlog's assembly of the logger
# (its _config and _output modules), with and without assemble_loggers before it.
PROBE = """
import gc, sys, tracemalloc
from sluice.proxy.observability import log
first = log.get_logger("sluice.test.first")
later = log.get_logger("sluice.test.later")
log.configure_logging("info", "json")
if sys.argv[1] == "assemble":
    log.assemble_loggers()
first.info("warm_up")  # what any first line makes once per process (the renderer's caches)
gc.collect()
tracemalloc.start()
before = tracemalloc.take_snapshot()
later.info("first_line")
gc.collect()
kept = tracemalloc.take_snapshot().compare_to(before, "filename")
print(sum(s.count_diff for s in kept if s.count_diff > 0 and s.traceback[0].filename.endswith(
    ("structlog/_config.py", "structlog/_output.py"))))
"""


def blocks_kept_by_first_line(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=60, check=True
    )
    return int(done.stdout.strip())


def test_an_assembled_logger_keeps_nothing_new_from_its_first_line() -> None:
    assert blocks_kept_by_first_line("lazy") > 0  # structlog's own way: assembled and kept at the first line
    assert blocks_kept_by_first_line("assemble") == 0


def test_a_logger_made_after_the_assembly_is_assembled_as_it_is_made() -> None:
    code = """
from sluice.proxy.observability import log
log.configure_logging("info", "json")
log.assemble_loggers()
made = log.get_logger("sluice.test.after")
print("bind" in vars(made))  # the lazy proxy keeps its assembled logger's bind once assembled
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "True"
