"""Waiting in tests for the event a test needs (a metric, a count, a state), never for a fixed time.

A poll every `interval_s` until the condition holds: the interval only bounds how late the test notices,
and the deadline only stops a test that would otherwise hang; a loaded machine makes a wait longer,
never a test wrong.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(
    condition: Callable[[], object], what: str, timeout_s: float = 60.0, interval_s: float = 0.05
) -> None:
    """Until `condition()` is true; an AssertionError naming `what` if `timeout_s` passes first."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:g} s: {what}")
        time.sleep(interval_s)
