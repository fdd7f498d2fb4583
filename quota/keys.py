"""The four client quota keys (spec §1.1) and the two kinds of sensor that can enforce them."""

from __future__ import annotations

from enum import StrEnum

from sluice.quota.errors import QuotaConfigError


class QuotaKey(StrEnum):
    """A user/client-id quota key; each one drives its own manager (spec §2.1)."""

    PRODUCER_BYTE_RATE = "producer_byte_rate"
    CONSUMER_BYTE_RATE = "consumer_byte_rate"
    REQUEST_PERCENTAGE = "request_percentage"
    CONTROLLER_MUTATION_RATE = "controller_mutation_rate"

    @property
    def quota_type(self) -> str:
        """Kafka's quota type for this key: the sensor-name prefix and metric group."""
        return _QUOTA_TYPES[self]

    @property
    def is_long(self) -> bool:
        """Kafka stores the byte rates as LONG (no fractional values); the others are DOUBLE."""
        return self in (QuotaKey.PRODUCER_BYTE_RATE, QuotaKey.CONSUMER_BYTE_RATE)


_QUOTA_TYPES = {
    QuotaKey.PRODUCER_BYTE_RATE: "Produce",
    QuotaKey.CONSUMER_BYTE_RATE: "Fetch",
    QuotaKey.REQUEST_PERCENTAGE: "Request",
    QuotaKey.CONTROLLER_MUTATION_RATE: "ControllerMutation",
}


class SensorKind(StrEnum):
    """How a quota is measured.

    ``window``: Kafka's sampled-window rate (``Rate``), throttle ``round((O - T) / T x window)``.
    ``token_bucket``: Kafka's ``TokenBucket`` with B = N x W x Q, throttle ``round(-tokens / Q x 1000)``.
    Kafka uses ``window`` for the byte and request quotas and ``token_bucket`` for controller mutations;
    Sluice lets the byte and request quotas use a token bucket too, to shape traffic evenly.
    """

    WINDOW = "window"
    TOKEN_BUCKET = "token_bucket"


def parse_sensor_kind(kind: object) -> SensorKind:
    """``kind`` as a :class:`SensorKind` (its value, e.g. ``"token_bucket"``, is accepted too)."""
    if isinstance(kind, str):  # a SensorKind is a str too
        try:
            return SensorKind(kind)
        except ValueError:
            pass
    raise QuotaConfigError("sensor_kind", kind, "'window' or 'token_bucket'")


def parse_quota_key(key: object) -> QuotaKey:
    """``key`` as a :class:`QuotaKey` (its value, e.g. ``"producer_byte_rate"``, is accepted too)."""
    if isinstance(key, str):  # a QuotaKey is a str too
        try:
            return QuotaKey(key)
        except ValueError:
            pass
    expected = "one of " + ", ".join(k.value for k in QuotaKey)
    raise QuotaConfigError("quota key", key, expected)
