"""Quota admin through the real proxy in front of the mock cluster (which lacks both quota APIs):
kafka-configs.sh's sessions, the rules on the wire at each version, authorisation, the store shared by
three instances, a restart, and an unreachable store."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka_configs import KafkaConfigs
from mock_cluster_process import MockCluster
from proxy_process import ProxyProcess
from rawclient import RawClient

from sluice.protocol.client_quota_codec import (
    ALTER_CLIENT_QUOTAS,
    DESCRIBE_CLIENT_QUOTAS,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    AlterEntry,
    FilterComponent,
    QuotaOp,
    decode_alter_response,
    decode_describe_response,
    encode_alter_request,
    encode_describe_request,
)
from sluice.proxy.kafka_client import KafkaClient

VERSIONS = (0, 1)


@pytest.fixture(scope="module")
def cluster() -> Iterator[MockCluster]:
    with MockCluster(brokers=3, topics={"qa": 6}) as c:
        yield c


def store_config(topic: str, **quota: object) -> dict:
    return {"quota": {"store": {"topic": topic, "write_timeout_ms": 2000}, **quota}}


@pytest.fixture(scope="module")
def proxy(cluster: MockCluster) -> Iterator[ProxyProcess]:
    with ProxyProcess(cluster.bootstrap, store_config("qa-e2e-store")) as p:
        yield p


def describe(port: int, version: int, components: list[FilterComponent], strict: bool = True):
    with RawClient("127.0.0.1", port) as client:
        body = client.call_body(
            DESCRIBE_CLIENT_QUOTAS, version, encode_describe_request(version, components, strict)
        )
    return decode_describe_response(version, body)


def alter(port: int, version: int, entries: list[AlterEntry], validate_only: bool = False):
    with RawClient("127.0.0.1", port) as client:
        body = client.call_body(
            ALTER_CLIENT_QUOTAS, version, encode_alter_request(version, entries, validate_only)
        )
    return decode_alter_response(version, body)


def quotas_of(port: int, kind: str, name: str) -> dict[str, float]:
    answer = describe(port, 1, [FilterComponent(kind, MATCH_EXACT, name)])
    return dict(answer.entries[0].values) if answer.entries else {}


def test_api_versions_advertise_both_apis_although_the_brokers_lack_them(cluster, proxy) -> None:
    for port in (cluster.addresses[0][1], proxy.port, proxy.broker_port(1)):
        with RawClient("127.0.0.1", port) as client:
            answer = client.call(ApiVersionsRequest(version=2), 2, ApiVersionsResponse)
        ranges = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
        if port == cluster.addresses[0][1]:
            assert 48 not in ranges and 49 not in ranges  # the mock cluster itself
        else:
            assert ranges[48] == (0, 1) and ranges[49] == (0, 1)


def test_the_kafka_configs_session_of_docs_quotas_md(proxy) -> None:
    tool = KafkaConfigs("127.0.0.1", proxy.broker_port(2))
    server = ("--bootstrap-server", "sluice:9092")
    assert tool.run(
        *server,
        "--alter",
        "--add-config",
        "producer_byte_rate=2097152",
        "--entity-type",
        "clients",
        "--entity-name",
        "pump",
    ).stdout == ["Completed updating config for client pump."]
    assert tool.run(*server, "--describe", "--entity-type", "clients", "--entity-name", "pump").stdout == [
        "Quota configs for client-id 'pump' are producer_byte_rate=2097152.0"
    ]
    assert tool.run(
        *server,
        "--alter",
        "--add-config",
        "consumer_byte_rate=10485760,request_percentage=50",
        "--entity-type",
        "users",
        "--entity-default",
        "--entity-type",
        "clients",
        "--entity-default",
    ).stdout == ["Completed updating default config for users in the cluster."]
    assert tool.run(
        *server,
        "--describe",
        "--entity-type",
        "users",
        "--entity-default",
        "--entity-type",
        "clients",
        "--entity-default",
    ).stdout == [
        "Quota configs for the default user-principal, the default client-id are "
        "consumer_byte_rate=1.048576E7, request_percentage=50.0"
    ]
    assert tool.run(
        *server,
        "--alter",
        "--add-config",
        "connection_creation_rate=20",
        "--entity-type",
        "ips",
        "--entity-name",
        "10.1.2.3",
    ).stdout == ["Completed updating config for ip 10.1.2.3."]
    assert tool.run(
        *server,
        "--alter",
        "--delete-config",
        "producer_byte_rate",
        "--entity-type",
        "clients",
        "--entity-name",
        "pump",
    ).stdout == ["Completed updating config for client pump."]
    assert tool.run(
        *server,
        "--alter",
        "--delete-config",
        "producer_byte_rate",
        "--entity-type",
        "clients",
        "--entity-name",
        "pump",
    ) == (1, [], ["Invalid config(s): producer_byte_rate"])
    failed = tool.run(
        *server,
        "--alter",
        "--add-config",
        "producer_byte_rate=10000.5",
        "--entity-type",
        "users",
        "--entity-name",
        "alice",
    )
    assert failed.exit_code == 1
    assert failed.stderr[1] == (
        "java.util.concurrent.ExecutionException: org.apache.kafka.common.errors.InvalidRequestException: "
        "producer_byte_rate cannot be a fractional value."
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_the_rules_on_the_wire(proxy, version: int) -> None:
    unknown = describe(proxy.port, version, [FilterComponent("group", MATCH_EXACT, "g")])
    assert (unknown.error_code, unknown.error_message, unknown.entries) == (
        35,
        "Unsupported entity type group",
        None,
    )
    mixed = describe(
        proxy.port,
        version,
        [FilterComponent("ip", MATCH_SPECIFIED, None), FilterComponent("user", MATCH_SPECIFIED, None)],
    )
    assert mixed.error_code == 42 and mixed.entries is None
    entries = [
        AlterEntry((("user", f"wire-{version}"),), (QuotaOp("request_percentage", 12.34, False),)),
        AlterEntry((("user", "x"), ("ip", "1.2.3.4")), (QuotaOp("request_percentage", 1.0, False),)),
        AlterEntry((("client-id", ""),), (QuotaOp("producer_byte_rate", 1.0, False),)),
        AlterEntry((("ip", "10.0.0.9"),), (QuotaOp("connection_creation_rate", 0.0, False),)),
        AlterEntry((("client-id", "c"),), (QuotaOp("producer_byte_rate", 10000.5, False),)),
    ]
    checked = alter(proxy.port, version, entries, validate_only=True)
    assert [r.error_code for r in checked.results] == [0, 42, 42, 42, 42]
    assert [r.error_message for r in checked.results][1:] == [
        "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId",
        "Empty client-id not supported",
        "Quota connection_creation_rate must be greater than 0",
        "producer_byte_rate cannot be a fractional value.",
    ]
    assert quotas_of(proxy.port, "user", f"wire-{version}") == {}  # validate_only changed nothing
    applied = alter(proxy.port, version, entries)
    assert [r.error_code for r in applied.results] == [0, 42, 42, 42, 42]
    assert [r.entity for r in applied.results] == [e.entity for e in entries]
    assert quotas_of(proxy.port, "user", f"wire-{version}") == {"request_percentage": 12.34}


def test_authorisation(cluster) -> None:
    principals = {"admin_principals": {"alter": ["User:admin"], "describe": ["User:ANONYMOUS"]}}
    with ProxyProcess(cluster.bootstrap, store_config("qa-auth-store", **principals)) as p:
        denied = alter(
            p.port, 1, [AlterEntry((("user", "a"),), (QuotaOp("producer_byte_rate", 1.0, False),))]
        )
        assert [(r.error_code, r.error_message) for r in denied.results] == [
            (31, "Cluster authorization failed.")
        ]
        assert describe(p.port, 1, [], strict=False).error_code == 0  # ANONYMOUS may describe
        assert not [e for e in p.events() if e.get("event") == "quota_admin_open"]
    with ProxyProcess(
        cluster.bootstrap, store_config("qa-auth-store", admin_principals={"alter": ["User:admin"]})
    ) as p:
        refused = describe(p.port, 0, [], strict=False)
        assert (refused.error_code, refused.entries) == (31, None)


async def _wait(predicate, timeout_s: float) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout_s:
            raise AssertionError("not seen in time")
        await asyncio.sleep(0.02)  # a poll: the predicate is the event
    return time.monotonic() - start


async def test_three_instances_see_one_alter_and_a_restart_keeps_it(cluster) -> None:
    config = store_config("qa-three-store")
    proxies = [ProxyProcess(cluster.bootstrap, config) for _ in range(3)]
    try:
        first, *others = proxies
        answer = alter(
            first.port,
            1,
            [AlterEntry((("client-id", "shared"),), (QuotaOp("producer_byte_rate", 3000000.0, False),))],
        )
        assert answer.results[0].error_code == 0
        assert quotas_of(first.port, "client-id", "shared") == {"producer_byte_rate": 3000000.0}
        for other in others:
            waited = await _wait(lambda p=other: quotas_of(p.port, "client-id", "shared") != {}, 5.0)
            assert waited < 2.0
        for other in others:
            other.wait_for_event("quota_changed", entity="client-id 'shared'", new=3000000.0)
    finally:
        for p in proxies:
            p.close()
    with ProxyProcess(cluster.bootstrap, config) as restarted:
        assert quotas_of(restarted.port, "client-id", "shared") == {"producer_byte_rate": 3000000.0}


async def test_an_unreachable_store_fails_the_alter_and_keeps_the_quotas_in_force(cluster) -> None:
    config = store_config("qa-down-store", entities=[{"client_id": "kept", "producer_byte_rate": 1000}])
    with ProxyProcess(cluster.bootstrap, config) as p:
        ok = alter(
            p.port,
            1,
            [AlterEntry((("client-id", "before"),), (QuotaOp("consumer_byte_rate", 500.0, False),))],
        )
        assert ok.results[0].error_code == 0
        client = KafkaClient(cluster.addresses)
        try:
            await client.metadata(["qa-down-store"])
            leader = client.cluster.leader_for("qa-down-store", 0)
        finally:
            await client.stop()
        assert leader is not None
        cluster.broker_down(leader)
        try:
            others = [port for node, port in ((n, p.broker_port(n)) for n in (1, 2, 3)) if node != leader]
            failed = alter(
                others[0],
                1,
                [AlterEntry((("client-id", "after"),), (QuotaOp("consumer_byte_rate", 9.0, False),))],
            )
            assert failed.results[0].error_code == 7
            assert "qa-down-store" in failed.results[0].error_message
            assert quotas_of(others[0], "client-id", "after") == {}
            assert quotas_of(others[0], "client-id", "before") == {"consumer_byte_rate": 500.0}
            assert quotas_of(others[0], "client-id", "kept") == {"producer_byte_rate": 1000.0}
        finally:
            cluster.broker_up(leader)


def test_broker_mode_forwards_the_quota_apis_and_creates_no_store() -> None:
    from doubles.quota_broker import QuotaBrokerDouble

    quotas = {(("client-id", "pump"),): {"producer_byte_rate": 1048576.0}}
    with QuotaBrokerDouble(broker_count=1, quotas=quotas) as brokers:
        config = {"quota": {"admin": "broker"}}
        with ProxyProcess(brokers.bootstrap, config, wait_for_brokers=False) as p:
            assert quotas_of(p.port, "client-id", "pump") == {"producer_byte_rate": 1048576.0}
            answer = alter(
                p.port, 1, [AlterEntry((("user", "bob"),), (QuotaOp("request_percentage", 5.0, False),))]
            )
            assert answer.results[0].error_code == 0
            assert brokers.quotas[frozenset({("user", "bob")})] == {"request_percentage": 5.0}
            assert brokers.describe_requests == 1
            events = {e.get("event") for e in p.events()}
            assert "quota_store_topic" not in events and "quota_admin_open" not in events
