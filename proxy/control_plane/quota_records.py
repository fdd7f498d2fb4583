"""The records of the quota store topic, encoded and decoded sans-IO.

The topic is compacted: the record key is the entity, the value all of that entity's quotas after the
change, and a tombstone (null value) removes the entity. Compaction then keeps exactly the current state,
and a follower that reads the topic from the start ends with the same quotas as the instance that wrote.

Both are compact JSON with sorted keys, so equal entities always give equal key bytes (compaction
compares bytes), and a version field, so a later format can be told apart:

* key: `{"entity":{"client-id":"pump","user":null},"v":1}`: each type present, null for the default;
* value: `{"quotas":{"producer_byte_rate":1048576.0},"v":1}`.

Anything that does not decode to a valid entity and valid quotas raises QuotaRecordError, so a follower
can skip a foreign or damaged record with a log line and keep the quotas it has.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

from sluice.proxy.control_plane.client_quota_entity import ENTITY_TYPES, ClientQuotaEntity
from sluice.proxy.control_plane.quota_alter import check_stored_values, entity_from_parts

RECORD_VERSION = 1


class QuotaRecordError(ValueError):
    """A record of the store topic that Sluice cannot read; the message says why (never the bytes)."""


def encode_key(entity: ClientQuotaEntity) -> bytes:
    parts = dict(entity.wire_parts())
    return _dump({"entity": parts, "v": RECORD_VERSION})


def encode_value(quotas: Mapping[str, float]) -> bytes | None:
    """The record value for an entity's quotas; None (a tombstone) when it has none left."""
    if not quotas:
        return None
    return _dump({"quotas": {key: float(value) for key, value in quotas.items()}, "v": RECORD_VERSION})


def decode_record(key: bytes | None, value: bytes | None) -> tuple[ClientQuotaEntity, dict[str, float]]:
    """The entity and its quotas (empty for a tombstone); QuotaRecordError if either part is invalid."""
    entity = decode_key(key)
    if value is None:
        return entity, {}
    quotas = decode_value(value)
    error = check_stored_values(entity, quotas)
    if not error.ok:
        raise QuotaRecordError(f"invalid quota for {entity.describe()}: {error.message}")
    return entity, quotas


def decode_key(key: bytes | None) -> ClientQuotaEntity:
    document = _load(key, "key")
    parts = document.get("entity")
    if not isinstance(parts, dict) or not all(
        isinstance(kind, str) and (name is None or isinstance(name, str)) for kind, name in parts.items()
    ):
        raise QuotaRecordError("key has no entity mapping of type to name")
    unknown = set(parts) - set(ENTITY_TYPES)
    if unknown:
        raise QuotaRecordError(f"key names unknown entity types {sorted(unknown)}")
    entity, error = entity_from_parts(parts.items())
    if entity is None:
        raise QuotaRecordError(f"key holds an invalid entity: {error.message}")
    return entity


def decode_value(value: bytes) -> dict[str, float]:
    document = _load(value, "value")
    quotas = document.get("quotas")
    if not isinstance(quotas, dict):
        raise QuotaRecordError("value has no quotas mapping")
    found: dict[str, float] = {}
    for key, number in quotas.items():
        if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number):
            raise QuotaRecordError(f"value of {key!r} is not a finite number")
        found[str(key)] = float(number)
    return found


def _dump(document: object) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def _load(data: bytes | None, part: str) -> dict[str, object]:
    if data is None:
        raise QuotaRecordError(f"record has no {part}")
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        raise QuotaRecordError(f"{part} is not JSON") from None
    if not isinstance(document, dict):
        raise QuotaRecordError(f"{part} is not a JSON object")
    version = document.get("v")
    if version != RECORD_VERSION:
        raise QuotaRecordError(f"{part} has format version {version!r}; this Sluice reads {RECORD_VERSION}")
    return document
