"""Kafka's retry backoff (KIP-580) for the proxy's own client: exact waits from an injected random source."""

from __future__ import annotations

import pytest

from sluice.protocol.client_requests import CLIENT_VERSIONS, FETCH, METADATA, PRODUCE, choose_version
from sluice.proxy.kafka_client import RetryPolicy


def test_waits_double_from_100_ms_to_the_1_s_cap() -> None:
    backoff = RetryPolicy().backoff(rand=lambda: 0.5)  # the middle of the jitter: no jitter
    assert [round(backoff.next(), 6) for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert backoff.attempts == 6


@pytest.mark.parametrize(("rand", "factor"), [(0.0, 0.8), (0.999999, 1.2)])
def test_jitter_is_plus_or_minus_20_percent(rand: float, factor: float) -> None:
    backoff = RetryPolicy().backoff(rand=lambda: rand)
    assert backoff.next() == pytest.approx(0.1 * factor, rel=1e-5)
    for _ in range(10):
        wait = backoff.next()
    assert wait == pytest.approx(1.0 * factor, rel=1e-5)


def test_the_newest_version_both_sides_speak() -> None:
    mock = {PRODUCE: (0, 10), FETCH: (0, 16), METADATA: (0, 13)}
    assert choose_version(PRODUCE, mock) == CLIENT_VERSIONS[PRODUCE][1]
    assert choose_version(FETCH, {FETCH: (4, 6)}) == 6
    assert choose_version(METADATA, {METADATA: (0, 3)}) is None  # too old for allow_auto_topic_creation
    assert choose_version(PRODUCE, {}) is None
