"""Quota sensors: record first, then check (spec §1.5).

A sensor holds one stat (a sampled-window rate or a token bucket) and one upper bound. ``record`` adds the
value, then (by default) checks the bound and returns the throttle in ms, 0 when within the quota. A
violating value stays recorded, exactly as in Kafka; a caller that must not be charged (a throttled
fetch) calls ``unrecord`` afterwards. A value equal to the bound is not a violation.

Both kinds share one interface, so a manager can pick either per quota key:

* :class:`WindowQuotaSensor`: violated while rate > bound; throttle ``round((O - T) / T x window_ms)``.
* :class:`TokenBucketQuotaSensor`: violated while tokens < 0; throttle ``round(-tokens / T x 1000)``.

Throttles returned here are unbounded Python ints (Java longs); the managers bound them and narrow them to
int32 as Kafka does. A sensor expires after one hour without a record (``is_expired``); ``reset`` gives
it a fresh, empty history, which is what Kafka's re-created sensor has.
"""

from __future__ import annotations

from sluice.quota import compiled
from sluice.quota.errors import QuotaViolation, require_bound
from sluice.quota.keys import SensorKind, parse_sensor_kind
from sluice.quota.throttle import java_round, window_throttle_ms
from sluice.quota.token_bucket import TokenBucket
from sluice.quota.window import WindowRate

# ClientQuotaManager.InactiveSensorExpirationTimeSeconds, in ms.
INACTIVE_SENSOR_EXPIRATION_MS = 3_600_000


class QuotaSensor:
    """What every quota sensor offers; use :func:`new_quota_sensor` or a subclass to make one."""

    __slots__ = ("_bound", "last_record_ms", "peers")

    kind: SensorKind

    def __init__(self, bound: float, now_ms: int) -> None:
        self._bound = require_bound("bound", bound)
        # Kafka stamps a new sensor with the creation time, so an unused sensor expires an hour later.
        self.last_record_ms = now_ms
        # Fleet mode only (quota/fleet.py): this sensor's estimate of other instances' unreported usage.
        self.peers: object = None

    @property
    def bound(self) -> float:
        """The upper bound (the quota). Assigning it keeps the history, like Kafka's config swap."""
        return self._bound

    @bound.setter
    def bound(self, bound: float) -> None:
        self._bound = require_bound("bound", bound)
        self._bound_changed()

    def _bound_changed(self) -> None:
        """A stat built from the bound (a token bucket's rate) follows it here; a window's needs nothing."""

    def is_expired(self, now_ms: int) -> bool:
        """Kafka's ``Sensor.hasExpired``: more than one hour since the last record."""
        return now_ms - self.last_record_ms > INACTIVE_SENSOR_EXPIRATION_MS

    def record(self, value: float, now_ms: int, check: bool = True) -> int:
        """Record ``value`` at ``now_ms``; with ``check``, return the throttle in ms (0 if within quota)."""
        raise NotImplementedError

    def unrecord(self, value: float, now_ms: int) -> None:
        """Take back a recorded value: record ``-value`` at ``now_ms`` without a check (spec §2.7)."""
        self.record(-value, now_ms, False)

    def measure(self, now_ms: int) -> float:
        """What the quota is checked against: the rate, or the tokens left."""
        raise NotImplementedError

    def throttle_ms(self, now_ms: int, pending: float = 0.0) -> int:
        """The throttle the bound demands at ``now_ms`` without recording anything; 0 if within quota.

        ``pending`` is usage known to exist but not recorded (fleet mode: other instances' usage not yet
        reported), counted as if it were in the sensor.
        """
        raise NotImplementedError

    def violated(self, now_ms: int) -> bool:
        """Whether the bound is violated at ``now_ms`` (even if the throttle would round to 0)."""
        raise NotImplementedError

    def check(self, now_ms: int) -> None:
        """Kafka's ``checkQuotas``: raise :class:`QuotaViolation` if the bound is violated at ``now_ms``."""
        raise NotImplementedError

    def reset(self, now_ms: int) -> None:
        """Forget the history (what an expired and re-created Kafka sensor has); the bound stays."""
        raise NotImplementedError


