"""Kafka error codes and the value rules of the quota admin APIs (spec §7.4, §7.5).

The handful of error codes the quota store answers with are named here, from kafka-python's table of
Kafka's `org.apache.kafka.common.protocol.Errors` (config/ may not import protocol/, but both read the
numbers from the same place).
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Final, NamedTuple

from kafka.errors import (
    ClusterAuthorizationFailedError,
    InvalidRequestError,
    NoError,
    RequestTimedOutError,
    UnknownError,
    UnsupportedVersionError,
)

NONE: Final[int] = NoError.errno
UNKNOWN_SERVER_ERROR: Final[int] = UnknownError.errno
REQUEST_TIMED_OUT: Final[int] = RequestTimedOutError.errno
CLUSTER_AUTHORIZATION_FAILED: Final[int] = ClusterAuthorizationFailedError.errno
UNSUPPORTED_VERSION: Final[int] = UnsupportedVersionError.errno
INVALID_REQUEST: Final[int] = InvalidRequestError.errno

CLUSTER_AUTHORIZATION_FAILED_MESSAGE: Final = "Cluster authorization failed."

INT_MAX: Final = 2**31 - 1
LONG_MAX: Final = 2**63 - 1
# Kafka's tolerance for a whole number stored as a double (ClientQuotaControlManager).
FRACTION_TOLERANCE: Final = 1e-6


class ApiError(NamedTuple):
    """An error code and its message, as Kafka's `ApiError` (code 0 and no message: success)."""

    code: int
    message: str | None

    @property
    def ok(self) -> bool:
        return self.code == NONE


OK: Final = ApiError(NONE, None)


def invalid(message: str) -> ApiError:
    return ApiError(INVALID_REQUEST, message)


class ValueType(Enum):
    """The `ConfigDef.Type` of a quota key, which decides how its value is checked."""

    LONG = "LONG"
    INT = "INT"
    DOUBLE = "DOUBLE"


# QuotaConfig.userAndClientQuotaConfigs() and ipConfigs(): the keys each kind of entity accepts.
CLIENT_QUOTA_KEYS: Final = {
    "producer_byte_rate": ValueType.LONG,
    "consumer_byte_rate": ValueType.LONG,
    "request_percentage": ValueType.DOUBLE,
    "controller_mutation_rate": ValueType.DOUBLE,
}
IP_QUOTA_KEYS: Final = {"connection_creation_rate": ValueType.INT}


def check_quota_value(valid_keys: dict[str, ValueType], key: str, value: float) -> ApiError:
    """Kafka's `validateQuotaKeyValue`, word for word, plus one rule of Sluice's own.

    Sluice also refuses NaN and infinities, which Kafka lets through for DOUBLE keys (a NaN quota would
    never throttle anyone, an infinite one is no quota at all).
    """
    value_type = valid_keys.get(key)
    if value_type is None:
        return invalid(f"Invalid configuration key {key}")
    if not math.isnan(value) and value <= 0.0:
        return invalid(f"Quota {key} must be greater than 0")
    if not math.isfinite(value):
        return invalid(f"Quota {key} must be a finite number")
    if value_type is ValueType.DOUBLE:
        return OK
    if value_type is ValueType.INT and value > INT_MAX:
        return invalid(f"Proposed value for {key} is too large for an INT.")
    if value_type is ValueType.LONG and value > LONG_MAX:
        return invalid(f"Proposed value for {key} is too large for a LONG.")
    if abs(math.fmod(value, 1.0)) > FRACTION_TOLERANCE:
        return invalid(f"{key} cannot be a fractional value.")
    return OK
