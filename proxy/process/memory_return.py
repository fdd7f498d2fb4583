"""After a spike of connections, give their memory back to the operating system.

Memory taken by many connections stayed with the process after they closed (docs/architecture.md has the
figures). Three things held it:

* reference cycles through every closed connection (its pipeline, filters, gate and transports all point
  back at it): nothing freed them but a full run of the cyclic collector, which after start-up's
  `gc.freeze` comes seldom. The connection now drops those references when it closes
  (proxy/data_path/connection.py), so its objects go at once;
* the interpreter's free lists (tuples, lists, dicts... kept for reuse) and glibc's heap, which keeps freed
  memory for the next allocation: only a full collection empties the first, only `malloc_trim` the second;
* pymalloc's arenas (1 MiB each), freed only when every object in them is: objects that outlive the
  spike pin some of the arenas it used. Some it can renew: the event loop's own free lists (250 handles,
  timers and future iterators each) and the method cache (free_list_renewal.py); the client ids the
  spike's clients left in the decoding cache it forgets. Objects the proxy keeps making (a timer each
  tick, the quota store's fetch) take the blocks their predecessors freed, in the spike's pools, and keep
  those arenas (docs/architecture.md has the probe's figures).

`MemoryReturn` watches the connection count: when it has fallen by a quarter (and by at least
MIN_FALL connections) from its high-water mark, it forgets the client ids, runs a full collection, renews
the loop's free lists and runs `malloc_trim(0)`, at most every CHECK_S, and logs `memory_returned` with
the process's resident size before and after. The collection walks the objects still alive, so it runs
when most of a spike's connections have gone.
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
from collections.abc import Callable
from typing import Protocol

from sluice.protocol.headers import forget_client_ids

from ..observability.log import get_logger
from .free_list_renewal import renew_free_lists
from .periodic import Periodic
from .process_memory import trim_heap

_log = get_logger("sluice.memory")

CHECK_S = 2.0
MIN_FALL = 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_bytes() -> int:
    """The process's resident set size (0 where /proc is not there)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def renew_running_loops_free_lists() -> None:
    renew_free_lists(asyncio.get_running_loop())  # the renewals returned are for tests


class ConnectionCount(Protocol):
    """What MemoryReturn needs of the connection registry: the count now, and its high-water mark."""

    peak: int

    def __len__(self) -> int: ...


class MemoryReturn(Periodic):
    """A service: after the connection count falls from a peak, collect and trim."""

    def __init__(
        self,
        connections: ConnectionCount,
        trim: Callable[[], bool] = trim_heap,
        resident: Callable[[], int] = resident_bytes,
        renew: Callable[[], None] = renew_running_loops_free_lists,
        forget: Callable[[], None] = forget_client_ids,
    ) -> None:
        super().__init__("memory_return", CHECK_S, self._check)
        self._connections = connections
        self._trim = trim
        self._resident = resident
        self._renew = renew
        self._forget = forget
        # When to look again after a fall (loop ms), or None.
        self._again_at: int | None = None

    def _check(self, now_ms: int) -> None:
        connections = self._connections
        live, peak = len(connections), connections.peak
        fall = peak - live
        if self._again_at is not None:
            if now_ms < self._again_at:
                return  # after a late tick, the grid's next one may come sooner than CHECK_S
            self._again_at = None
        elif fall < MIN_FALL or fall * 4 < peak:
            return
        else:
            # Closed connections finish closing in the event loop's next turns: look again once CHECK_S has
            # passed, at the first tick after it.
            self._again_at = now_ms + round(CHECK_S * 1000)
        connections.peak = live
        before = self._resident()
        started = time.perf_counter()
        self._forget()
        gc.collect()
        renewing = time.perf_counter()
        try:
            self._renew()
        except Exception:
            # The renewal leans on the allocator's and the loop's free lists as this Python has them; if it
            # fails, the trim (what gives glibc's heap back) still runs.
            _log.exception("free_list_renewal_failed")
        renewed = time.perf_counter()
        trimmed = self._trim()
        _log.info(
            "memory_returned",
            connections=live,
            peak_connections=peak,
            rss_mb_before=round(before / 2**20, 1),
            rss_mb_after=round(self._resident() / 2**20, 1),
            heap_trimmed=trimmed,
            took_ms=round((time.perf_counter() - started) * 1000, 1),
            free_lists_ms=round((renewed - renewing) * 1000, 1),
        )
