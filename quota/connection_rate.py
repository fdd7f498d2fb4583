"""``connection_creation_rate`` per client IP address (KIP-612), as Kafka's ``ConnectionQuotas`` does it.

A quota is set on an IP address or on the default IP entity (every address without its own quota). For
each new connection the proxy asks :meth:`ConnectionRateQuotas.record_connection` at accept time:

* no quota applies to the address: 0, nothing is recorded and no sensor exists;
* otherwise the connection is recorded on the address's sensor (a sampled-window rate with the client
  quota window, N x W), then checked. Within the quota: 0, accept it. Over it: the connection is taken
  back (Kafka un-records it, as it will not be served) and the answer is the throttle in ms, bounded by
  one window (``QuotaUtils.boundedThrottleTime`` with ``quota.window.size.seconds``). Kafka then keeps
  the socket open without reading from it and closes it when the throttle has passed, so the client
  cannot simply reconnect at once; the proxy does the same.

Changing a quota keeps each address's samples and swaps the bound (spec V16). Addresses are compared in
canonical form (``ipaddress``), and an IPv4-mapped IPv6 address counts as its IPv4 address, as Java's
``InetAddress`` has it.
"""

from __future__ import annotations

import ipaddress

from sluice.quota.entities import DEFAULT, DefaultEntity
from sluice.quota.errors import QuotaConfigError, require_bound
from sluice.quota.quota_config import QuotaWindow
from sluice.quota.sensor import WindowQuotaSensor


def canonical_ip(address: object) -> str:
    """``address`` in canonical text form; QuotaConfigError if it is not an IP address literal."""
    if not isinstance(address, str):
        raise QuotaConfigError("ip", address, "an IPv4 or IPv6 address as a string")
    try:
        parsed = ipaddress.ip_address(address.strip())
    except ValueError:
        raise QuotaConfigError("ip", address, "an IPv4 or IPv6 address") from None
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
        parsed = parsed.ipv4_mapped
    return str(parsed)


class ConnectionRateQuotas:
    """New connections per second per client address, under per-address and default quotas."""

    __slots__ = ("_default", "_legacy", "_max_throttle_ms", "_overrides", "_sensors", "_window")

    def __init__(self, window: QuotaWindow | None = None, *, legacy_windows: bool = False) -> None:
        self._window = QuotaWindow() if window is None else window
        self._legacy = bool(legacy_windows)
        # ConnectionQuotas.maxThrottleTimeMs: one quota window.
        self._max_throttle_ms = self._window.window_ms
        self._overrides: dict[str, float] = {}
        self._default: float | None = None
        self._sensors: dict[str, WindowQuotaSensor] = {}

    @property
    def enabled(self) -> bool:
        """Whether any address can be limited at all (so the proxy may skip the call otherwise)."""
        return self._default is not None or bool(self._overrides)

    @property
    def max_throttle_ms(self) -> int:
        return self._max_throttle_ms

    def set_quota(self, ip: str | DefaultEntity, rate: float | None) -> None:
        """Set (``rate``) or remove (``None``) the quota of one address or of the default entity.

        Existing sensors keep their samples and take their new bound at once.
        """
        value = None if rate is None else require_bound("connection_creation_rate", rate)
        if isinstance(ip, DefaultEntity):
            self._default = value
        else:
            key = canonical_ip(ip)
            if value is None:
                self._overrides.pop(key, None)
            else:
                self._overrides[key] = value
        for address, sensor in self._sensors.items():
            bound = self._quota(address)
            if bound is not None and bound != sensor.bound:
                sensor.bound = bound

    def quota(self, ip: str) -> float | None:
        """The connection rate that applies to ``ip`` (its own, else the default), or None."""
        return self._quota(canonical_ip(ip))

    def entries(self) -> list[tuple[str | DefaultEntity, float]]:
        """Every configured (address or DEFAULT, rate)."""
        found: list[tuple[str | DefaultEntity, float]] = list(self._overrides.items())
        if self._default is not None:
            found.append((DEFAULT, self._default))
        return found

    def record_connection(self, ip: str, now_ms: int) -> int:
        """Record a new connection from ``ip`` at ``now_ms``: 0 to accept it, else the throttle in ms.

        A refused connection is not counted, so a client that keeps retrying is let in as soon as its
        rate allows, exactly as on a broker.
        """
        if not self.enabled:
            return 0
        address = canonical_ip(ip)
        bound = self._quota(address)
        if bound is None:
            return 0
        sensor = self._sensors.get(address)
        if sensor is None or sensor.is_expired(now_ms):
            window = self._window
            sensor = WindowQuotaSensor(
                bound, now_ms, window.num_samples, window.window_ms, legacy=self._legacy
            )
            self._sensors[address] = sensor
        throttle = sensor.record(1.0, now_ms)
        if throttle <= 0:
            return 0
        sensor.unrecord(1.0, now_ms)
        return min(throttle, self._max_throttle_ms)

    def rate(self, ip: str, now_ms: int) -> float:
        """The measured connection rate of ``ip`` (0 when it has no sensor)."""
        sensor = self._sensors.get(canonical_ip(ip))
        return 0.0 if sensor is None else sensor.measure(now_ms)

    def expire_idle_sensors(self, now_ms: int) -> int:
        """Drop sensors unused for an hour (Kafka's sensor expiry); returns how many went."""
        expired = [address for address, sensor in self._sensors.items() if sensor.is_expired(now_ms)]
        for address in expired:
            del self._sensors[address]
        return len(expired)

    def _quota(self, address: str) -> float | None:
        found = self._overrides.get(address)
        return self._default if found is None else found
