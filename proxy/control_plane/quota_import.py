"""`sluice quotas import`, planned sans-IO: what the brokers' client quotas become in Sluice's store.

The tool reads every client quota the brokers hold (DescribeClientQuotas with an empty, non-strict
filter), plans here, and then writes the plan through Sluice's own AlterClientQuotas (so the store, its
followers and quota-admin authorisation all apply), optionally removing the quotas from the brokers
afterwards. Nothing is divided: a quota of Q on the brokers becomes a quota of Q in Sluice.

That is not the same limit. A broker enforces its quota on its own traffic only, so a client that talks
to all N brokers could move up to N x Q in total; Sluice enforces Q over everything that passes through
it, for the whole cluster. `render_plan` says so in the output, with the numbers.

For each broker quota the plan is one of:
* add: Sluice has no value for that entity and key;
* same: Sluice already has that value;
* conflict: Sluice has another value (stored through the API or set in its file); kept, unless the
  tool runs with `--overwrite`, which makes it an update;
* skip: Sluice cannot take it (a key it does not know, a host name for an IP entity, an invalid value).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from sluice.proxy.control_plane.client_quota_entity import ClientQuotaEntity
from sluice.proxy.control_plane.quota_admin_errors import check_quota_value
from sluice.proxy.control_plane.quota_alter import entity_from_parts, valid_keys

Part = tuple[str, str | None]


class Action(StrEnum):
    ADD = "add"
    SAME = "same"
    UPDATE = "update"
    CONFLICT = "conflict"
    SKIP = "skip"


@dataclass(frozen=True, slots=True)
class PlannedQuota:
    entity: ClientQuotaEntity | None  # None when the brokers' entity is not one Sluice can hold
    entity_text: str  # as kafka-configs.sh names it, for the output
    key: str
    broker_value: float
    action: Action
    sluice_value: float | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ImportPlan:
    quotas: tuple[PlannedQuota, ...]
    broker_count: int
    overwrite: bool = False
    counts: Mapping[Action, int] = field(default_factory=dict)

    def writes(self) -> dict[ClientQuotaEntity, dict[str, float]]:
        """What to send to Sluice's AlterClientQuotas: entity -> {key: value} for adds and updates."""
        found: dict[ClientQuotaEntity, dict[str, float]] = {}
        for quota in self.quotas:
            if quota.action in (Action.ADD, Action.UPDATE) and quota.entity is not None:
                found.setdefault(quota.entity, {})[quota.key] = quota.broker_value
        return found

    def broker_removals(self) -> dict[tuple[Part, ...], list[str]]:
        """What `--remove-from-brokers` removes: every broker quota that Sluice now holds the same value of.

        Skipped and kept conflicting quotas stay on the brokers, so nothing is lost.
        """
        found: dict[tuple[Part, ...], list[str]] = {}
        for quota in self.quotas:
            if quota.entity is not None and quota.action in (Action.ADD, Action.UPDATE, Action.SAME):
                found.setdefault(quota.entity.wire_parts(), []).append(quota.key)
        return found


def plan_import(
    broker_quotas: Iterable[tuple[Sequence[Part], Sequence[tuple[str, float]]]],
    in_force: Mapping[ClientQuotaEntity, Mapping[str, float]],
    broker_count: int,
    *,
    overwrite: bool = False,
) -> ImportPlan:
    """Plan the import of `broker_quotas` (DescribeClientQuotas entries) against what Sluice enforces."""
    planned: list[PlannedQuota] = []
    for parts, values in broker_quotas:
        entity, error = entity_from_parts(parts)
        text = entity.describe() if entity is not None else _parts_text(parts)
        for key, value in sorted(values):
            if entity is None:
                planned.append(PlannedQuota(None, text, key, value, Action.SKIP, reason=str(error.message)))
                continue
            check = check_quota_value(valid_keys(entity), key, value)
            if not check.ok:
                planned.append(PlannedQuota(entity, text, key, value, Action.SKIP, reason=str(check.message)))
                continue
            current = in_force.get(entity, {}).get(key)
            if current is None:
                action = Action.ADD
            elif current == value:
                action = Action.SAME
            else:
                action = Action.UPDATE if overwrite else Action.CONFLICT
            planned.append(PlannedQuota(entity, text, key, value, action, current))
    planned.sort(key=lambda q: (q.entity.sort_key() if q.entity else (), q.entity_text, q.key))
    counts: dict[Action, int] = {}
    for quota in planned:
        counts[quota.action] = counts.get(quota.action, 0) + 1
    return ImportPlan(tuple(planned), broker_count, overwrite, counts)


def render_plan(plan: ImportPlan, *, dry_run: bool, remove_from_brokers: bool) -> list[str]:
    """The tool's output, line by line."""
    lines = [
        f"Client quotas found on the brokers: {len(plan.quotas)} (cluster of {plan.broker_count} brokers)"
    ]
    for quota in plan.quotas:
        lines.append(f"  {quota.entity_text}: {quota.key}={quota.broker_value!r}: {_what(quota)}")
    counts = plan.counts
    lines.append(
        "Plan: "
        + ", ".join(f"{counts.get(action, 0)} {action.value}" for action in Action)
        + (" (dry run: nothing written)" if dry_run else "")
    )
    if remove_from_brokers:
        removals = sum(len(keys) for keys in plan.broker_removals().values())
        verb = "would be removed" if dry_run else "will be removed"
        lines.append(
            f"From the brokers, {removals} quota(s) {verb} once Sluice holds them; skipped and "
            "conflicting ones stay."
        )
    lines.extend(_per_broker_note(plan))
    return lines


def _what(quota: PlannedQuota) -> str:
    if quota.action is Action.ADD:
        return "add to Sluice"
    if quota.action is Action.SAME:
        return "Sluice already enforces this value"
    if quota.action is Action.UPDATE:
        return f"replace Sluice's {quota.sluice_value!r} (--overwrite)"
    if quota.action is Action.CONFLICT:
        return f"kept Sluice's {quota.sluice_value!r} (use --overwrite to take the brokers' value)"
    return f"skipped: {quota.reason}"


def _per_broker_note(plan: ImportPlan) -> list[str]:
    n = plan.broker_count
    if n <= 1:
        return [
            "Note: Sluice enforces each quota over all traffic through it; with one broker that is the "
            "same limit the broker enforced."
        ]
    return [
        f"Note: nothing is divided. Each of the {n} brokers enforced these quotas on its own traffic, so a "
        f"client using all {n} brokers could reach {n} x the quota in total. Sluice enforces the quota once, "
        f"for the whole cluster: such a client now gets at most 1/{n} of what the brokers allowed it in "
        f"total (a producer_byte_rate of 1 MB/s allowed up to {n} MB/s across {n} brokers; in Sluice it "
        f"is 1 MB/s). To keep the old total, set {n} x the value through Sluice after the import."
    ]


def _parts_text(parts: Sequence[Part]) -> str:
    """An entity Sluice cannot hold, in kafka-configs.sh's words as far as they go."""
    words = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}
    return (
        ", ".join(
            f"the default {words.get(kind, kind)}" if name is None else f"{words.get(kind, kind)} '{name}'"
            for kind, name in parts
        )
        or "(an empty entity)"
    )
