"""config/reload.py: a valid file reloads (what applies live, what waits for a restart); an invalid one
names the key and changes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.config import ConfigError, load_config
from sluice.config.quota_settings import TopicQuotaSettings
from sluice.config.reload import reload_config

BASE = "listen: '127.0.0.1:9092'\nupstream: {bootstrap: 'kafka:19092'}\n"


def write(path: Path, quota: str) -> Path:
    path.write_text(BASE + quota)
    return path


def test_a_valid_file_reloads_its_quotas_live(tmp_path: Path) -> None:
    path = write(
        tmp_path / "sluice.yaml", "quota:\n  entities:\n    - {client_id: pump, producer_byte_rate: 1000}\n"
    )
    running = load_config(path)
    write(
        path,
        "quota:\n"
        "  admin_principals: {alter: ['User:admin']}\n"
        "  topics: {total_bytes_per_s: 5000}\n"
        "  entities:\n"
        "    - {client_id: pump, producer_byte_rate: 2000}\n"
        "    - {ip: 10.0.0.1, connection_creation_rate: 5}\n",
    )
    reloaded = reload_config(path, running)
    assert reloaded.restart_required == ()
    assert reloaded.quota.rules[0].values["producer_byte_rate"] == 2000.0
    assert reloaded.quota.ip_rules[0].ip == "10.0.0.1"
    assert reloaded.quota.topics == TopicQuotaSettings(5000.0, {})
    assert not reloaded.quota.admin_principals.may_alter("eve")


def test_keys_that_need_a_restart_are_named(tmp_path: Path) -> None:
    path = write(tmp_path / "sluice.yaml", "")
    running = load_config(path)
    path.write_text(
        "listen: '127.0.0.1:9093'\nupstream: {bootstrap: 'kafka:19092'}\n"
        "quota:\n  window: {samples: 5}\n  throttle_mode: delay\n  store: {topic: other}\n  admin: broker\n"
    )
    assert reload_config(path, running).restart_required == (
        "listen",
        "broker_port_base",
        "quota.window / quota.controller_window / quota.legacy_windows / quota.sensor",
        "quota.throttle_mode",
        "quota.admin",
        "quota.store",
    )


@pytest.mark.parametrize(
    ("quota", "key"),
    [
        (
            "quota:\n  entities:\n    - {client_id: pump, producer_byte_rate: 10.5}\n",
            "quota.entities[0].producer_byte_rate",
        ),
        ("quota:\n  entitties: []\n", "quota.entitties"),
        ("quota:\n  topics: {total_bytes_per_s: 10, thresholds: {a: 20}}\n", "quota.topics.thresholds"),
        ("quota: [\n", "<file>"),
    ],
)
def test_an_invalid_file_is_refused_with_the_key(tmp_path: Path, quota: str, key: str) -> None:
    path = write(tmp_path / "sluice.yaml", "")
    running = load_config(path)
    write(path, quota)
    with pytest.raises(ConfigError) as caught:
        reload_config(path, running)
    assert caught.value.key == key


def test_flags_given_at_start_up_stay_on_top(tmp_path: Path) -> None:
    path = write(tmp_path / "sluice.yaml", "")
    flags = {"listen": "127.0.0.1:9999"}
    running = load_config(path, flags)
    reloaded = reload_config(path, running, flags)
    assert reloaded.config.listen.port == 9999
    assert reloaded.restart_required == ()


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "sluice.yaml", "")
    running = load_config(path)
    path.unlink()
    with pytest.raises(ConfigError) as caught:
        reload_config(path, running)
    assert caught.value.key == "<file>"
