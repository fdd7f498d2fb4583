"""Renewing a free list: its objects go back to the allocator and new ones, made in pools of their own,
take their place (proxy/process/free_list_renewal.py). Shown on asyncio's future iterators, a real free
list of 255 objects in the C accelerator: the objects a free list holds are the ones it hands out next."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
import uvloop

from sluice.proxy.process.free_list_renewal import (
    FUTURE_ITERATOR_FREE_LIST,
    LOOP_FREE_LIST,
    POOL_BYTES,
    blocks_per_pool,
    renew,
    renew_free_lists,
)


@pytest.fixture
def future() -> Iterator[asyncio.Future[None]]:
    loop = asyncio.new_event_loop()
    try:
        yield loop.create_future()
    finally:
        loop.close()


def fill_the_free_list(future: asyncio.Future[None]) -> None:
    iterators = [future.__await__() for _ in range(2 * FUTURE_ITERATOR_FREE_LIST)]
    del iterators  # the first 255 freed fill the list


def next_made(future: asyncio.Future[None]) -> set[int]:
    """The addresses of the iterators the free list hands out next (the objects it holds)."""
    iterators = [future.__await__() for _ in range(FUTURE_ITERATOR_FREE_LIST)]
    return {id(iterator) for iterator in iterators}


def test_the_free_list_is_refilled_with_new_objects_from_pools_of_their_own() -> None:
    # In a fresh interpreter on pymalloc: in a test worker that ran other tests first, the size class's
    # pools may hold more freed blocks than MAX_MADE new objects fill, and a renewal then gives the free
    # list its own objects back, by design (the next test); this one is of a renewal that reaches pools of
    # its own, which needs a heap that other tests did not leave full of holes.
    done = subprocess.run(
        [sys.executable, __file__],
        env={**os.environ, "PYTHONMALLOC": "pymalloc"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "refilled from pools of their own"


def _refilled_from_pools_of_their_own() -> None:
    loop = asyncio.new_event_loop()
    try:
        future = loop.create_future()
        fill_the_free_list(future)
        renewal = renew(future.__await__, FUTURE_ITERATOR_FREE_LIST)
        taken = {id(obj) for obj in renewal.release[:FUTURE_ITERATOR_FREE_LIST]}
        refill = {id(obj) for obj in renewal.refill}
        pools = {address // POOL_BYTES for address in refill}
        made_per_pool = {pool: 0 for pool in pools}
        for obj in renewal.refill + renewal.release[FUTURE_ITERATOR_FREE_LIST:]:
            if id(obj) // POOL_BYTES in made_per_pool:
                made_per_pool[id(obj) // POOL_BYTES] += 1
        # every pool the new free list lies in was filled by new objects alone
        assert set(made_per_pool.values()) == {blocks_per_pool(renewal.refill[0])}, made_per_pool
        renewal.finish()
        handed_out = next_made(future)
        assert handed_out == refill
        assert handed_out.isdisjoint(taken)
    finally:
        loop.close()
    print("refilled from pools of their own")


def test_a_free_list_not_renewed_gets_its_own_objects_back(future) -> None:
    fill_the_free_list(future)
    renewal = renew(future.__await__, FUTURE_ITERATOR_FREE_LIST, max_made=0)
    taken = {id(obj) for obj in renewal.refill}
    renewal.finish()
    assert next_made(future) == taken


def test_the_loops_handles_are_renewed_once_the_loop_has_run_the_cancelled_ones() -> None:
    async def renewed_and_handed_out() -> tuple[set[int], set[int], set[int]]:
        loop = asyncio.get_running_loop()
        handles = renew_free_lists(loop)[-1]
        taken = {id(handle) for handle in handles.release[:LOOP_FREE_LIST]}
        refill = {id(handle) for handle in handles.refill}
        # The event: the renewal gave the handles back. The loop runs call_soon callbacks in the order they
        # were queued, so one queued now runs after the renewal's handles.finish.
        given_back = loop.create_future()
        loop.call_soon(given_back.set_result, None)
        await given_back
        handed_out = [loop.call_soon(lambda: None) for _ in range(LOOP_FREE_LIST)]
        return taken, refill, {id(handle) for handle in handed_out}

    taken, refill, handed_out = uvloop.run(renewed_and_handed_out())
    assert len(refill) == len(taken) == LOOP_FREE_LIST
    # The few handles the loop made while the list was empty (the task's steps, the one giving the
    # handles back) were freed first and took a place or two in it.
    assert len(handed_out & refill) >= LOOP_FREE_LIST - 5
    assert handed_out.isdisjoint(taken)


def test_the_loops_timers_are_renewed_once_their_libuv_handles_have_closed() -> None:
    # A cancelled uvloop timer is freed only by its libuv handle's close callback, last closed first: were
    # the renewal to give its timers back at once, the free list would take the last ones made instead.
    async def renewed_and_handed_out() -> tuple[set[int], set[int], set[int]]:
        loop = asyncio.get_running_loop()
        timers = renew_free_lists(loop)[1]
        taken = {id(timer) for timer in timers.release[:LOOP_FREE_LIST]}
        refill = {id(timer) for timer in timers.refill}
        # The event: the renewal gave the timers back, a turn after this one (after libuv's close
        # callbacks); a callback queued the same way, after it, runs after timers.finish.
        given_back = loop.create_future()
        loop.call_soon(loop.call_soon, given_back.set_result, None)
        await given_back
        handed_out = [loop.call_later(100, lambda: None) for _ in range(LOOP_FREE_LIST)]
        ids = {id(timer) for timer in handed_out}
        for timer in handed_out:
            timer.cancel()
        return taken, refill, ids

    taken, refill, handed_out = uvloop.run(renewed_and_handed_out())
    assert len(refill) == len(taken) == LOOP_FREE_LIST
    assert len(handed_out & refill) >= LOOP_FREE_LIST - 5
    assert handed_out.isdisjoint(taken)


def test_a_loop_in_debug_mode_is_left_alone() -> None:
    async def renewed() -> list[object]:
        return list(renew_free_lists(asyncio.get_running_loop()))

    assert uvloop.run(renewed(), debug=True) == []


def test_nothing_is_renewed_where_objects_do_not_come_from_pymalloc(monkeypatch) -> None:
    monkeypatch.setenv("PYTHONMALLOC", "malloc")

    async def renewed() -> list[object]:
        return list(renew_free_lists(asyncio.get_running_loop()))

    assert uvloop.run(renewed()) == []


if __name__ == "__main__":  # the first test's renewal, in the fresh interpreter it starts
    _refilled_from_pools_of_their_own()
