"""proxy/control_plane/quota_admin.py on the wire: requests built with kafka-python's DescribeClientQuotas and
AlterClientQuotas classes at every version, answers read back with them. Authorisation, validate_only,
the store acknowledgement and its failure."""

from __future__ import annotations

import asyncio

import pytest
from kafka.protocol.admin.client_quotas import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from quota_admin_cases import ALTER_ERRORS, DESCRIBE_ERRORS

from sluice.config import load_config
from sluice.proxy.control_plane.client_quota_entity import ClientQuotaEntity
from sluice.proxy.control_plane.quota_admin import QuotaAdministration
from sluice.proxy.control_plane.quota_admin_errors import REQUEST_TIMED_OUT, ApiError
from sluice.proxy.control_plane.quota_records import decode_record
from sluice.proxy.control_plane.quota_state import QuotaState

VERSIONS = (0, 1)
BASE = {"listen": "127.0.0.1:9092", "upstream.bootstrap": ["kafka:19092"]}
EXACT, DEFAULT, SPECIFIED = 0, 1, 2


def admin(quota: dict | None = None) -> QuotaAdministration:
    settings = load_config(overrides={**BASE, "quota": quota or {}}).quota
    return QuotaAdministration(QuotaState(settings))


def describe_body(version: int, components: list[tuple[str, int, str | None]], strict: bool) -> bytes:
    part = DescribeClientQuotasRequest.ComponentData
    message = DescribeClientQuotasRequest(
        version=version,
        components=[part(version=version, entity_type=t, match_type=m, match=n) for t, m, n in components],
        strict=strict,
    )
    return bytes(message.encode(version=version))


def alter_body(version: int, entries: list[tuple[list, list]], validate_only: bool = False) -> bytes:
    entry = AlterClientQuotasRequest.EntryData
    message = AlterClientQuotasRequest(
        version=version,
        entries=[
            entry(
                version=version,
                entity=[entry.EntityData(version=version, entity_type=t, entity_name=n) for t, n in entity],
                ops=[entry.OpData(version=version, key=k, value=v, remove=r) for k, v, r in ops],
            )
            for entity, ops in entries
        ],
        validate_only=validate_only,
    )
    return bytes(message.encode(version=version))


def describe(
    a: QuotaAdministration, version: int, components: list, strict: bool = True, user: str = "ANONYMOUS"
):
    return DescribeClientQuotasResponse.decode(
        a.describe(version, describe_body(version, components, strict), user), version=version
    )


def described(response) -> dict:
    return {
        tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
        for entry in response.entries
    }


def alter_answer(
    a: QuotaAdministration,
    version: int,
    entries: list,
    *,
    validate_only: bool = False,
    user: str = "ANONYMOUS",
    failure: ApiError | None = None,
):
    call = a.alter(version, alter_body(version, entries, validate_only), user)
    body = call.answer if call.answer is not None else call.finish(failure)
    return call, AlterClientQuotasResponse.decode(body, version=version)


def codes(response) -> list[tuple[int, str | None]]:
    return [(e.error_code, e.error_message) for e in response.entries]


@pytest.mark.parametrize("version", VERSIONS)
def test_alter_is_answered_after_the_store_acknowledges_and_then_in_force(version: int) -> None:
    a = admin()
    call = a.alter(
        version,
        alter_body(version, [([("client-id", "pump")], [("producer_byte_rate", 2097152.0, False)])]),
        "ANONYMOUS",
    )
    assert call.answer is None
    assert [decode_record(r.key, r.value) for r in call.records] == [
        (ClientQuotaEntity(client_id="pump"), {"producer_byte_rate": 2097152.0})
    ]
    # Not yet acknowledged: not in force anywhere.
    assert a.state.live.managers.produce.quota("ANONYMOUS", "pump") > 1e18
    answer = AlterClientQuotasResponse.decode(call.finish(None), version=version)
    assert codes(answer) == [(0, None)]
    assert [(e.entity_type, e.entity_name) for e in answer.entries[0].entity] == [("client-id", "pump")]
    assert a.state.live.managers.produce.quota("ANONYMOUS", "pump") == 2097152.0
    assert described(describe(a, version, [("client-id", EXACT, "pump")])) == {
        (("client-id", "pump"),): {"producer_byte_rate": 2097152.0}
    }


