"""Who shares a quota, and how much it is: Kafka's entities and 8-level precedence (spec §2.1-§2.4).

A quota is configured on an entity: a user, a client-id, or both, where either may be the *default*
entity (``<default>``). For each connecting (user, client-id) Kafka computes two things:

* the **metric tags** ``(user, client-id)`` (``DefaultQuotaCallback.quotaMetricTags``): every connection
  with the same tags shares one sensor, and so one rate. Which tags depend on which *levels* have any
  quota configured (the "enablement bits", spec §2.1) and, when several levels do, on the first existing
  override in precedence order;
* the **bound** for those tags (``quotaLimit``): the first existing override among the levels the tags
  allow, or unlimited (``Long.MAX_VALUE`` as a double).

Enablement: Kafka 3.x ORs a level's bit in when a quota of that shape is set and never clears it until a
restart. Sluice follows the newer Java port instead and reference-counts: removing the last quota of a
shape turns its bit off again. Live state therefore always equals what a fresh start with the same
configuration would have, which is what a proxy whose configuration is reloaded needs.

User names are sanitised (URL-encoded) for the tags, as Kafka does; client-ids are used raw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, NamedTuple
from urllib.parse import quote

from sluice.quota.errors import QuotaConfigError, require_bound
from sluice.quota.throttle import UNLIMITED

# The principal name of an unauthenticated connection (PLAINTEXT, or SSL without a client certificate).
ANONYMOUS: Final = "ANONYMOUS"

# Enablement bits (spec §2.1).
NO_QUOTAS: Final = 0
CLIENT_ID_QUOTA_ENABLED: Final = 1
USER_QUOTA_ENABLED: Final = 2
USER_CLIENT_ID_QUOTA_ENABLED: Final = 4


class DefaultEntity:
    """The default entity name, ``<default>`` in Kafka's tools.

    A distinct object, not the string ``"<default>"``: a client-id literally named ``<default>`` is an
    ordinary entity (spec §7.5).
    """

    __slots__ = ()
    _instance: DefaultEntity | None = None

    def __new__(cls) -> DefaultEntity:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<default>"

    def __reduce__(self) -> str:
        return "DEFAULT"


DEFAULT: Final = DefaultEntity()

EntityName = str | DefaultEntity


def sanitize_user(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: Java URL encoding, then ``*`` -> ``%2A`` and ``+`` -> ``%20``.

    Keeps ``A-Z a-z 0-9 . - _``; everything else becomes ``%XX`` of its UTF-8 bytes, upper-case hex.
    An unpaired surrogate is encoded as ``?`` (``%3F``), as Java's encoder replaces it.
    """
    return quote(name, safe="", errors="replace").replace("~", "%7E")


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """A configured quota's entity: ``user`` and/or ``client_id``, each a name or :data:`DEFAULT`.

    ``None`` means the component is not part of the entity (``(user=alice)`` has ``client_id=None``).
    Names are raw (not sanitised) and may not be empty, as in Kafka's AlterClientQuotas.
    """

    user: EntityName | None = None
    client_id: EntityName | None = None

    def __post_init__(self) -> None:
        if self.user is None and self.client_id is None:
            raise QuotaConfigError("entity", self, "a user, a client-id, or both")
        for name, value in (("user", self.user), ("client_id", self.client_id)):
            if value is None or value is DEFAULT:
                continue
            if not isinstance(value, str) or not value:
                raise QuotaConfigError(name, value, "a non-empty name, DEFAULT, or None")

    @property
    def level(self) -> int:
        """Precedence level 1 (most specific) .. 8 (least), spec §2.2."""
        user, client = self.user, self.client_id
        if user is None:
            return 8 if client is DEFAULT else 7
        base = 4 if user is DEFAULT else 1
        if client is None:
            return base + 2
        return base + 1 if client is DEFAULT else base

    @property
    def shape_bit(self) -> int:
        """The enablement bit this entity's shape turns on (spec §2.1); defaults count like names."""
        if self.user is not None and self.client_id is not None:
            return USER_CLIENT_ID_QUOTA_ENABLED
        return USER_QUOTA_ENABLED if self.user is not None else CLIENT_ID_QUOTA_ENABLED

    def __str__(self) -> str:
        parts = []
        if self.user is not None:
            parts.append(f"user={self.user}")
        if self.client_id is not None:
            parts.append(f"client-id={self.client_id}")
        return "(" + ", ".join(parts) + ")"