class WindowQuotaSensor(QuotaSensor):
    """A sensor over Kafka's sampled-window :class:`~quota.window.SampledRate`.

    The rate is the compiled twin where the install has it (quota/compiled.py), whose
    ``record_and_throttle`` is this sensor's record and check in one call.
    """

    __slots__ = ("_rate",)

    kind = SensorKind.WINDOW

    def __init__(
        self,
        bound: float,
        now_ms: int,
        num_samples: int = 11,
        window_ms: int = 1000,
        *,
        legacy: bool = False,
    ) -> None:
        super().__init__(bound, now_ms)
        self._rate: WindowRate = compiled.SAMPLED_RATE(num_samples, window_ms, legacy=legacy)

    @property
    def rate(self) -> WindowRate:
        return self._rate

    def record(self, value: float, now_ms: int, check: bool = True) -> int:
        self.last_record_ms = now_ms
        if check:
            return self._rate.record_and_throttle(value, now_ms, self._bound)
        self._rate.record(value, now_ms)
        return 0

    def measure(self, now_ms: int) -> float:
        return self._rate.measure(now_ms)

    def window_size_ms(self, now_ms: int) -> int:
        return self._rate.window_size_ms(now_ms)

    def throttle_ms(self, now_ms: int, pending: float = 0.0) -> int:
        rate = self._rate
        return window_throttle_ms(rate.total(now_ms) + pending, rate.window_size_ms(now_ms), self._bound)

    def violated(self, now_ms: int) -> bool:
        return not self._rate.measure(now_ms) <= self._bound

    def check(self, now_ms: int) -> None:
        observed = self._rate.measure(now_ms)
        bound = self._bound
        if not observed <= bound:
            window_ms = self._rate.window_size_ms(now_ms)
            raise QuotaViolation(observed, bound, java_round((observed - bound) / bound * window_ms))

    def reset(self, now_ms: int) -> None:
        self._rate.clear()
        self.last_record_ms = now_ms

    def __repr__(self) -> str:
        return f"WindowQuotaSensor(bound={self._bound!r}, {self._rate!r})"


class TokenBucketQuotaSensor(QuotaSensor):
    """A sensor over Kafka's :class:`~quota.token_bucket.TokenBucket`: burst B = N x W x bound."""

    __slots__ = ("_bucket",)

    kind = SensorKind.TOKEN_BUCKET

    def __init__(self, bound: float, now_ms: int, num_samples: int = 11, window_ms: int = 1000) -> None:
        super().__init__(bound, now_ms)
        self._bucket = TokenBucket(self._bound, num_samples, window_ms)

    @property
    def bucket(self) -> TokenBucket:
        return self._bucket

    def _bound_changed(self) -> None:
        self._bucket.rate = self._bound

    def record(self, value: float, now_ms: int, check: bool = True) -> int:
        self.last_record_ms = now_ms
        bucket = self._bucket
        bucket.record(value, now_ms)
        if not check:
            return 0
        tokens = bucket.measure(now_ms)
        if tokens >= 0:
            return 0
        return java_round(-tokens / self._bound * 1000)

    def measure(self, now_ms: int) -> float:
        return self._bucket.measure(now_ms)

    def throttle_ms(self, now_ms: int, pending: float = 0.0) -> int:
        tokens = self._bucket.measure(now_ms) - pending
        if tokens >= 0:
            return 0
        return java_round(-tokens / self._bound * 1000)

    def violated(self, now_ms: int) -> bool:
        return self._bucket.measure(now_ms) < 0

    def check(self, now_ms: int) -> None:
        tokens = self._bucket.measure(now_ms)
        if tokens < 0:
            raise QuotaViolation(tokens, self._bound, java_round(-tokens / self._bound * 1000))

    def reset(self, now_ms: int) -> None:
        self._bucket.clear()
        self.last_record_ms = now_ms

    def __repr__(self) -> str:
        return f"TokenBucketQuotaSensor(bound={self._bound!r}, {self._bucket!r})"


def new_quota_sensor(
    kind: SensorKind,
    bound: float,
    now_ms: int,
    num_samples: int = 11,
    window_ms: int = 1000,
    *,
    legacy: bool = False,
) -> QuotaSensor:
    """A fresh sensor of ``kind``. ``legacy`` picks Kafka <= 3.7 windows and only applies to ``window``."""
    if parse_sensor_kind(kind) is SensorKind.TOKEN_BUCKET:
        return TokenBucketQuotaSensor(bound, now_ms, num_samples, window_ms)
    return WindowQuotaSensor(bound, now_ms, num_samples, window_ms, legacy=legacy)
