"""AlterClientQuotas, decided sans-IO: which entries are valid and what each valid one changes.

Kafka's rules (spec §7.5, `ClientQuotaControlManager`), checked in Kafka's order for every entry:

1. a quota key given twice in one entry, or an entity given in two entries: INVALID_REQUEST;
2. the entity: not empty, each type once, only `user`, `client-id` and `ip`, no empty names, and `ip`
   never combined with the others; an IP entity must name an IP address (Sluice does not resolve host
   names, see docs/quotas.md);
3. each value set: a key valid for the entity kind, > 0, whole for LONG and INT keys, in range.

An entry's error stops that entry only (nothing of it is applied); the others go ahead. Removing a key
that is not set is a silent success, and a value equal to the stored one changes nothing.

Sluice's own rule: a quota in force only because the configuration file sets it cannot be removed
through the API (the file would bring it back at the next reload); the answer says where it is set.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from sluice.proxy.control_plane.client_quota_entity import (
    CLIENT_ID,
    ENTITY_TYPES,
    IP,
    USER,
    ClientQuotaEntity,
)
from sluice.proxy.control_plane.quota_admin_errors import (
    CLIENT_QUOTA_KEYS,
    IP_QUOTA_KEYS,
    OK,
    ApiError,
    ValueType,
    check_quota_value,
    invalid,
)
from sluice.quota import QuotaConfigError
from sluice.quota.connection_rate import canonical_ip

# What the store holds: entity -> {quota key: value}.
QuotaMap = Mapping[ClientQuotaEntity, Mapping[str, float]]
# A wire entity part (type, name or None) and a wire op (key, value, remove): protocol/'s NamedTuples fit.
Part = tuple[str, str | None]
Op = tuple[str, float, bool]


class EntryPlan(NamedTuple):
    """The decision for one request entry, in request order."""

    error: ApiError
    entity: ClientQuotaEntity | None  # None when the entity itself is invalid
    # Only for a valid entry: key -> new value, or None to remove it. Holds real changes only.
    changes: Mapping[str, float | None]


def plan_alteration(
    entries: Sequence[tuple[Sequence[Part], Sequence[Op]]],
    stored: QuotaMap,
    file_sources: Mapping[ClientQuotaEntity, Mapping[str, str]] | None = None,
) -> list[EntryPlan]:
    """Decide every entry of an AlterClientQuotas request against the stored quotas.

    `file_sources` names, for each quota set in the configuration file, the key that sets it
    (`quota.entities[2]`), so a removal of a file-only quota can be refused with that name.
    """
    file_sources = file_sources or {}
    entities = [entity_from_parts(parts) for parts, _ in entries]
    counts: dict[ClientQuotaEntity, int] = {}
    for entity, _ in entities:
        if entity is not None:
            counts[entity] = counts.get(entity, 0) + 1
    plans = []
    for (_, ops), (entity, error) in zip(entries, entities, strict=True):
        if entity is None:
            plans.append(EntryPlan(error, None, {}))
            continue
        alterations, error = _alterations(ops, entity)
        if error.ok and counts[entity] > 1:
            error = invalid(f"Ignoring duplicate entity {entity}")
        if error.ok:
            error, changes = _changes(
                entity, alterations, stored.get(entity, {}), file_sources.get(entity, {})
            )
        else:
            changes = {}
        plans.append(EntryPlan(error, entity, changes if error.ok else {}))
    return plans


def apply_changes(current: Mapping[str, float], changes: Mapping[str, float | None]) -> dict[str, float]:
    """The entity's quota values after `changes` (an empty result means the entity is gone)."""
    values = dict(current)
    for key, value in changes.items():
        if value is None:
            values.pop(key, None)
        else:
            values[key] = value
    return values


def valid_keys(entity: ClientQuotaEntity) -> dict[str, ValueType]:
    return IP_QUOTA_KEYS if entity.is_ip else CLIENT_QUOTA_KEYS


def check_stored_values(entity: ClientQuotaEntity, values: Mapping[str, float]) -> ApiError:
    """The value rules of an alter, for quotas read back from the store topic or the file."""
    keys = valid_keys(entity)
    for key, value in values.items():
        error = check_quota_value(keys, key, value)
        if not error.ok:
            return error
    return OK


def entity_from_parts(parts: Iterable[Part]) -> tuple[ClientQuotaEntity | None, ApiError]:
    """A wire entity checked with Kafka's rules (`validateEntity`, `configKeysForEntityType`)."""
    names: dict[str, str | None] = {}
    for kind, name in parts:
        if kind in names:
            return None, invalid(f"Invalid client quota entity, duplicate entity entry {kind}")
        if kind not in ENTITY_TYPES:
            return None, invalid(f"Unhandled client quota entity type: {kind}")
        if name is not None and not name:
            return None, invalid(f"Empty {kind} not supported")
        names[kind] = name
    if not names:
        return None, invalid("Invalid empty client quota entity")
    if IP in names:
        if USER in names or CLIENT_ID in names:
            # Kafka's message, missing space included, so tools matching on it keep working.
            return None, invalid(
                "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"
            )
        ip = names[IP]
        if ip is not None:
            try:
                names[IP] = canonical_ip(ip)
            except QuotaConfigError:
                return None, invalid(f"{ip} is not a valid IP or resolvable host.")
    return ClientQuotaEntity.from_wire(names), OK


def _alterations(ops: Sequence[Op], entity: ClientQuotaEntity) -> tuple[dict[str, float | None], ApiError]:
    alterations: dict[str, float | None] = {}
    for key, value, remove in ops:
        if key in alterations:
            return {}, invalid(f"Duplicate quota key {key} not updating quota for this entity {entity}")
        alterations[key] = None if remove else float(value)
    return alterations, OK


def _changes(
    entity: ClientQuotaEntity,
    alterations: Mapping[str, float | None],
    current: Mapping[str, float],
    from_file: Mapping[str, str],
) -> tuple[ApiError, dict[str, float | None]]:
    keys = valid_keys(entity)
    changes: dict[str, float | None] = {}
    for key, value in alterations.items():
        if value is None:
            if key in current:
                changes[key] = None
            elif key in from_file:
                return invalid(
                    f"{key} of {entity.describe()} is set in Sluice's configuration file "
                    f"({from_file[key]}), not through this API: change it there and reload"
                ), {}
            continue
        error = check_quota_value(keys, key, value)
        if not error.ok:
            return error, {}
        if current.get(key) != value:
            changes[key] = value
    return OK, changes
