"""When MemoryReturn collects and trims: after the connection count has fallen by a quarter (and by at
least MIN_FALL) from its high-water mark, and once more on the next check, as closed connections finish
closing; never while the count holds or grows. And what it forgets: the client ids the spike's clients
brought."""

from __future__ import annotations

import structlog

from sluice.protocol import headers
from sluice.protocol.headers import encode_request, parse_request_header
from sluice.proxy.process.memory_return import MIN_FALL, MemoryReturn


class Registry:
    def __init__(self) -> None:
        self.live = 0
        self.peak = 0

    def __len__(self) -> int:
        return self.live

    def open(self, n: int) -> None:
        self.live += n
        self.peak = max(self.peak, self.live)


def test_a_fall_from_the_peak_collects_and_trims_twice_then_waits_for_the_next_fall() -> None:
    registry = Registry()
    trims: list[int] = []
    renewals: list[int] = []
    service = MemoryReturn(
        registry,
        trim=lambda: trims.append(registry.live) or True,
        resident=lambda: 0,
        renew=lambda: renewals.append(registry.live),
    )
    registry.open(4_000)
    service._check(0)
    assert trims == []  # nothing fell
    registry.live = 3_100  # a fall of 900: under a quarter of the peak
    service._check(0)
    assert trims == []
    registry.live = 2_900  # 1,100 gone: more than a quarter
    service._check(0)
    registry.live = 2_800
    service._check(1_100)  # a tick soon after a late one: too soon for the second look
    assert trims == [2_900]
    service._check(2_000)  # the second look, as connections finish closing, CHECK_S after the first
    service._check(4_000)
    assert trims == [2_900, 2_800]
    assert renewals == trims  # the free lists are renewed each time, never otherwise
    assert registry.peak == 2_800  # the next spike is measured from here


def test_a_small_fall_is_left_alone_even_if_it_is_a_quarter() -> None:
    registry = Registry()
    trims: list[int] = []
    service = MemoryReturn(
        registry, trim=lambda: trims.append(registry.live) or True, resident=lambda: 0, renew=lambda: None
    )
    registry.open(2 * MIN_FALL)
    registry.live = MIN_FALL + 1  # half of them gone, but fewer than MIN_FALL
    service._check(0)
    assert trims == []


def test_a_renewal_that_fails_is_logged_and_the_heap_is_still_trimmed() -> None:
    registry = Registry()
    trims: list[int] = []

    def failing_renewal() -> None:
        raise AttributeError("this Python has no such free list")

    service = MemoryReturn(
        registry, trim=lambda: trims.append(registry.live) or True, resident=lambda: 0, renew=failing_renewal
    )
    registry.open(4_000)
    registry.live = 2_000
    with structlog.testing.capture_logs() as logs:
        service._check(0)
    assert trims == [2_000]
    assert [entry["event"] for entry in logs] == ["free_list_renewal_failed", "memory_returned"]


def test_the_client_ids_a_spike_brought_are_forgotten_when_memory_is_returned() -> None:
    headers.forget_client_ids()  # whatever earlier tests left: the cache empties itself when full
    registry = Registry()
    service = MemoryReturn(registry, trim=lambda: True, resident=lambda: 0, renew=lambda: None)
    registry.open(4_000)
    for client in range(300):  # each of the spike's clients with its own id, cached as it is decoded
        parse_request_header(encode_request(18, 0, client, f"client-{client}", b""))
    assert len(headers._client_id_cache) >= 300
    registry.live = 2_000
    service._check(0)
    assert headers._client_id_cache == {}
    assert parse_request_header(encode_request(18, 0, 1, "client-1", b"")).client_id == "client-1"
