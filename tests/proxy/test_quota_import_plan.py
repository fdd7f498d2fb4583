"""proxy/control_plane/quota_import.py: planning `sluice quotas import` from the brokers'
DescribeClientQuotas answer."""

from __future__ import annotations

from sluice.proxy.control_plane.client_quota_entity import ClientQuotaEntity
from sluice.proxy.control_plane.quota_import import Action, plan_import, render_plan
from sluice.quota import DEFAULT

E = ClientQuotaEntity

BROKERS = [
    ((("user", "alice"),), (("producer_byte_rate", 1048576.0),)),
    ((("client-id", "pump"),), (("producer_byte_rate", 2097152.0), ("consumer_byte_rate", 4096.0))),
    ((("user", None), ("client-id", None)), (("request_percentage", 50.0),)),
    ((("ip", "10.0.0.1"),), (("connection_creation_rate", 20.0),)),
    ((("ip", "broker-host.example"),), (("connection_creation_rate", 5.0),)),
    ((("user", "bob"),), (("producer_byte_rate", 1000.0), ("some_future_quota", 3.0))),
]
IN_FORCE = {
    E(client_id="pump"): {"producer_byte_rate": 2097152.0, "consumer_byte_rate": 8192.0},
}


def actions(plan) -> dict[tuple[str, str], Action]:
    return {(q.entity_text, q.key): q.action for q in plan.quotas}


def test_each_broker_quota_gets_an_action() -> None:
    plan = plan_import(BROKERS, IN_FORCE, broker_count=3)
    assert actions(plan) == {
        ("user-principal 'alice'", "producer_byte_rate"): Action.ADD,
        ("client-id 'pump'", "producer_byte_rate"): Action.SAME,
        ("client-id 'pump'", "consumer_byte_rate"): Action.CONFLICT,
        ("the default user-principal, the default client-id", "request_percentage"): Action.ADD,
        ("ip '10.0.0.1'", "connection_creation_rate"): Action.ADD,
        ("ip 'broker-host.example'", "connection_creation_rate"): Action.SKIP,
        ("user-principal 'bob'", "producer_byte_rate"): Action.ADD,
        ("user-principal 'bob'", "some_future_quota"): Action.SKIP,
    }
    assert plan.counts == {Action.ADD: 4, Action.SAME: 1, Action.CONFLICT: 1, Action.SKIP: 2}


def test_writes_hold_adds_only_unless_overwriting() -> None:
    plan = plan_import(BROKERS, IN_FORCE, broker_count=3)
    assert plan.writes() == {
        E(user="alice"): {"producer_byte_rate": 1048576.0},
        E(user=DEFAULT, client_id=DEFAULT): {"request_percentage": 50.0},
        E(ip="10.0.0.1"): {"connection_creation_rate": 20.0},
        E(user="bob"): {"producer_byte_rate": 1000.0},
    }
    overwrite = plan_import(BROKERS, IN_FORCE, broker_count=3, overwrite=True)
    assert overwrite.writes()[E(client_id="pump")] == {"consumer_byte_rate": 4096.0}


def test_nothing_is_divided() -> None:
    plan = plan_import(BROKERS, {}, broker_count=5)
    assert plan.writes()[E(user="alice")] == {"producer_byte_rate": 1048576.0}


def test_broker_removals_keep_what_sluice_does_not_hold() -> None:
    removals = plan_import(BROKERS, IN_FORCE, broker_count=3).broker_removals()
    assert removals[(("client-id", "pump"),)] == ["producer_byte_rate"]  # the conflict stays on the brokers
    assert removals[(("user", "bob"),)] == ["producer_byte_rate"]
    assert (("ip", "broker-host.example"),) not in removals


def test_output_explains_per_broker_against_cluster_wide() -> None:
    plan = plan_import(BROKERS, IN_FORCE, broker_count=3)
    lines = render_plan(plan, dry_run=True, remove_from_brokers=True)
    text = "\n".join(lines)
    assert lines[0] == "Client quotas found on the brokers: 8 (cluster of 3 brokers)"
    assert "  user-principal 'alice': producer_byte_rate=1048576.0: add to Sluice" in lines
    assert "kept Sluice's 8192.0 (use --overwrite" in text
    assert "skipped: broker-host.example is not a valid IP or resolvable host." in text
    assert "skipped: Invalid configuration key some_future_quota" in text
    assert "Plan: 4 add, 1 same, 0 update, 1 conflict, 2 skip (dry run: nothing written)" in lines
    assert "From the brokers, 5 quota(s) would be removed once Sluice holds them" in text
    assert "could reach 3 x the quota in total" in text and "at most 1/3" in text


def test_single_broker_note() -> None:
    lines = render_plan(plan_import([], {}, broker_count=1), dry_run=False, remove_from_brokers=False)
    assert lines[0] == "Client quotas found on the brokers: 0 (cluster of 1 brokers)"
    assert "same limit the broker enforced" in lines[-1]
