"""proxy/control_plane/quota_describe.py and proxy/control_plane/quota_alter.py: Kafka's validation, messages
and matching (spec §7.4, §7.5), including the 13-entity match vectors of ClientQuotasRequestTest."""

from __future__ import annotations

import pytest
from quota_admin_cases import ALTER_ERRORS, DESCRIBE_ERRORS, default, exact, of_type, remove_op, set_op

from sluice.proxy.control_plane.client_quota_entity import ClientQuotaEntity
from sluice.proxy.control_plane.quota_admin_errors import INVALID_REQUEST, UNSUPPORTED_VERSION
from sluice.proxy.control_plane.quota_alter import apply_changes, plan_alteration
from sluice.proxy.control_plane.quota_describe import MATCH_EXACT, describe_quotas
from sluice.quota import DEFAULT

E = ClientQuotaEntity


def uc(user: object = None, client: object = None) -> ClientQuotaEntity:
    return E(user=user, client_id=client)  # type: ignore[arg-type]


# testDescribeClientQuotasMatchPartial's fixture: 11 user/client entities and 2 IP entities.
USER_CLIENT = {
    uc("user-1", "client-id-1"): 50.50,
    uc("user-2", "client-id-1"): 51.51,
    uc("user-3", "client-id-2"): 52.52,
    uc(DEFAULT, "client-id-1"): 53.53,
    uc("user-1", DEFAULT): 54.54,
    uc("user-3", DEFAULT): 55.55,
    uc("user-1"): 56.56,
    uc("user-2"): 57.57,
    uc("user-3"): 58.58,
    uc(DEFAULT): 59.59,
    uc(None, "client-id-2"): 60.60,
}
IPS = {E(ip="1.2.3.4"): 10.0, E(ip="2.3.4.5"): 20.0}
FIXTURE = {
    **{e: {"request_percentage": v} for e, v in USER_CLIENT.items()},
    **{e: {"connection_creation_rate": v} for e, v in IPS.items()},
}


def matched(components: list, strict: bool) -> set[ClientQuotaEntity]:
    error, entries = describe_quotas(FIXTURE, components, strict)
    assert error.ok and entries is not None
    assert all(values == FIXTURE[entity] for entity, values in entries)
    return {entity for entity, _ in entries}


@pytest.mark.parametrize(
    ("components", "strict", "expected"),
    [
        ([exact("user", "user-1")], False, 3),
        ([exact("user", "unknown")], False, 0),
        ([exact("client-id", "client-id-2")], False, 2),
        ([default("user")], False, 2),
        ([exact("user", "user-2")], True, 1),
        ([exact("client-id", "client-id-1")], True, 0),
        ([of_type("user")], True, 4),
        ([of_type("user")], False, 10),
        ([of_type("client-id")], True, 1),
        ([of_type("client-id")], False, 7),
        ([of_type("ip")], False, 2),
        ([], False, 13),
        ([], True, 0),
    ],
)
def test_partial_match_vectors(components: list, strict: bool, expected: int) -> None:
    assert len(matched(components, strict)) == expected


def test_partial_matches_are_the_right_entities() -> None:
    assert matched([exact("user", "user-1")], False) == {
        uc("user-1", "client-id-1"),
        uc("user-1", DEFAULT),
        uc("user-1"),
    }
    assert matched([of_type("user")], True) == {uc("user-1"), uc("user-2"), uc("user-3"), uc(DEFAULT)}
    assert matched([default("user")], False) == {uc(DEFAULT, "client-id-1"), uc(DEFAULT)}


@pytest.mark.parametrize("entity", list(FIXTURE))
def test_exact_match_of_every_fixture_entity_finds_only_it(entity: ClientQuotaEntity) -> None:
    components = [default(k) if n is None else exact(k, n) for k, n in entity.wire_parts()]
    assert matched(components, True) == {entity}


@pytest.mark.parametrize(
    "entity",
    [
        uc("user-1", "client-id-2"),
        uc("user-3", "client-id-1"),
        uc("user-2", DEFAULT),
        uc("user-4"),
        uc(DEFAULT, "client-id-2"),
        uc(None, "client-id-1"),
        uc(None, "client-id-3"),
    ],
)
def test_exact_match_of_absent_entities_is_empty(entity: ClientQuotaEntity) -> None:
    components = [default(k) if n is None else exact(k, n) for k, n in entity.wire_parts()]
    assert matched(components, True) == set()


def test_a_client_id_named_default_is_not_the_default_entity() -> None:
    quotas = {uc(None, "<default>"): {"producer_byte_rate": 20000.0}}
    assert describe_quotas(quotas, [default("client-id")], True)[1] == []
    assert describe_quotas(quotas, [exact("client-id", "<default>")], True)[1] == [
        (uc(None, "<default>"), {"producer_byte_rate": 20000.0})
    ]


def test_ip_exact_match_compares_canonical_addresses() -> None:
    quotas = {E(ip="192.0.2.1"): {"connection_creation_rate": 5.0}}
    assert len(describe_quotas(quotas, [exact("ip", "::ffff:192.0.2.1")], True)[1] or []) == 1


@pytest.mark.parametrize(("components", "code", "message"), DESCRIBE_ERRORS)
def test_describe_filter_errors_fail_the_whole_request(components: list, code: int, message: str) -> None:
    for strict in (False, True):
        error, entries = describe_quotas(FIXTURE, components, strict)
        assert entries is None
        assert error.code == code
        assert error.message is not None and error.message.startswith(message)