@pytest.mark.parametrize("version", VERSIONS)
def test_a_store_failure_is_an_error_never_a_false_success(version: int) -> None:
    a = admin()
    timeout = ApiError(REQUEST_TIMED_OUT, "the quota store did not acknowledge the write")
    _, answer = alter_answer(
        a,
        version,
        [
            ([("user", "alice")], [("producer_byte_rate", 1000.0, False)]),
            ([("user", "bob")], [("producer_byte_rate", 1.5, False)]),
        ],
        failure=timeout,
    )
    assert codes(answer) == [
        (REQUEST_TIMED_OUT, "the quota store did not acknowledge the write"),
        (42, "producer_byte_rate cannot be a fractional value."),
    ]
    assert a.state.store.snapshot() == {}
    assert a.state.live.managers.produce.quota("alice", "x") > 1e18


@pytest.mark.parametrize("version", VERSIONS)
def test_validate_only_answers_at_once_and_changes_nothing(version: int) -> None:
    a = admin()
    call, answer = alter_answer(
        a, version, [([("user", None)], [("consumer_byte_rate", 50000.0, False)])], validate_only=True
    )
    assert call.records == () and codes(answer) == [(0, None)]
    _, answer = alter_answer(
        a, version, [([("user", None)], [("consumer_byte_rate", 0.5, False)])], validate_only=True
    )
    assert codes(answer) == [(42, "consumer_byte_rate cannot be a fractional value.")]
    assert described(describe(a, version, [], strict=False)) == {}


@pytest.mark.parametrize("version", VERSIONS)
def test_describe_shows_file_quotas_with_stored_ones_on_top(version: int) -> None:
    a = admin({"entities": [{"client_id": "pump", "producer_byte_rate": 1000, "consumer_byte_rate": 2000}]})
    _, answer = alter_answer(a, version, [([("client-id", "pump")], [("producer_byte_rate", 5000.0, False)])])
    assert codes(answer) == [(0, None)]
    assert described(describe(a, version, [("client-id", SPECIFIED, None)])) == {
        (("client-id", "pump"),): {"producer_byte_rate": 5000.0, "consumer_byte_rate": 2000.0}
    }
    _, answer = alter_answer(a, version, [([("client-id", "pump")], [("consumer_byte_rate", 0.0, True)])])
    assert answer.entries[0].error_code == 42
    assert "configuration file" in answer.entries[0].error_message


@pytest.mark.parametrize("version", VERSIONS)
def test_describe_errors_are_top_level_with_null_entries(version: int) -> None:
    response = describe(admin(), version, [("group", EXACT, "g")])
    assert (response.error_code, response.error_message, response.entries) == (
        35,
        "Unsupported entity type group",
        None,
    )
    response = describe(admin(), version, [("user", EXACT, None)])
    assert response.error_code == 42 and response.entries is None


@pytest.mark.parametrize("version", VERSIONS)
def test_authorisation(version: int) -> None:
    a = admin({"admin_principals": {"alter": ["User:admin"], "describe": ["User:ops"]}})
    denied = describe(a, version, [], strict=False, user="eve")
    assert (denied.error_code, denied.error_message, denied.entries) == (
        31,
        "Cluster authorization failed.",
        None,
    )
    assert describe(a, version, [], strict=False, user="ops").error_code == 0
    entries = [
        ([("user", "x")], [("producer_byte_rate", 1.0, False)]),
        ([("ip", None)], [("connection_creation_rate", 1.0, False)]),
    ]
    call, answer = alter_answer(a, version, entries, user="ops")
    assert call.records == ()
    assert codes(answer) == [(31, "Cluster authorization failed.")] * 2
    assert codes(alter_answer(a, version, entries, user="admin")[1]) == [(0, None)] * 2


@pytest.mark.parametrize("version", VERSIONS)
def test_an_ip_quota_reaches_the_connection_engine(version: int) -> None:
    a = admin()
    _, answer = alter_answer(
        a, version, [([("ip", "::ffff:10.1.2.3")], [("connection_creation_rate", 4.0, False)])]
    )
    assert codes(answer) == [(0, None)]
    # The echo is the entity the client sent (the Java client maps answers back by it).
    assert answer.entries[0].entity[0].entity_name == "::ffff:10.1.2.3"
    assert a.state.live.connections.quota("10.1.2.3") == 4.0


@pytest.mark.parametrize("version", VERSIONS)
def test_removing_the_last_key_writes_a_tombstone(version: int) -> None:
    a = admin()
    alter_answer(a, version, [([("user", "a")], [("producer_byte_rate", 10.0, False)])])
    call, answer = alter_answer(a, version, [([("user", "a")], [("producer_byte_rate", 0.0, True)])])
    assert [r.value for r in call.records] == [None]
    assert codes(answer) == [(0, None)] and a.state.store.snapshot() == {}
    # Removing it again writes nothing and still succeeds.
    call, answer = alter_answer(a, version, [([("user", "a")], [("producer_byte_rate", 0.0, True)])])
    assert call.records == () and codes(answer) == [(0, None)]


