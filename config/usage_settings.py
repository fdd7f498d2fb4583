"""The validated `usage` and `fleet` sections (parsed by config/usage_section.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sluice.quota import QuotaKey
from sluice.quota.fleet import DEFAULT_SHARED_KEYS

DEFAULT_TOPIC = "_sluice_usage"
DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class UsageSettings:
    enabled: bool = False
    topic: str = DEFAULT_TOPIC
    interval_ms: int = 1000
    retention_ms: int = DEFAULT_RETENTION_MS
    partitions: int = 1
    replication_factor: int = -1
    max_entities: int = 10_000
    buffer_batches: int = 300
    instance_id: str | None = None
    compression: str = "gzip"  # of the usage messages: gzip (about 24x smaller) or none


@dataclass(frozen=True, slots=True)
class FleetSettings:
    enabled: bool = False
    share: frozenset[QuotaKey] = field(default=DEFAULT_SHARED_KEYS)
