"""The engine's own settings: the sample windows (Kafka's ``QuotaConfig``) and the sensor kind per key."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from sluice.quota.errors import QuotaConfigError, require_positive_int
from sluice.quota.keys import QuotaKey, SensorKind, parse_quota_key, parse_sensor_kind

DEFAULT_MAX_ENTITIES = 10_000


@dataclass(frozen=True, slots=True)
class QuotaWindow:
    """N samples of W seconds: ``quota.window.num`` / ``quota.window.size.seconds`` (defaults 11 and 1).

    The rate covers between N-1 and N+1 windows; a token bucket built on it holds B = N x W x Q tokens.
    """

    num_samples: int = 11
    size_s: int = 1

    def __post_init__(self) -> None:
        require_positive_int("num_samples", self.num_samples)
        require_positive_int("size_s", self.size_s)

    @property
    def window_ms(self) -> int:
        return self.size_s * 1000


def _default_sensor_kinds() -> Mapping[QuotaKey, SensorKind]:
    return {
        QuotaKey.PRODUCER_BYTE_RATE: SensorKind.WINDOW,
        QuotaKey.CONSUMER_BYTE_RATE: SensorKind.WINDOW,
        QuotaKey.REQUEST_PERCENTAGE: SensorKind.WINDOW,
        QuotaKey.CONTROLLER_MUTATION_RATE: SensorKind.TOKEN_BUCKET,
    }


@dataclass(frozen=True, slots=True)
class QuotaConfig:
    """Everything the managers need besides the quotas themselves.

    * ``client_window``: N/W for produce, fetch and request quotas (``quota.window.*``).
    * ``controller_window``: N/W for controller mutations (``controller.quota.window.*``).
    * ``legacy_windows``: measure sampled windows as Kafka <= 3.7 did (default: >= 3.8 behaviour).
    * ``sensor_kinds``: ``window`` or ``token_bucket`` per quota key; keys left out keep Kafka's choice.
      ``controller_mutation_rate`` is always a token bucket, as in Kafka.
    * ``max_entities``: how many sensors (entities, by their metric tags) each quota key tracks. Kafka has
      no such cap; without one, 100,000 distinct client-ids cost 100,000 sensors for an hour. Entities
      beyond it share one overflow sensor per matching quota rule (see ``managers``).
    """

    client_window: QuotaWindow = QuotaWindow()
    controller_window: QuotaWindow = QuotaWindow()
    legacy_windows: bool = False
    sensor_kinds: Mapping[QuotaKey, SensorKind] = field(default_factory=_default_sensor_kinds)
    max_entities: int = DEFAULT_MAX_ENTITIES

    def __post_init__(self) -> None:
        for name in ("client_window", "controller_window"):
            if not isinstance(getattr(self, name), QuotaWindow):
                raise QuotaConfigError(name, getattr(self, name), "a QuotaWindow")
        require_positive_int("max_entities", self.max_entities)
        if not isinstance(self.legacy_windows, bool):
            raise QuotaConfigError("legacy_windows", self.legacy_windows, "true or false")
        kinds = dict(_default_sensor_kinds())
        for key, kind in dict(self.sensor_kinds).items():
            kinds[parse_quota_key(key)] = parse_sensor_kind(kind)
        if kinds[QuotaKey.CONTROLLER_MUTATION_RATE] is not SensorKind.TOKEN_BUCKET:
            raise QuotaConfigError(
                "sensor_kinds.controller_mutation_rate",
                kinds[QuotaKey.CONTROLLER_MUTATION_RATE].value,
                "'token_bucket' (Kafka's mutation quota is a token bucket)",
            )
        object.__setattr__(self, "sensor_kinds", MappingProxyType(kinds))

    def sensor_kind(self, key: QuotaKey) -> SensorKind:
        return self.sensor_kinds[key]