# -- every rule of spec 7.4/7.5 on the wire, at each version (the cases: tests/quota_admin_cases.py) --------


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("components", "code", "message"), DESCRIBE_ERRORS)
def test_every_describe_rule_on_the_wire(version: int, components: list, code: int, message: str) -> None:
    for strict in (False, True):
        answer = describe(admin(), version, components, strict=strict)
        assert answer.entries is None
        assert answer.error_code == code
        assert answer.error_message.startswith(message)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("parts", "ops", "message"), ALTER_ERRORS)
def test_every_alter_rule_on_the_wire(version: int, parts: list, ops: list, message: str) -> None:
    for validate_only in (True, False):
        a = admin()
        call, answer = alter_answer(a, version, [(parts, ops)], validate_only=validate_only)
        assert call.records == ()
        [(code, text)] = codes(answer)
        assert code == 42 and message in text
        # The answer echoes the entity as it was sent.
        assert [(e.entity_type, e.entity_name) for e in answer.entries[0].entity] == list(parts)
        assert a.state.store.snapshot() == {}


async def test_alters_on_one_instance_are_written_one_at_a_time_each_on_the_last() -> None:
    from sluice.proxy.filters.quota_admin import QuotaAdminFactory

    a = admin()
    written: list[tuple] = []

    async def slow_write(records) -> int:
        await asyncio.sleep(0.05)  # a store that takes its time: the other alter arrives meanwhile
        written.append(tuple(decode_record(r.key, r.value) for r in records))
        return len(written)

    factory = QuotaAdminFactory(a, slow_write)
    # Both decided before either is written: each changes a different key of the same entity.
    first = a.alter(1, alter_body(1, [([("client-id", "c")], [("producer_byte_rate", 10.0, False)])]), "x")
    second = a.alter(1, alter_body(1, [([("client-id", "c")], [("consumer_byte_rate", 20.0, False)])]), "x")
    answers = await asyncio.gather(factory.store(first, "peer", "x"), factory.store(second, "peer", "x"))
    assert [codes(AlterClientQuotasResponse.decode(body, version=1)) for body in answers] == [[(0, None)]] * 2
    entity = ClientQuotaEntity(client_id="c")
    assert written == [
        ((entity, {"producer_byte_rate": 10.0}),),
        ((entity, {"producer_byte_rate": 10.0, "consumer_byte_rate": 20.0}),),
    ]
    assert a.state.store.get(entity) == {"producer_byte_rate": 10.0, "consumer_byte_rate": 20.0}


async def test_a_failed_write_becomes_request_timed_out_and_changes_nothing() -> None:
    from sluice.proxy.filters.quota_admin import QuotaAdminFactory

    a = admin()

    async def unreachable(records) -> int:
        raise RuntimeError("the quota store topic _sluice_quotas was not reachable within 5 s")

    call = a.alter(0, alter_body(0, [([("user", "u")], [("producer_byte_rate", 10.0, False)])]), "x")
    body = await QuotaAdminFactory(a, unreachable).store(call, "peer", "x")
    [(code, message)] = codes(AlterClientQuotasResponse.decode(body, version=0))
    assert code == REQUEST_TIMED_OUT and "not reachable" in message and "nothing was changed" in message
    assert a.state.store.snapshot() == {}


async def test_right_after_start_up_answers_wait_for_the_store_to_be_read() -> None:
    from types import SimpleNamespace

    from sluice.protocol.headers import encode_request_header, frame, parse_request_header
    from sluice.proxy.filter_api.contract import Answer, Defer
    from sluice.proxy.filters.quota_admin import QuotaAdminFactory

    async def never(records) -> int:
        raise AssertionError("nothing to write")

    ready = asyncio.Event()
    factory = QuotaAdminFactory(admin(), never, ready)
    quota_filter = factory.create(SimpleNamespace(user="ANONYMOUS", peer="127.0.0.1:1"))  # type: ignore[arg-type]
    framed = frame(encode_request_header(48, 1, 5, "tool") + describe_body(1, [], False))
    header = parse_request_header(framed)
    deferred = quota_filter.on_request(header, framed)
    assert isinstance(deferred, Defer) and not deferred.ready.done()
    ready.set()
    await asyncio.wait_for(deferred.ready, 1)
    answered = quota_filter.on_request(header, framed)
    assert isinstance(answered, Answer)
