"""DescribeClientQuotas and AlterClientQuotas answered by Sluice: bytes in, bytes out, no I/O here.

The QuotaAdmin filter hands the request body over and sends back what comes out. A describe is
answered at once from the quotas in force. An alter is decided at once (authorisation, Kafka's
validation, `validate_only`), and what it changes comes back as the store records to write; the answer
is only made when the store has acknowledged them (`AlterCall.finish`), so a client is never told
"done" for a change that is not stored. A failed write answers every changed entity with the store's
error, and nothing changes in the engine.

Authorisation (`quota.admin_principals`): Kafka asks DESCRIBE_CONFIGS / ALTER_CONFIGS on the cluster;
Sluice asks whether the connection's user (its SASL or mTLS principal, ANONYMOUS otherwise) is listed.
Refused: describe answers CLUSTER_AUTHORIZATION_FAILED at the top, alter on every entry, as Kafka does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

from sluice.protocol.client_quota_codec import (
    AlterResult,
    DescribedEntity,
    Entity,
    decode_alter_request,
    decode_describe_request,
    encode_alter_response,
    encode_describe_response,
    encode_described_entity,
)
from sluice.proxy.control_plane.client_quota_entity import ClientQuotaEntity
from sluice.proxy.control_plane.quota_admin_errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    CLUSTER_AUTHORIZATION_FAILED_MESSAGE,
    ApiError,
)
from sluice.proxy.control_plane.quota_alter import EntryPlan, apply_changes, plan_alteration
from sluice.proxy.control_plane.quota_describe import describe_quotas
from sluice.proxy.control_plane.quota_records import encode_key, encode_value
from sluice.proxy.control_plane.quota_state import QuotaState

DENIED = ApiError(CLUSTER_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED_MESSAGE)


class StoreRecord(NamedTuple):
    """One record for the store topic: the entity's key, and its value (None: a tombstone)."""

    key: bytes
    value: bytes | None


class AlterCall(NamedTuple):
    """An alter, decided. With `records`, write them, then call `finish` with the outcome."""

    answer: bytes | None  # the response, when there is nothing to write
    records: tuple[StoreRecord, ...]  # as the store stands now
    # finish(None, offset) when the store acknowledged the records (written as one batch at `offset`);
    # finish(error) when it did not: every changed entity gets that error.
    finish: Callable[..., bytes]
    # The records again, from the store as it stands when the write begins: alters on one instance are
    # written one at a time, and each entity's new value must build on the one written just before.
    refresh: Callable[[], tuple[StoreRecord, ...]]


class QuotaAdministration:
    """The quota admin APIs over one instance's QuotaState."""

    __slots__ = ("_encoded", "state")

    def __init__(self, state: QuotaState) -> None:
        self.state = state
        # (flexible?, entity) -> (its quotas, the encoded describe entry), reused while they stay equal:
        # a describe of a large store then mostly joins bytes it already has.
        self._encoded: dict[tuple[bool, ClientQuotaEntity], tuple[dict[str, float], bytes]] = {}

    def describe(self, version: int, body: bytes | memoryview, user: str) -> bytes:
        """The DescribeClientQuotas answer body (ProtocolError if the request body is malformed)."""
        request = decode_describe_request(version, body)
        if not self.state.settings.admin_principals.may_describe(user):
            return encode_describe_response(version, None, DENIED.code, DENIED.message)
        error, found = describe_quotas(self.state.in_force(), request.components, request.strict)
        if found is None:
            return encode_describe_response(version, None, error.code, error.message)
        return encode_describe_response(version, [self._entry(version, e, v) for e, v in found])

    def _entry(self, version: int, entity: ClientQuotaEntity, values: Mapping[str, float]) -> bytes:
        key = (version >= 1, entity)
        cached = self._encoded.get(key)
        if cached is not None and cached[0] == values:
            return cached[1]
        quotas = dict(values)
        encoded = encode_described_entity(
            version, DescribedEntity(entity.wire_parts(), tuple(sorted(quotas.items())))
        )
        if len(self._encoded) > 2 * len(self.state.store) + 10_000:
            self._encoded.clear()  # entities come and go: never let the cache outgrow the store by much
        self._encoded[key] = (quotas, encoded)
        return encoded

    def alter(self, version: int, body: bytes | memoryview, user: str) -> AlterCall:
        """Decide an AlterClientQuotas (ProtocolError if the request body is malformed)."""
        request = decode_alter_request(version, body)
        if not self.state.settings.admin_principals.may_alter(user):
            results = [AlterResult(DENIED.code, DENIED.message, entry.entity) for entry in request.entries]
            return _answered(encode_alter_response(version, results))
        state = self.state
        plans = plan_alteration(
            [(entry.entity, entry.ops) for entry in request.entries],
            state.store.snapshot(),
            state.file_sources(),
        )
        changed = [
            (plan.entity, plan.changes)
            for plan in plans
            if plan.error.ok and plan.changes and plan.entity is not None
        ]
        wire = [entry.entity for entry in request.entries]
        if request.validate_only or not changed:
            return _answered(encode_alter_response(version, _results(plans, wire, None)))
        writes: dict[ClientQuotaEntity, dict[str, float]] = {}

        def refresh() -> tuple[StoreRecord, ...]:
            writes.clear()
            for entity, changes in changed:
                writes[entity] = apply_changes(state.store.get(entity), changes)
            return tuple(StoreRecord(encode_key(e), encode_value(q)) for e, q in writes.items())

        def finish(failure: ApiError | None, offset: int | None = None) -> bytes:
            if failure is None:
                state.store_written(writes, offset)
            return encode_alter_response(version, _results(plans, wire, failure, writes))

        return AlterCall(None, refresh(), finish, refresh)


def _answered(answer: bytes) -> AlterCall:
    return AlterCall(answer, (), lambda *_: answer, tuple)


def _results(
    plans: list[EntryPlan],
    wire_entities: list[Entity],
    failure: ApiError | None,
    written: dict[ClientQuotaEntity, dict[str, float]] | None = None,
) -> list[AlterResult]:
    """One result per request entry, echoing the entity as the client sent it."""
    results = []
    for plan, wire_entity in zip(plans, wire_entities, strict=True):
        error = plan.error
        if error.ok and failure is not None and written is not None and plan.entity in written:
            error = failure
        results.append(AlterResult(error.code, error.message, wire_entity))
    return results
