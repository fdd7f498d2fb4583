"""Accepting's budget of descriptors, on counts and a clock given by the test: a connection is accepted
only while its two descriptors fit under the limit less the reserve; descriptors are counted for real
only near that line (estimated from the connections elsewhere), at most every REMEASURE_S."""

from __future__ import annotations

from sluice.proxy.listeners.accepting import REMEASURE_S, Accepting


class Process:
    """Open descriptors: `own` of its own and two per connection."""

    def __init__(self, own: int, limit: int) -> None:
        self.own = own
        self.connections = 0
        self.limit = limit
        self.counts = 0  # how many times /proc/self/fd was read
        self.now = 0.0

    def count_open(self) -> int:
        self.counts += 1
        return self.own + 2 * self.connections


def accepting(process: Process, reserved: int) -> Accepting:
    return Accepting(
        reserved,
        lambda: process.connections,
        count_open=process.count_open,
        limit=lambda: process.limit,
        clock=lambda: process.now,
    )


async def test_connections_are_accepted_until_the_reserve_and_counted_only_near_it() -> None:
    process = Process(own=40, limit=10_000)
    budget = accepting(process, reserved=100)
    counted_at_start = process.counts
    while budget.may_accept():
        process.connections += 1
        process.now += 0.001  # a connection a millisecond
    # 40 + 2 x 4,930 = 9,900: the next would take the reserve's descriptors.
    assert process.connections == 4_930
    assert budget.paused_since is not None
    # Counted for real only in the last 100 descriptors (50 connections), at most every REMEASURE_S.
    assert process.counts - counted_at_start <= 1 + 50 * 0.001 / REMEASURE_S + 1


async def test_descriptors_of_its_own_opened_since_the_last_count_are_found_near_the_line() -> None:
    process = Process(own=40, limit=1_000)
    budget = accepting(process, reserved=100)
    process.own = 120  # the proxy's own client opened connections meanwhile
    process.connections = 370  # estimated 40 + 740 = 780: near the line (900), so counted: 860
    process.now = 1.0
    assert budget.may_accept()  # 862 <= 900
    process.connections = 390  # 120 + 780 + 2 > 900
    assert not budget.may_accept()
