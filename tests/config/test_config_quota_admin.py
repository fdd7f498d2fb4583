"""The quota section's admin parts: quota.admin, admin_principals, store, topics and ip entities."""

from __future__ import annotations

import pytest

from sluice.config import ConfigError, load_config
from sluice.config.quota_settings import (
    AdminMode,
    AdminPrincipals,
    IpQuotaRule,
    QuotaStoreSettings,
    TopicQuotaSettings,
)
from sluice.quota import DEFAULT

BASE = {"listen": "127.0.0.1:9092", "upstream.bootstrap": ["kafka:19092"]}


def quota(section: dict) -> object:
    return load_config(overrides={**BASE, "quota": section}).quota


def error(section: dict) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        quota(section)
    return caught.value


def test_defaults() -> None:
    settings = quota({})
    assert settings.admin is AdminMode.PROXY
    assert settings.admin_principals.open
    assert settings.store == QuotaStoreSettings("_sluice_quotas", -1, 5000)
    assert settings.topics is None
    assert settings.ip_rules == ()


def test_admin_mode() -> None:
    assert quota({"admin": "broker"}).admin is AdminMode.BROKER
    assert quota({"admin": "PROXY"}).admin is AdminMode.PROXY
    assert error({"admin": "both"}).key == "quota.admin"


def test_principal_lists_and_who_may_do_what() -> None:
    settings = quota({"admin_principals": {"alter": ["User:admin"], "describe": ["User:ops"]}})
    access = settings.admin_principals
    assert not access.open
    assert access.may_alter("admin") and access.may_describe("admin")  # alter implies describe
    assert not access.may_alter("ops") and access.may_describe("ops")
    assert not access.may_alter("eve") and not access.may_describe("eve")
    assert not access.may_describe("ANONYMOUS")


def test_a_section_with_only_alter_closes_describe_to_everyone_else() -> None:
    access = quota({"admin_principals": {"alter": ["User:admin"]}}).admin_principals
    assert access.may_describe("admin") and not access.may_describe("ops")


def test_wildcard_and_anonymous() -> None:
    access = AdminPrincipals(alter=frozenset({"User:ANONYMOUS"}), describe=frozenset({"User:*"}))
    assert access.may_alter("ANONYMOUS") and not access.may_alter("bob")
    assert access.may_describe("bob")


def test_open_access_lets_everyone_in() -> None:
    access = AdminPrincipals()
    assert access.open and access.may_alter("anyone") and access.may_describe("ANONYMOUS")


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({"admin_principals": {"alter": "User:admin"}}, "quota.admin_principals.alter"),
        ({"admin_principals": {"alter": ["admin"]}}, "quota.admin_principals.alter[0]"),
        ({"admin_principals": {"describe": ["User:a", 3]}}, "quota.admin_principals.describe[1]"),
        ({"admin_principals": {"alter_all": []}}, "quota.admin_principals.alter_all"),
        ({"admin_principals": ["User:a"]}, "quota.admin_principals"),
    ],
)
def test_bad_principals_name_the_key(section: dict, key: str) -> None:
    assert error(section).key == key


def test_store_settings() -> None:
    store = quota({"store": {"topic": "ops.quotas", "replication_factor": 3, "write_timeout_ms": 2000}}).store
    assert store == QuotaStoreSettings("ops.quotas", 3, 2000)


@pytest.mark.parametrize(
    ("store", "key"),
    [
        ({"topic": "bad name"}, "quota.store.topic"),
        ({"topic": "x" * 250}, "quota.store.topic"),
        ({"topic": ".."}, "quota.store.topic"),
        ({"replication_factor": 0}, "quota.store.replication_factor"),
        ({"replication_factor": True}, "quota.store.replication_factor"),
        ({"write_timeout_ms": 0}, "quota.store.write_timeout_ms"),
        ({"partitions": 3}, "quota.store.partitions"),
    ],
)
def test_bad_store_settings_name_the_key(store: dict, key: str) -> None:
    assert error({"store": store}).key == key


def test_topic_quotas() -> None:
    topics = quota({"topics": {"total_bytes_per_s": 1000000, "thresholds": {"orders": 400000}}}).topics
    assert topics == TopicQuotaSettings(1000000.0, {"orders": 400000.0})
    assert quota({"topics": {"total_bytes_per_s": 5000}}).topics == TopicQuotaSettings(5000.0, {})


@pytest.mark.parametrize(
    ("topics", "key"),
    [
        ({"thresholds": {"a": 1}}, "quota.topics.total_bytes_per_s"),
        ({"total_bytes_per_s": 0}, "quota.topics.total_bytes_per_s"),
        ({"total_bytes_per_s": 10.5}, "quota.topics.total_bytes_per_s"),
        ({"total_bytes_per_s": 100, "thresholds": {"a": -1}}, "quota.topics.thresholds.a"),
        ({"total_bytes_per_s": 100, "thresholds": {"a b": 1}}, "quota.topics.thresholds.a b"),
        ({"total_bytes_per_s": 100, "thresholds": {"a": 60, "b": 50}}, "quota.topics.thresholds"),
        ({"total_bytes_per_s": 100, "thresholds": [1]}, "quota.topics.thresholds"),
        ({"total": 100}, "quota.topics.total"),
    ],
)
def test_bad_topic_quotas_name_the_key(topics: dict, key: str) -> None:
    assert error({"topics": topics}).key == key


def test_ip_entities() -> None:
    settings = quota(
        {
            "entities": [
                {"ip": "10.0.0.5", "connection_creation_rate": 10},
                {"ip": "<default>", "connection_creation_rate": 50},
                {"client_id": "pump", "producer_byte_rate": 1000},
            ]
        }
    )
    assert settings.ip_rules == (IpQuotaRule("10.0.0.5", 10.0), IpQuotaRule(DEFAULT, 50.0))
    assert len(settings.rules) == 1


@pytest.mark.parametrize(
    ("entry", "key"),
    [
        ({"ip": "example.com", "connection_creation_rate": 1}, "quota.entities[0].ip"),
        ({"ip": 7, "connection_creation_rate": 1}, "quota.entities[0].ip"),
        ({"ip": "10.0.0.1"}, "quota.entities[0].connection_creation_rate"),
        ({"ip": "10.0.0.1", "connection_creation_rate": 1.5}, "quota.entities[0].connection_creation_rate"),
        ({"ip": "10.0.0.1", "connection_creation_rate": 0}, "quota.entities[0].connection_creation_rate"),
        ({"ip": "10.0.0.1", "connection_creation_rate": 2**31}, "quota.entities[0].connection_creation_rate"),
        ({"ip": "10.0.0.1", "user": "a", "connection_creation_rate": 1}, "quota.entities[0].user"),
        ({"ip": "10.0.0.1", "producer_byte_rate": 1}, "quota.entities[0].producer_byte_rate"),
        ({"user": "a", "connection_creation_rate": 1}, "quota.entities[0].connection_creation_rate"),
    ],
)
def test_bad_ip_entities_name_the_key(entry: dict, key: str) -> None:
    assert error({"entities": [entry]}).key == key


def test_the_same_ip_twice_is_refused() -> None:
    entries = [
        {"ip": "::ffff:10.0.0.1", "connection_creation_rate": 1},
        {"ip": "10.0.0.1", "connection_creation_rate": 2},
    ]
    assert error({"entities": entries}).key == "quota.entities[1]"