def test_unknown_type_wins_over_a_later_bad_match_type_but_not_an_earlier_one() -> None:
    error, _ = describe_quotas({}, [("other", 7, None)], False)
    assert error.code == UNSUPPORTED_VERSION  # the type is checked before the match type
    error, _ = describe_quotas({}, [("user", 7, None), ("other", MATCH_EXACT, "x")], False)
    assert error.code == INVALID_REQUEST


# -- AlterClientQuotas ------------------------------------------------------------------------------


def one(parts: list, ops: list, stored: dict | None = None, file_sources: dict | None = None):
    [plan] = plan_alteration([(parts, ops)], stored or {}, file_sources)
    return plan


@pytest.mark.parametrize(("parts", "ops", "message"), ALTER_ERRORS)
def test_alter_entity_errors(parts: list, ops: list, message: str) -> None:
    plan = one(parts, ops)
    assert plan.error.code == INVALID_REQUEST
    assert message in (plan.error.message or ""), plan.error.message
    assert plan.changes == {}


@pytest.mark.parametrize(
    ("parts", "ops"),
    [
        ([("user", "u")], [set_op("request_percentage", 12.34)]),
        ([("user", "u")], [set_op("producer_byte_rate", 10000.0000001)]),
        ([("user", None), ("client-id", None)], [set_op("controller_mutation_rate", 0.5)]),
        ([("ip", "2001:db8::1")], [set_op("connection_creation_rate", 100)]),
        ([("user", "u")], [set_op("consumer_byte_rate", float(2**62))]),
    ],
)
def test_alter_accepts(parts: list, ops: list) -> None:
    plan = one(parts, ops)
    assert plan.error.ok
    assert set(plan.changes) == {op[0] for op in ops}


def test_error_messages_name_the_entity_as_kafka_prints_it() -> None:
    plan = one([("user", "alice"), ("client-id", None)], [set_op("x", 1), set_op("x", 2)])
    assert plan.error.message == (
        "Duplicate quota key x not updating quota for this entity "
        "ClientQuotaEntity(entries={user=alice, client-id=null})"
    )


def test_one_bad_entry_does_not_stop_the_others() -> None:
    plans = plan_alteration(
        [
            ([("user", "a")], [set_op("producer_byte_rate", 1.5)]),
            ([("user", "b")], [set_op("producer_byte_rate", 1000)]),
        ],
        {},
    )
    assert [p.error.code for p in plans] == [INVALID_REQUEST, 0]
    assert plans[1].changes == {"producer_byte_rate": 1000.0}


def test_one_bad_value_stops_its_whole_entry() -> None:
    plan = one([("user", "a")], [set_op("consumer_byte_rate", 100), set_op("producer_byte_rate", 1.5)])
    assert not plan.error.ok and plan.changes == {}


def test_duplicate_entities_are_refused_and_none_is_applied() -> None:
    plans = plan_alteration(
        [
            ([("user", "a"), ("client-id", "c")], [set_op("producer_byte_rate", 1)]),
            ([("client-id", "c"), ("user", "a")], [set_op("consumer_byte_rate", 1)]),
        ],
        {},
    )
    assert [p.error.message for p in plans] == [
        "Ignoring duplicate entity ClientQuotaEntity(entries={user=a, client-id=c})"
    ] * 2
    assert all(p.changes == {} for p in plans)


def test_removing_a_key_that_is_not_set_is_a_silent_success() -> None:
    plan = one([("user", "u")], [remove_op("producer_byte_rate")])
    assert plan.error.ok and plan.changes == {}


def test_removal_ignores_the_value_and_does_not_validate_the_key() -> None:
    stored = {uc("u"): {"producer_byte_rate": 10.0}}
    plan = one([("user", "u")], [("producer_byte_rate", -5.5, True), remove_op("bogus")], stored)
    assert plan.error.ok and plan.changes == {"producer_byte_rate": None}


def test_setting_the_stored_value_changes_nothing() -> None:
    stored = {uc("u"): {"producer_byte_rate": 10.0}}
    assert one([("user", "u")], [set_op("producer_byte_rate", 10)], stored).changes == {}
    assert one([("user", "u")], [set_op("producer_byte_rate", 11)], stored).changes == {
        "producer_byte_rate": 11.0
    }


def test_removing_a_quota_only_the_file_sets_is_refused_with_its_key() -> None:
    sources = {uc(None, "pump"): {"producer_byte_rate": "quota.entities[2]"}}
    plan = one([("client-id", "pump")], [remove_op("producer_byte_rate")], {}, sources)
    assert plan.error.code == INVALID_REQUEST
    assert "quota.entities[2]" in (plan.error.message or "")
    # With an override stored on top, removing it is fine (the file's value comes back into force).
    stored = {uc(None, "pump"): {"producer_byte_rate": 5.0}}
    assert one([("client-id", "pump")], [remove_op("producer_byte_rate")], stored, sources).error.ok


def test_ip_entities_are_stored_in_canonical_form() -> None:
    plan = one([("ip", "::ffff:192.0.2.1")], [set_op("connection_creation_rate", 3)])
    assert plan.entity == E(ip="192.0.2.1")


def test_default_entities_and_names_with_spaces() -> None:
    assert one([("user", None)], [set_op("producer_byte_rate", 1)]).entity == uc(DEFAULT)
    assert one([("user", "user with spaces")], [set_op("producer_byte_rate", 1)]).entity == uc(
        "user with spaces"
    )


def test_apply_changes() -> None:
    assert apply_changes({"a": 1.0, "b": 2.0}, {"a": None, "c": 3.0}) == {"b": 2.0, "c": 3.0}
    assert apply_changes({"a": 1.0}, {"a": None}) == {}
