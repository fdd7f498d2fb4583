"""The `usage` and `fleet` sections, and docs/examples/fleet.yaml as three processes would load it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.config import ConfigError, load_config
from sluice.config.load import config_from_mapping
from sluice.config.usage_settings import DEFAULT_RETENTION_MS, DEFAULT_TOPIC
from sluice.quota import QuotaEntity, QuotaKey

FLEET_EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "fleet.yaml"
BASE = {"listen": "127.0.0.1:9092", "upstream": {"bootstrap": "127.0.0.1:19092"}}


def _load(**sections: object):
    return config_from_mapping(BASE | sections)


def test_defaults_are_off() -> None:
    config = _load()
    assert not config.usage.enabled and not config.fleet.enabled
    assert config.usage.topic == DEFAULT_TOPIC
    assert config.usage.interval_ms == 1000
    assert config.usage.retention_ms == DEFAULT_RETENTION_MS
    assert config.fleet.share == {
        QuotaKey.PRODUCER_BYTE_RATE,
        QuotaKey.CONSUMER_BYTE_RATE,
        QuotaKey.CONTROLLER_MUTATION_RATE,
    }


def test_every_usage_key() -> None:
    usage = _load(
        usage={
            "enabled": True,
            "topic": "ops.usage-v1",
            "interval_ms": 250,
            "retention_ms": -1,
            "partitions": 3,
            "replication_factor": 3,
            "max_entities": 500,
            "buffer_batches": 10,
            "instance_id": "edge-a",
        },
        fleet={"enabled": True, "share": ["producer_byte_rate", "request_percentage"]},
    )
    assert usage.usage.topic == "ops.usage-v1"
    assert (usage.usage.interval_ms, usage.usage.retention_ms, usage.usage.partitions) == (250, -1, 3)
    assert (usage.usage.replication_factor, usage.usage.max_entities) == (3, 500)
    assert (usage.usage.buffer_batches, usage.usage.instance_id) == (10, "edge-a")
    assert usage.fleet.share == {QuotaKey.PRODUCER_BYTE_RATE, QuotaKey.REQUEST_PERCENTAGE}


@pytest.mark.parametrize(
    ("sections", "key"),
    [
        ({"usage": {"interval_ms": 50}}, "usage.interval_ms"),
        ({"usage": {"topic": "bad topic"}}, "usage.topic"),
        ({"usage": {"topic": ".."}}, "usage.topic"),
        ({"usage": {"topic": "x" * 250}}, "usage.topic"),
        ({"usage": {"replication_factor": 0}}, "usage.replication_factor"),
        ({"usage": {"enabled": "yes please"}}, "usage.enabled"),
        ({"usage": {"intervall_ms": 1000}}, "usage.intervall_ms"),
        ({"usage": {"instance_id": ""}}, "usage.instance_id"),
        ({"fleet": {"enabled": True}}, "fleet.enabled"),
        ({"usage": {"enabled": True}, "fleet": {"enabled": True, "share": ["bytes"]}}, "fleet.share[0]"),
        ({"usage": {"enabled": True}, "fleet": {"share": "producer_byte_rate"}}, "fleet.share"),
    ],
)
def test_a_bad_value_names_its_key(sections: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        _load(**sections)
    assert info.value.key == key


def test_the_fleet_needs_usage_records() -> None:
    with pytest.raises(ConfigError, match=r"usage\.enabled: true"):
        _load(fleet={"enabled": True})


@pytest.mark.parametrize(("listen", "base"), [("127.0.0.1:19092", 19100), ("127.0.0.1:29092", 29100)])
def test_the_fleet_example_loads_as_each_process_would_load_it(listen: str, base: int) -> None:
    # What `sluice run --config docs/examples/fleet.yaml --listen ... --broker-port-base ...` loads.
    config = load_config(FLEET_EXAMPLE, {"listen": listen, "broker_port_base": base})
    assert str(config.listen) == listen and config.broker_port(1) == base + 1
    assert config.usage.enabled and config.fleet.enabled
    assert config.usage.interval_ms == 1000 and config.usage.retention_ms == 7 * 24 * 3600 * 1000
    (rule,) = config.quota.rules
    assert rule.entity == QuotaEntity(client_id="pump")
    assert dict(rule.values) == {QuotaKey.PRODUCER_BYTE_RATE: 100_000}
