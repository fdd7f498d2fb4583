"""Per-request controller-mutation quotas, strict and permissive (KIP-599, spec §4).

A CreateTopics / DeleteTopics / CreatePartitions request gets one quota object for its lifetime. Each
topic's charge (partitions created or deleted) goes through ``record``:

* **strict** (new request versions): if the bucket is already below zero the charge is refused with error
  89 and not recorded; otherwise it is recorded in full, even if that drives the bucket far below zero.
  So the charge that crosses zero is accepted and the next one is refused.
* **permissive** (old versions, and every librdkafka client): always recorded; a violation only sets
  the throttle.

The response's ``throttle_time_ms`` is ``max(0, lastThrottle - (now - lastRecorded))``: the throttle
shrinks by the time the request spent waiting after the charge.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from sluice.quota.errors import QuotaViolation, ThrottlingQuotaExceeded
from sluice.quota.sensor import QuotaSensor
from sluice.quota.throttle import to_int32, token_bucket_throttle_time

# API key -> first request version that gets the strict quota (spec §4).
CREATE_TOPICS: Final = 19
DELETE_TOPICS: Final = 20
CREATE_PARTITIONS: Final = 37
STRICT_SINCE_VERSION: Final = {CREATE_TOPICS: 6, DELETE_TOPICS: 5, CREATE_PARTITIONS: 3}


def is_strict(api_key: int, api_version: int) -> bool:
    """True when this request version gets the strict mutation quota; False (permissive) otherwise.

    APIs that mutate nothing are never strict.
    """
    since = STRICT_SINCE_VERSION.get(api_key)
    return since is not None and api_version >= since


class ControllerMutationQuota:
    """The quota of one mutation request. Kafka's unbounded quota (no quotas configured) is this base."""

    __slots__ = ()

    @property
    def is_exceeded(self) -> bool:
        """True once a strict quota has refused a charge with a positive throttle."""
        return False

    def record(self, permits: float, now_ms: int) -> None:
        """Charge ``permits`` at ``now_ms``; a strict quota raises :class:`ThrottlingQuotaExceeded`."""

    def throttle_time_ms(self, now_ms: int) -> int:
        """The throttle to put in the response at ``now_ms`` (int32, >= 0)."""
        return 0


UNBOUNDED_CONTROLLER_MUTATION_QUOTA: Final = ControllerMutationQuota()


class _TrackedMutationQuota(ControllerMutationQuota):
    __slots__ = ("_last_recorded_ms", "_last_throttle_ms", "_sensor")

    def __init__(self, sensor: QuotaSensor) -> None:
        self._sensor = sensor
        self._last_throttle_ms = 0
        self._last_recorded_ms = 0

    def _violated(self, violation: QuotaViolation, now_ms: int) -> None:
        self._last_throttle_ms = token_bucket_throttle_time(violation.value, violation.bound)
        self._last_recorded_ms = now_ms

    def throttle_time_ms(self, now_ms: int) -> int:
        return to_int32(max(0, self._last_throttle_ms - (now_ms - self._last_recorded_ms)))


class StrictControllerMutationQuota(_TrackedMutationQuota):
    """Check first (refuse while the bucket is below zero), then record without a check."""

    __slots__ = ()

    @property
    def is_exceeded(self) -> bool:
        return self._last_throttle_ms > 0

    def record(self, permits: float, now_ms: int) -> None:
        sensor = self._sensor
        try:
            sensor.check(now_ms)
        except QuotaViolation as violation:
            self._violated(violation, now_ms)
            raise ThrottlingQuotaExceeded(to_int32(self._last_throttle_ms)) from None
        sensor.record(permits, now_ms, False)


class PermissiveControllerMutationQuota(_TrackedMutationQuota):
    """Always record; a violation only remembers the throttle."""

    __slots__ = ()

    def record(self, permits: float, now_ms: int) -> None:
        sensor = self._sensor
        sensor.record(permits, now_ms, False)
        try:
            sensor.check(now_ms)
        except QuotaViolation as violation:
            self._violated(violation, now_ms)


def charge_topics(quota: ControllerMutationQuota, permits: Iterable[float], now_ms: int) -> list[bool]:
    """Charge each topic of one request in request order; True where accepted, False where refused (89).

    This is KRaft's order. Topics a broker rejects for other reasons (already exists, invalid, ...) are
    never charged, so leave them out of ``permits``.
    """
    accepted = []
    for charge in permits:
        try:
            quota.record(charge, now_ms)
        except ThrottlingQuotaExceeded:
            accepted.append(False)
        else:
            accepted.append(True)
    return accepted
