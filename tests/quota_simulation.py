"""A flat-out producer against a produce quota, on a simulated clock (the book's comb, and more).

The client model, which is the same for every way a client can react to a throttle:

* The connection handles **one request at a time**. Kafka reads a request, mutes the connection until the
  response is ready, and (when throttled) keeps it muted until the throttle ends; a proxy that mutes
  stops forwarding the connection's requests the same way.
* Unthrottled, the producer sends its next request ``send_interval_ms`` after the previous one: its
  flat-out pace (the book measured about 9,000 records/s).
* Throttled for X ms, the next request is handled X ms later (or after ``send_interval_ms``, if that is
  longer). A KIP-219 client (the Java client) waits X itself before sending; a client that ignores the
  field (librdkafka) has its pipelined requests wait in the muted socket; a pre-KIP-219 broker holds the
  response for X. All three give the quota the same sequence of (time, bytes), so one model covers them.
* The quota records each request at the (integer) millisecond it is handled.

:func:`simulate_flat_out` drives any ``record(bytes, now_ms) -> throttle_ms`` function;
:func:`simulate_produce_quota` builds a produce-quota manager for one of the three enforcement styles.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from sluice.quota.entities import QuotaEntity
from sluice.quota.keys import QuotaKey, SensorKind
from sluice.quota.managers import ClientQuotaManager
from sluice.quota.quota_config import QuotaWindow

# One 10,000-byte record value with its 8-byte key, one record per 16 KiB batch (two would not fit), plus
# the record, batch and Produce request overheads: "just over 10 kB", as the book puts it.
BOOK_REQUEST_BYTES = 10_120
# The book's unthrottled producer: about 9,000 records (= requests) per second.
BOOK_SEND_INTERVAL_MS = 0.11
BOOK_PRODUCER_BYTE_RATE = 100_000


class Enforcement(StrEnum):
    """How the produce quota is measured in a simulation."""

    LEGACY = "legacy"  # Kafka <= 3.7 sampled windows
    WINDOW = "window"  # Kafka >= 3.8 sampled windows
    TOKEN_BUCKET = "token_bucket"  # Sluice's smooth shaping


@dataclass(frozen=True, slots=True)
class FlatOutProducer:
    """Request size and unthrottled pace of a producer that sends as fast as it can."""

    request_bytes: int = BOOK_REQUEST_BYTES
    send_interval_ms: float = BOOK_SEND_INTERVAL_MS


@dataclass(slots=True)
class SimulationResult:
    """Every request the quota saw, and the bytes per simulated second."""

    duration_ms: int
    sends_ms: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    throttles_ms: list[int] = field(default_factory=list)

    def per_second(self) -> list[int]:
        """Bytes handled in each whole second [k*1000, (k+1)*1000) of the run."""
        series = [0] * (self.duration_ms // 1000)
        for t, size in zip(self.sends_ms, self.sizes, strict=True):
            second = t // 1000
            if second < len(series):
                series[second] += size
        return series

    def bytes_between(self, start_ms: int, end_ms: int) -> int:
        """Bytes of the requests handled in [start_ms, end_ms)."""
        return sum(s for t, s in zip(self.sends_ms, self.sizes, strict=True) if start_ms <= t < end_ms)


def coefficient_of_variation(series: list[int] | list[float]) -> float:
    """Population standard deviation / mean (0 for an empty or all-zero series)."""
    if not series:
        return 0.0
    mean = math.fsum(series) / len(series)
    if mean == 0:
        return 0.0
    variance = math.fsum((x - mean) ** 2 for x in series) / len(series)
    return math.sqrt(variance) / mean


def simulate_flat_out(
    record: Callable[[int, int], int], producer: FlatOutProducer, duration_ms: int
) -> SimulationResult:
    """Run ``producer`` flat out for ``duration_ms`` against ``record(bytes, now_ms) -> throttle_ms``."""
    result = SimulationResult(duration_ms)
    size = producer.request_bytes
    interval = producer.send_interval_ms
    sends, sizes, throttles = result.sends_ms, result.sizes, result.throttles_ms
    t = 0.0
    while t < duration_ms:
        now_ms = int(t)
        throttle_ms = record(size, now_ms)
        sends.append(now_ms)
        sizes.append(size)
        throttles.append(throttle_ms)
        t += throttle_ms if throttle_ms > interval else interval
    return result


def produce_quota_manager(
    enforcement: Enforcement, bytes_per_s: float, window: QuotaWindow | None = None
) -> ClientQuotaManager:
    """A produce-quota manager with a (user, client-id) quota on ``("alice", "pump")``, as in the book."""
    kind = SensorKind.TOKEN_BUCKET if enforcement is Enforcement.TOKEN_BUCKET else SensorKind.WINDOW
    manager = ClientQuotaManager(
        QuotaKey.PRODUCER_BYTE_RATE, window, kind, legacy_windows=enforcement is Enforcement.LEGACY
    )
    manager.update_quota(QuotaEntity("alice", "pump"), bytes_per_s)
    return manager


def simulate_produce_quota(
    enforcement: Enforcement,
    duration_ms: int,
    bytes_per_s: float = BOOK_PRODUCER_BYTE_RATE,
    producer: FlatOutProducer | None = None,
    window: QuotaWindow | None = None,
) -> SimulationResult:
    """The book's experiment: alice/pump producing flat out against ``producer_byte_rate``."""
    manager = produce_quota_manager(Enforcement(enforcement), bytes_per_s, window)

    def record(size: int, now_ms: int) -> int:
        return manager.record_and_get_throttle_ms("alice", "pump", size, now_ms)

    return simulate_flat_out(record, FlatOutProducer() if producer is None else producer, duration_ms)
