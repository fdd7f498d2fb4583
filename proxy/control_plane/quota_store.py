"""The quotas in force: the ones set through the admin API (the store) on top of the configuration file.

How the two combine, Kafka's way: a broker's dynamic configuration (set with kafka-configs.sh, kept in
the cluster) overrides its static configuration (server.properties). In Sluice the YAML file is the
static base and the store the dynamic layer, key by key:

* for each (entity, quota key), a value in the store wins over the file's;
* a quota only the file sets is in force as the file says (and reloads change it);
* removing a stored value through the API brings the file's value (if any) back into force;
* a quota only the file sets cannot be removed through the API (proxy/control_plane/quota_alter.py says so).

`DescribeClientQuotas` answers from the combination, so kafka-configs.sh --describe shows what is in
force.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from sluice.config.quota_settings import QuotaSettings
from sluice.proxy.control_plane.client_quota_entity import ClientQuotaEntity
from sluice.proxy.control_plane.quota_records import decode_record

QuotaMap = dict[ClientQuotaEntity, dict[str, float]]
CONNECTION_CREATION_RATE = "connection_creation_rate"


class QuotaStore:
    """What the store topic holds, entity by entity; the in-memory mirror every instance keeps.

    Each entity remembers the topic offset its value came from. An instance applies its own write as
    soon as the store acknowledges it (at that write's offset), possibly before its follower has read
    older records of the same entity; those older records are then ignored, so the entity never goes
    back to an earlier value.
    """

    __slots__ = ("_offsets", "_quotas")

    def __init__(self) -> None:
        self._quotas: QuotaMap = {}
        self._offsets: dict[ClientQuotaEntity, int] = {}

    def get(self, entity: ClientQuotaEntity) -> Mapping[str, float]:
        return self._quotas.get(entity, {})

    def put(self, entity: ClientQuotaEntity, quotas: Mapping[str, float], offset: int | None = None) -> bool:
        """Replace the entity's quotas (empty removes it); True if anything changed.

        With `offset` (where the value sits in the store topic), a value older than the one held is
        ignored.
        """
        if offset is not None:
            if offset < self._offsets.get(entity, -1):
                return False
            self._offsets[entity] = offset
        new = dict(quotas)
        if self._quotas.get(entity, {}) == new:
            return False
        if new:
            self._quotas[entity] = new
        else:
            self._quotas.pop(entity, None)
        return True

    def apply_record(
        self, key: bytes | None, value: bytes | None, offset: int | None = None
    ) -> tuple[ClientQuotaEntity, bool]:
        """Apply one record of the store topic; QuotaRecordError (nothing changed) if it is invalid."""
        entity, quotas = decode_record(key, value)
        return entity, self.put(entity, quotas, offset)

    def snapshot(self) -> QuotaMap:
        return {entity: dict(values) for entity, values in self._quotas.items()}

    def __len__(self) -> int:
        return len(self._quotas)

    def __iter__(self) -> Iterator[ClientQuotaEntity]:
        return iter(list(self._quotas))


def file_quotas(settings: QuotaSettings) -> tuple[QuotaMap, dict[ClientQuotaEntity, dict[str, str]]]:
    """The file's quotas as entity -> {key: value}, and where each is set, in the operator's words."""
    quotas: QuotaMap = {}
    for rule in settings.rules:
        quotas[ClientQuotaEntity.from_engine(rule.entity)] = {k.value: v for k, v in rule.values.items()}
    for ip_rule in settings.ip_rules:
        quotas[ClientQuotaEntity(ip=ip_rule.ip)] = {
            CONNECTION_CREATION_RATE: ip_rule.connection_creation_rate
        }
    sources = {
        entity: dict.fromkeys(values, f"the quota.entities entry for {entity.describe()}")
        for entity, values in quotas.items()
    }
    return quotas, sources


def effective_quotas(
    from_file: Mapping[ClientQuotaEntity, Mapping[str, float]], stored: QuotaStore
) -> QuotaMap:
    """The quotas in force: the file's, with every stored value on top (stored wins, key by key)."""
    combined: QuotaMap = {entity: dict(values) for entity, values in from_file.items()}
    for entity in stored:
        combined.setdefault(entity, {}).update(stored.get(entity))
    return combined
