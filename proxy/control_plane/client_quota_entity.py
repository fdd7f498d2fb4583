"""The quota entity as Kafka's admin APIs see it: a user, a client-id, both, or an IP address.

Kafka's `ClientQuotaEntity` is a map from entity type (`user`, `client-id`, `ip`) to a name, where a null
name is the default entity. Here each type is a field; `None` means the type is not part of the entity,
`DEFAULT` is the default entity. Names are raw (users are not sanitised), exactly as AlterClientQuotas
carried them, so a client-id literally called `<default>` is an ordinary name (spec §7.5). IP names are
kept in canonical form (quota/connection_rate.py).

The engine only knows (user, client-id) entities (`quota.QuotaEntity`); `engine_entity` converts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from sluice.quota import DEFAULT, QuotaEntity
from sluice.quota.entities import DefaultEntity, EntityName

USER: Final = "user"
CLIENT_ID: Final = "client-id"
IP: Final = "ip"
ENTITY_TYPES: Final = (USER, CLIENT_ID, IP)

# A wire entity part: (entity type, name or None for the default).
WirePart = tuple[str, str | None]


@dataclass(frozen=True, slots=True)
class ClientQuotaEntity:
    """One quota entity; at least one field is set, and `ip` is never combined with the others."""

    user: EntityName | None = None
    client_id: EntityName | None = None
    ip: str | DefaultEntity | None = None

    @property
    def is_ip(self) -> bool:
        return self.ip is not None

    def wire_parts(self) -> tuple[WirePart, ...]:
        """The entity as the APIs carry it: (type, name) pairs, None for the default, users first."""
        # Spelled out: a describe of a large store calls this for every entity.
        parts: list[WirePart] = []
        user, client_id, ip = self.user, self.client_id, self.ip
        if user is not None:
            parts.append((USER, None if isinstance(user, DefaultEntity) else user))
        if client_id is not None:
            parts.append((CLIENT_ID, None if isinstance(client_id, DefaultEntity) else client_id))
        if ip is not None:
            parts.append((IP, None if isinstance(ip, DefaultEntity) else ip))
        return tuple(parts)

    def engine_entity(self) -> QuotaEntity:
        """The (user, client-id) entity the quota managers key on; ValueError for an IP entity."""
        if self.is_ip:
            raise ValueError(f"{self} is an IP entity")
        return QuotaEntity(user=self.user, client_id=self.client_id)

    @classmethod
    def from_engine(cls, entity: QuotaEntity) -> ClientQuotaEntity:
        return cls(user=entity.user, client_id=entity.client_id)

    @classmethod
    def from_wire(cls, parts: dict[str, str | None]) -> ClientQuotaEntity:
        """From a validated type -> name map (None = default); unknown types are the caller's problem."""
        values: dict[str, EntityName] = {
            kind: DEFAULT if name is None else name for kind, name in parts.items()
        }
        return cls(user=values.get(USER), client_id=values.get(CLIENT_ID), ip=values.get(IP))

    def __str__(self) -> str:
        """Kafka's `ClientQuotaEntity.toString`, which its error messages embed."""
        entries = ", ".join(f"{kind}={'null' if name is None else name}" for kind, name in self.wire_parts())
        return f"ClientQuotaEntity(entries={{{entries}}})"

    def describe(self) -> str:
        """In kafka-configs.sh's words: "user-principal 'alice', client-id 'pump'", "the default ip"."""
        words = {USER: "user-principal", CLIENT_ID: "client-id", IP: "ip"}
        return ", ".join(
            f"the default {words[kind]}" if name is None else f"{words[kind]} '{name}'"
            for kind, name in self.wire_parts()
        )

    def sort_key(self) -> tuple[tuple[int, str], ...]:
        """A stable order for answers and plans: type by type, absent first, then the default, then names."""
        # Spelled out, no generator: a describe of a large store sorts by it (10,000 entities: 4 ms of 16).
        return (_order_of(self.user), _order_of(self.client_id), _order_of(self.ip))


_ABSENT_ORDER = (-1, "")
_DEFAULT_ORDER = (0, "")


def _order_of(name: EntityName | str | DefaultEntity | None) -> tuple[int, str]:
    return _ABSENT_ORDER if name is None else _DEFAULT_ORDER if name is DEFAULT else (1, str(name))