class QuotaTags(NamedTuple):
    """The metric tags that identify a shared sensor: sanitised user and raw client-id.

    An empty string means "not part of the key". ``client_id`` is ``None`` for a request whose header
    carried a null client-id; such tags never find a quota (spec §2.4).
    """

    user: str
    client_id: str | None

    @property
    def sensor_suffix(self) -> str:
        """``<user>:<client-id>`` as in Kafka's sensor names (``Produce-alice:pump``)."""
        return f"{self.user}:{'null' if self.client_id is None else self.client_id}"


class Resolution(NamedTuple):
    """What a connecting (user, client-id) resolves to for one quota key."""

    tags: QuotaTags
    # The quota bound; UNLIMITED (Long.MAX_VALUE as a double) when no quota applies.
    bound: float
    # The configured entity that supplied the bound, or None when unlimited.
    rule: QuotaEntity | None

    @property
    def limited(self) -> bool:
        return self.rule is not None


# Lookup keys: (user part, client part); a part is a sanitised user / raw client-id, DEFAULT, or _ABSENT.
_ABSENT: Final = object()
# Stands in for a null client-id in lookups: Kafka's ClientIdEntity(null) never equals a configured one.
_NEVER_CONFIGURED: Final = object()
_Key = tuple[object, object]


def _entity_key(entity: QuotaEntity) -> _Key:
    user: object = entity.user
    if user is None:
        user = _ABSENT
    elif isinstance(user, str):
        user = sanitize_user(user)
    client: object = _ABSENT if entity.client_id is None else entity.client_id
    return (user, client)


