"""One instance's quota state: the file's settings, the store's mirror, and the engine they drive.

Everything that changes quotas at run time goes through here, so the engine always holds exactly
"file + store" (proxy/control_plane/quota_store.py says how they combine):

* `apply_record`: the store follower read a record of the store topic (written by any instance);
* `store_written`: this instance's own alter was acknowledged by the store (applied at once, so the
  alter is in force here before its answer goes back; the follower's copy of it then changes nothing);
* `reload`: the configuration file was read again.

Each returns the engine changes it made, for the log. Nothing here does I/O or reads a clock.
"""

from __future__ import annotations

from collections.abc import Mapping

from sluice.config.quota_settings import QuotaSettings
from sluice.proxy.control_plane.client_quota_entity import ClientQuotaEntity
from sluice.proxy.control_plane.live_quotas import LiveQuotas, QuotaChange
from sluice.proxy.control_plane.quota_store import QuotaMap, QuotaStore, effective_quotas, file_quotas
from sluice.quota import QuotaManagers


class QuotaState:
    __slots__ = ("_file", "_sources", "live", "settings", "store")

    def __init__(self, settings: QuotaSettings, live: LiveQuotas | None = None) -> None:
        self.live = LiveQuotas(QuotaManagers(settings.engine)) if live is None else live
        self.store = QuotaStore()
        self.settings = settings
        self._file, self._sources = file_quotas(settings)
        self.live.apply(self.in_force())
        self.live.apply_topics(settings.topics)
        self.live.apply_brokers(settings.broker_protection)

    def in_force(self) -> QuotaMap:
        """The client and IP quotas in force: the file's with the store's on top."""
        return effective_quotas(self._file, self.store)

    def file_sources(self) -> dict[ClientQuotaEntity, dict[str, str]]:
        """For each quota the file sets, the words that say where (for refusing its removal)."""
        return self._sources

    def apply_record(
        self, key: bytes | None, value: bytes | None, offset: int | None = None
    ) -> list[QuotaChange]:
        """A record read from the store topic at `offset`; QuotaRecordError (nothing changed) if invalid."""
        entity, changed = self.store.apply_record(key, value, offset)
        return self._refresh(entity) if changed else []

    def store_written(
        self, writes: Mapping[ClientQuotaEntity, Mapping[str, float]], offset: int | None = None
    ) -> list[QuotaChange]:
        """Entities this instance wrote and the store acknowledged (all in one batch at `offset`):
        entity -> all its quotas now."""
        changes = []
        for entity, quotas in writes.items():
            if self.store.put(entity, quotas, offset):
                changes += self._refresh(entity)
        return changes

    def _refresh(self, entity: ClientQuotaEntity) -> list[QuotaChange]:
        """Put one entity's quotas in force: the file's, with the store's on top."""
        values = dict(self._file.get(entity, {}))
        values.update(self.store.get(entity))
        return self.live.apply_entity(entity, values)

    def reload(self, settings: QuotaSettings) -> list[QuotaChange]:
        """New file settings (already validated); the live parts take effect at once."""
        self.settings = settings
        self._file, self._sources = file_quotas(settings)
        changes = self.live.apply(self.in_force())
        self.live.apply_topics(settings.topics)
        self.live.apply_brokers(settings.broker_protection)
        return changes
