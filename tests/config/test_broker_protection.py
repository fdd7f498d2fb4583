"""`quota.broker_protection` (config/broker_protection.py): read into the shield's limits, every error
naming its key; reloaded live; rendered back by check-config."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sluice.config import ConfigError, load_config
from sluice.config.effective import effective_config
from sluice.config.reload import reload_config
from sluice.proxy.control_plane.live_quotas import LiveQuotas
from sluice.quota.broker_shield import ShieldLimits
from sluice.quota.latency_trigger import LatencyTargets

BASE = {"listen": "127.0.0.1:9092", "upstream.bootstrap": ["kafka:19092"]}


def limits(section: object) -> ShieldLimits | None:
    return load_config(overrides={**BASE, "quota": {"broker_protection": section}}).quota.broker_protection


def error_key(section: object) -> str:
    with pytest.raises(ConfigError) as caught:
        limits(section)
    return caught.value.key


def test_absent_means_no_shield() -> None:
    assert load_config(overrides=BASE).quota.broker_protection is None


def test_a_threshold_per_broker_with_overrides_and_topic_thresholds() -> None:
    found = limits({"bytes_in_per_s": 5000, "nodes": {3: 2000, "4": 9000}, "topic_thresholds": {"a": 1000}})
    assert found == ShieldLimits(5000.0, {3: 2000.0, 4: 9000.0}, {"a": 1000.0})
    assert found.static_threshold(3) == 2000 and found.static_threshold(1) == 5000


def test_the_latency_trigger() -> None:
    found = limits({"trigger": "latency", "latency": {"produce_p99_ms": 50, "floor_bytes_in_per_s": 1000}})
    assert found == ShieldLimits(latency=LatencyTargets(50.0, 40.0, 1000.0))
    found = limits(
        {
            "trigger": "latency",
            "bytes_in_per_s": 9000,
            "latency": {"produce_p99_ms": 50, "release_p99_ms": 30, "floor_bytes_in_per_s": 1000},
        }
    )
    assert found == ShieldLimits(9000.0, latency=LatencyTargets(50.0, 30.0, 1000.0))


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({}, "quota.broker_protection.bytes_in_per_s"),
        ({"bytes_in_per_s": 0}, "quota.broker_protection.bytes_in_per_s"),
        ({"bytes_in_per_s": 1.5}, "quota.broker_protection.bytes_in_per_s"),
        ({"bytes_in_per_s": 10, "typo": 1}, "quota.broker_protection.typo"),
        ({"nodes": {"x": 10}}, "quota.broker_protection.nodes.x"),
        ({"nodes": {1: -1}}, "quota.broker_protection.nodes.1"),
        ({"trigger": "cpu"}, "quota.broker_protection.trigger"),
        (
            {"bytes_in_per_s": 10, "topic_thresholds": {"bad name": 1}},
            "quota.broker_protection.topic_thresholds.bad name",
        ),
        (
            {"bytes_in_per_s": 100, "nodes": {2: 50}, "topic_thresholds": {"a": 60}},
            "quota.broker_protection.topic_thresholds",
        ),
        ({"bytes_in_per_s": 10, "latency": {"produce_p99_ms": 5}}, "quota.broker_protection.latency"),
        ({"trigger": "latency"}, "quota.broker_protection.latency"),
        (
            {"trigger": "latency", "latency": {"floor_bytes_in_per_s": 10}},
            "quota.broker_protection.latency.produce_p99_ms",
        ),
        (
            {"trigger": "latency", "latency": {"produce_p99_ms": 50}},
            "quota.broker_protection.latency.floor_bytes_in_per_s",
        ),
        (
            {
                "trigger": "latency",
                "latency": {"produce_p99_ms": 50, "release_p99_ms": 50, "floor_bytes_in_per_s": 1},
            },
            "quota.broker_protection.latency.release_p99_ms",
        ),
        (
            {"trigger": "latency", "latency": {"produce_p99_ms": 0, "floor_bytes_in_per_s": 1}},
            "quota.broker_protection.latency.produce_p99_ms",
        ),
        (
            {
                "trigger": "latency",
                "topic_thresholds": {"a": 20},
                "latency": {"produce_p99_ms": 50, "floor_bytes_in_per_s": 10},
            },
            "quota.broker_protection.topic_thresholds",
        ),
    ],
)
def test_bad_values_are_refused_naming_the_key(section: object, key: str) -> None:
    assert error_key(section) == key


def test_check_config_renders_it_back_to_the_same_limits(tmp_path: Path) -> None:
    section = {
        "trigger": "latency",
        "nodes": {2: 3000},
        "topic_thresholds": {"a": 500},
        "latency": {"produce_p99_ms": 20, "floor_bytes_in_per_s": 1000},
    }
    config = load_config(overrides={**BASE, "quota": {"broker_protection": section}})
    path = tmp_path / "effective.yaml"
    path.write_text(yaml.safe_dump(effective_config(config)))
    assert load_config(path).quota.broker_protection == config.quota.broker_protection


def test_it_reloads_live_and_the_engine_keeps_its_state(tmp_path: Path) -> None:
    path = tmp_path / "sluice.yaml"
    head = "listen: '127.0.0.1:9092'\nupstream: {bootstrap: 'kafka:19092'}\nquota:\n  broker_protection: "
    path.write_text(head + "{bytes_in_per_s: 1000}\n")
    running = load_config(path)
    path.write_text(head + "{bytes_in_per_s: 2000}\n")
    reloaded = reload_config(path, running)
    assert reloaded.restart_required == ()
    live = LiveQuotas()
    assert live.apply_brokers(running.quota.broker_protection)
    shield = live.brokers
    assert shield is not None
    shield.record(1, [("t", 10)], 0)
    assert live.apply_brokers(reloaded.quota.broker_protection)
    assert live.brokers is shield and shield.view(1, 0).threshold == 2000
    assert not live.apply_brokers(reloaded.quota.broker_protection)  # nothing changed
    assert live.apply_brokers(None) and live.brokers is None


def test_the_documented_example_loads_as_it_says(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "docs" / "examples" / "broker-shield.yaml"
    limits = load_config(example).quota.broker_protection
    assert limits == ShieldLimits(50_000_000.0, {3: 20_000_000.0}, {"payments": 10_000_000.0})
    # Its latency lines uncommented, as it says.
    text = example.read_text().replace("    # trigger", "    trigger").replace("    # latency", "    latency")
    (tmp_path / "latency.yaml").write_text(text.replace("    #   ", "      "))
    latency = load_config(tmp_path / "latency.yaml").quota.broker_protection
    assert latency is not None and latency.latency == LatencyTargets(50.0, 40.0, 10_000_000.0)


def test_adding_it_to_a_proxy_started_without_it_waits_for_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "sluice.yaml"
    head = "listen: '127.0.0.1:9092'\nupstream: {bootstrap: 'kafka:19092'}\n"
    path.write_text(head)
    running = load_config(path)
    path.write_text(head + "quota:\n  broker_protection: {bytes_in_per_s: 1000}\n")
    reloaded = reload_config(path, running)
    assert reloaded.restart_required == ("quota.broker_protection",)
    assert reloaded.quota.broker_protection is None  # what applies until then
    path.write_text(head)
    started_with_it = load_config(overrides={**BASE, "quota": {"broker_protection": {"bytes_in_per_s": 1}}})
    removed = reload_config(path, started_with_it)
    assert removed.restart_required == () and removed.quota.broker_protection is None