class QuotaRules:
    """The quota overrides configured for one quota key, and Kafka's precedence over them.

    ``resolve(user, client_id)`` is the hot entry point: cached per (user, client-id) until the next
    configuration change (a dict hit when warm).
    """

    __slots__ = ("_cache", "_cache_limit", "_overrides", "_shape_counts", "enabled_bits", "version")

    def __init__(self, cache_limit: int = 100_000) -> None:
        # key -> (bound, entity as configured)
        self._overrides: dict[_Key, tuple[float, QuotaEntity]] = {}
        self._shape_counts = {
            CLIENT_ID_QUOTA_ENABLED: 0,
            USER_QUOTA_ENABLED: 0,
            USER_CLIENT_ID_QUOTA_ENABLED: 0,
        }
        # The enablement bitmask: which entity shapes have at least one quota configured. Read-only.
        self.enabled_bits = NO_QUOTAS
        self._cache: dict[tuple[str, str | None], Resolution] = {}
        # Client-ids are chosen by clients; bound the cache so a client cycling through ids cannot grow it.
        self._cache_limit = cache_limit
        # Bumped on every change, so holders of derived state can tell it is stale.
        self.version = 0

    @property
    def quotas_enabled(self) -> bool:
        return self.enabled_bits != NO_QUOTAS

    def set(self, entity: QuotaEntity, bound: float) -> None:
        """Configure (or change) the quota of ``entity``."""
        value = require_bound("quota", bound)
        key = _entity_key(entity)
        if key not in self._overrides:
            self._shape_counts[entity.shape_bit] += 1
        self._overrides[key] = (value, entity)
        self._changed()

    def remove(self, entity: QuotaEntity) -> bool:
        """Remove the quota of ``entity``; False (and no change) if it had none."""
        key = _entity_key(entity)
        if self._overrides.pop(key, None) is None:
            return False
        self._shape_counts[entity.shape_bit] -= 1
        self._changed()
        return True

    def get(self, entity: QuotaEntity) -> float | None:
        """The bound configured on exactly ``entity``, or None."""
        found = self._overrides.get(_entity_key(entity))
        return None if found is None else found[0]

    def entries(self) -> list[tuple[QuotaEntity, float]]:
        """Every configured (entity, bound)."""
        return [(entity, bound) for bound, entity in self._overrides.values()]

    def resolve(self, user: str, client_id: str | None) -> Resolution:
        """Tags, bound and matching rule for ``user`` (raw principal name) connecting as ``client_id``."""
        cache_key = (user, client_id)
        found = self._cache.get(cache_key)
        if found is not None:
            return found
        tags = self.metric_tags(user, client_id)
        bound, rule = self.quota_limit(tags)
        resolution = Resolution(tags, UNLIMITED if bound is None else bound, rule)
        if len(self._cache) >= self._cache_limit:
            self._cache.clear()
        self._cache[cache_key] = resolution
        return resolution

    def metric_tags(self, user: str, client_id: str | None) -> QuotaTags:
        """``DefaultQuotaCallback.quotaMetricTags`` (spec §2.3): the tags of the sensor this client shares."""
        bits = self.enabled_bits
        if bits in (NO_QUOTAS, CLIENT_ID_QUOTA_ENABLED):
            return QuotaTags("", client_id)
        sanitized = sanitize_user(user)
        if bits == USER_QUOTA_ENABLED:
            return QuotaTags(sanitized, "")
        if bits == USER_CLIENT_ID_QUOTA_ENABLED:
            return QuotaTags(sanitized, client_id)
        # Several shapes configured: the first existing override among levels 1-6 decides the shape.
        overrides = self._overrides
        client: object = _NEVER_CONFIGURED if client_id is None else client_id
        if (sanitized, client) in overrides or (sanitized, DEFAULT) in overrides:  # levels 1, 2
            return QuotaTags(sanitized, client_id)
        if (sanitized, _ABSENT) in overrides:  # level 3
            return QuotaTags(sanitized, "")
        if (DEFAULT, client) in overrides or (DEFAULT, DEFAULT) in overrides:  # levels 4, 5
            return QuotaTags(sanitized, client_id)
        if (DEFAULT, _ABSENT) in overrides:  # level 6
            return QuotaTags(sanitized, "")
        return QuotaTags("", client_id)  # levels 7, 8, or unlimited

    def quota_limit(self, tags: QuotaTags) -> tuple[float | None, QuotaEntity | None]:
        """``DefaultQuotaCallback.quotaLimit`` (spec §2.3): (bound, entity) for ``tags``, or (None, None)."""
        user, client = tags
        if client is None:
            return None, None
        overrides = self._overrides
        if user and client:
            candidates: tuple[_Key, ...] = (
                (user, client),
                (user, DEFAULT),
                (DEFAULT, client),
                (DEFAULT, DEFAULT),
            )
        elif user:
            candidates = ((user, _ABSENT), (DEFAULT, _ABSENT))
        elif client:
            candidates = ((_ABSENT, client), (_ABSENT, DEFAULT))
        else:
            return None, None
        for key in candidates:
            found = overrides.get(key)
            if found is not None:
                return found
        return None, None

    def _changed(self) -> None:
        counts = self._shape_counts
        self.enabled_bits = (
            (CLIENT_ID_QUOTA_ENABLED if counts[CLIENT_ID_QUOTA_ENABLED] else 0)
            | (USER_QUOTA_ENABLED if counts[USER_QUOTA_ENABLED] else 0)
            | (USER_CLIENT_ID_QUOTA_ENABLED if counts[USER_CLIENT_ID_QUOTA_ENABLED] else 0)
        )
        self._cache.clear()
        self.version += 1
