"""After a spike, renew the objects the event loop keeps for reuse, so that pymalloc can free the spike's
arenas.

pymalloc (Python's allocator for objects of up to 512 bytes) takes memory from the system in 1 MiB arenas
of 16 KiB pools and gives an arena back only when every block in it is free. After a spike of connections
as many objects are alive as before it, but a few hundred born during the spike pin arenas it took:

* the free lists of the event loop: uvloop keeps the last 250 handles and 250 timer handles freed, asyncio
  the last 255 future iterators, and the spike's end freed those;
* the interpreter's method cache, whose entries keep the attribute name they were looked up by: C code
  builds a new name string for each lookup (`"utcoffset"`, for each log line's timestamp), so the entries
  the spike's lookups filled hold strings born during it (`sys._clear_type_cache` empties it).

`renew_free_lists` takes each free list's objects out and makes new ones until enough of them fill pools
of their own: pymalloc serves its partly used pools first and carves a new pool, from its fullest arena,
only when none is left, so a pool holding nothing but new objects is one carved beside the long-lived
objects. Those are given back first, refilling the free list; then the spike's and the other new ones go
back to pymalloc, which frees the pools and arenas they emptied. It only reads addresses (`id`, which is
the address in CPython) and frees Python objects: where pymalloc's layout is not the one assumed here, no
pool reads as whole, and the free list gets its own objects back.
"""

from __future__ import annotations

import asyncio
import sys
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from ..allocator import pymalloc_in_use

POOL_BYTES = 16 * 1024  # pymalloc's pool (Python 3.10 on); a block's pool is its address // POOL_BYTES
POOL_HEADER_BYTES = 48
BLOCK_ALIGNMENT = 16
LOOP_FREE_LIST = 250  # uvloop's Handle and TimerHandle free lists
FUTURE_ITERATOR_FREE_LIST = 255  # asyncio's (C) future iterators
# New objects per free list at most: the worst case, every list making them all, held a loaded loop 58 ms.
MAX_MADE = 12_288
BATCH = 256


@dataclass
class Renewal:
    """One free list's objects, held until `finish` gives them back in the order that renews the list."""

    refill: list[object] = field(default_factory=list)  # given back first: they refill the free list
    release: list[object] = field(default_factory=list)  # given back after it is full: to pymalloc

    def finish(self) -> None:
        self.refill.clear()
        self.release.clear()


def blocks_per_pool(obj: object) -> int:
    """How many objects of `obj`'s size one pymalloc pool holds."""
    block = -(-sys.getsizeof(obj) // BLOCK_ALIGNMENT) * BLOCK_ALIGNMENT
    return (POOL_BYTES - POOL_HEADER_BYTES) // block


def renew(make: Callable[[], object], size: int, max_made: int = MAX_MADE) -> Renewal:
    """Take the `size` objects of `make`'s free list out, and make new ones until `size` of them lie in
    pools holding nothing else (or `max_made` were made: the free list then gets its own back)."""
    taken = [make() for _ in range(size)]
    made: list[object] = []
    per_pool: Counter[int] = Counter()
    pool_of = POOL_BYTES.__rfloordiv__  # address -> pool, with map() looping in C
    while len(made) < max_made:
        batch = [make() for _ in range(BATCH)]
        made += batch
        per_pool.update(map(pool_of, map(id, batch)))
        capacity = blocks_per_pool(batch[-1])
        whole = {pool for pool, count in per_pool.items() if count == capacity}
        if len(whole) * capacity >= size:
            refill = [obj for obj in made if id(obj) // POOL_BYTES in whole][:size]
            kept = {id(obj) for obj in refill}
            return Renewal(refill, taken + [obj for obj in made if id(obj) not in kept])
    return Renewal(refill=taken, release=made)


def _cancelled_handle(loop: asyncio.AbstractEventLoop) -> asyncio.Handle:
    handle = loop.call_soon(_nothing)
    handle.cancel()
    return handle


def _cancelled_timer(loop: asyncio.AbstractEventLoop) -> asyncio.TimerHandle:
    timer = loop.call_later(3600, _nothing)
    timer.cancel()
    return timer


def _nothing() -> None:
    pass


def renew_free_lists(loop: asyncio.AbstractEventLoop) -> list[Renewal]:
    """Renew the loop's free lists (its handles' and timers' over the next turns) and empty the method
    cache; the renewals (future iterators, timers, handles) are returned for a test to look at. Nothing is
    done where Python's objects do not come from pymalloc (PYTHONMALLOC=malloc: no pools to empty, and
    every list would make its MAX_MADE objects for nothing, 27-29 ms), nor on a loop in debug mode, where
    every handle made records a stack (12,288 of them held the loop 0.4 s)."""
    if loop.get_debug() or not pymalloc_in_use():
        return []
    future = loop.create_future()
    iterators = renew(future.__await__, FUTURE_ITERATOR_FREE_LIST)
    timers = renew(partial(_cancelled_timer, loop), LOOP_FREE_LIST)
    handles = renew(partial(_cancelled_handle, loop), LOOP_FREE_LIST)
    iterators.finish()
    # The loop's queue holds the cancelled handles until it runs them (by skipping), in order: after them.
    loop.call_soon(handles.finish)
    # A cancelled uvloop timer is held by its libuv handle until that handle's close callback, at the end
    # of this turn, and libuv closes the last first: given back now, the free list would take the last
    # timers made, not `refill`. The turn after this one runs after those callbacks.
    loop.call_soon(loop.call_soon, timers.finish)
    _clear_method_cache()
    return [iterators, timers, handles]


def _clear_method_cache() -> None:
    # sys._clear_type_cache is deprecated from Python 3.13 (warning from 3.14) in favour of
    # sys._clear_internal_caches, which also empties the method cache.
    clear = getattr(sys, "_clear_internal_caches", None) or getattr(sys, "_clear_type_cache", None)
    if clear is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            clear()
