"""RequestMemory: reservations in turn, waiters granted when released, never beyond the limit."""

from __future__ import annotations

from sluice.proxy.data_path.request_memory import RequestMemory


def test_waiters_are_granted_in_turn_when_memory_is_released() -> None:
    memory = RequestMemory(100)
    granted: list[str] = []
    assert memory.reserve(60)
    assert not memory.reserve(50)
    memory.wait("a", 50, lambda: granted.append("a"))
    assert not memory.reserve(10)  # someone waits: a small frame does not overtake it
    memory.wait("b", 10, lambda: granted.append("b"))
    memory.release(60)
    assert granted == ["a", "b"] and memory.used == 60 and memory.waiting == 0


def test_a_cancelled_waiter_is_skipped_and_the_limit_holds() -> None:
    memory = RequestMemory(100)
    granted: list[str] = []
    assert memory.reserve(100)
    memory.wait("a", 80, lambda: granted.append("a"))
    memory.wait("b", 30, lambda: granted.append("b"))
    memory.cancel("a")
    memory.release(50)
    assert granted == ["b"] and memory.used == 80
    assert memory.waits == 2
