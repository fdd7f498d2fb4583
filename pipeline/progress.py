"""Progress for long jobs: a line per step, and while Spark works, its tasks done out of all every few s.

Spark's own console bar redraws one terminal line with carriage returns, which is lost in a log file or
CI output; these are whole lines on stderr, readable anywhere. `quiet=True` silences both (tests).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class Progress:
    def __init__(
        self,
        spark: SparkSession | None = None,
        quiet: bool = False,
        every_s: float = 10.0,
        out: TextIO | None = None,
    ) -> None:
        self._spark = spark
        self._quiet = quiet
        self._every_s = every_s
        self._out = out if out is not None else sys.stderr
        self._start = time.monotonic()

    def say(self, message: str) -> None:
        if not self._quiet:
            elapsed = time.monotonic() - self._start
            print(f"[sluice pipeline {elapsed:7.1f} s] {message}", file=self._out, flush=True)

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Announce `name`, report Spark's task counts while it runs, and its duration when done."""
        self.say(f"{name} ...")
        began = time.monotonic()
        stop = threading.Event()
        watcher = None
        if self._spark is not None and not self._quiet:
            watcher = threading.Thread(target=self._watch, args=(self._spark, name, stop), daemon=True)
            watcher.start()
        try:
            yield
        finally:
            stop.set()
            if watcher is not None:
                watcher.join()
        self.say(f"{name}: done in {time.monotonic() - began:.1f} s")

    def _watch(self, spark: SparkSession, name: str, stop: threading.Event) -> None:
        tracker = spark.sparkContext.statusTracker()
        while not stop.wait(self._every_s):
            try:
                stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
            except Exception:  # the JVM is going away; progress is best effort
                return
            done = sum(s.numCompletedTasks for s in stages if s is not None)
            total = sum(s.numTasks for s in stages if s is not None)
            if total:
                self.say(f"{name}: {done}/{total} tasks of {len(stages)} active stage(s)")
