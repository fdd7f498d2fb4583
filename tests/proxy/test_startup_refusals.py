"""Configuration that cannot work stops `sluice run` at start-up: exit 2, the key named (issue 14 item 7)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sluice.proxy.listeners.ports import free_port_block

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow  # starts processes (the test broker, the proxy)


def run_sluice(tmp_path: Path, config: dict, timeout_s: float = 20) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "sluice.yaml"
    path.write_text(yaml.safe_dump(config))
    return subprocess.run(
        [sys.executable, "-m", "sluice.proxy", "run", "--config", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def base_config(port: int, **extra: object) -> dict:
    return {"listen": f"127.0.0.1:{port}", "upstream": {"bootstrap": ["127.0.0.1:1"]}, **extra}


def assert_refused(result: subprocess.CompletedProcess[str], key: str) -> None:
    assert result.returncode == 2, result
    assert f"config error: {key}=" in result.stderr, result.stderr


@pytest.mark.parametrize("upstream_host", ["127.0.0.1", "localhost"])
def test_an_upstream_that_is_sluices_own_listener_exits_2(tmp_path: Path, upstream_host: str) -> None:
    port = free_port_block(4)
    config = base_config(port, upstream={"bootstrap": [f"{upstream_host}:{port}"]})
    result = run_sluice(tmp_path, config)
    assert_refused(result, "upstream.bootstrap[0]")
    assert "loop back into Sluice" in result.stderr


def test_an_upstream_that_is_sluices_own_broker_listener_exits_2(tmp_path: Path) -> None:
    port = free_port_block(8)
    config = base_config(port, broker_ports={3: port + 5}, upstream={"bootstrap": [f"127.0.0.1:{port + 5}"]})
    assert_refused(run_sluice(tmp_path, config), "upstream.bootstrap[0]")


def test_an_upstream_bind_address_not_of_this_machine_exits_2(tmp_path: Path) -> None:
    port = free_port_block(4)
    config = base_config(port, upstream={"bootstrap": ["127.0.0.1:1"], "bind_address": "198.51.100.1"})
    result = run_sluice(tmp_path, config)
    assert_refused(result, "upstream.bind_address")
    assert "an IP address of this machine" in result.stderr


def test_an_unresolvable_listen_host_exits_2(tmp_path: Path) -> None:
    port = free_port_block(4)
    config = base_config(port, listen=f"no-such-host.invalid:{port}", advertised_host="127.0.0.1")
    assert_refused(run_sluice(tmp_path, config), "listen")


def test_a_listen_address_this_machine_does_not_have_exits_2(tmp_path: Path) -> None:
    # TEST-NET-1 (RFC 5737) is never assigned to a machine: before, bind() failed with exit 1.
    port = free_port_block(4)
    config = base_config(port, listen=f"192.0.2.1:{port}", advertised_host="127.0.0.1")
    result = run_sluice(tmp_path, config)
    assert_refused(result, "listen")
    assert "an address of this machine" in result.stderr


def test_upstream_servers_of_which_none_resolves_exit_2(tmp_path: Path) -> None:
    port = free_port_block(4)
    config = base_config(port, upstream={"bootstrap": ["no-such-host.invalid:9092"]})
    assert_refused(run_sluice(tmp_path, config), "upstream.bootstrap")


def test_an_unresolvable_metrics_host_exits_2(tmp_path: Path) -> None:
    port = free_port_block(4)
    config = base_config(port, metrics={"listen": f"no-such-host.invalid:{port + 3}"})
    assert_refused(run_sluice(tmp_path, config), "metrics.listen")


@pytest.mark.parametrize("value", [1e-9, 0, 1e300])
def test_an_absurd_idle_timeout_exits_2(tmp_path: Path, value: float) -> None:
    port = free_port_block(4)
    assert_refused(run_sluice(tmp_path, base_config(port, idle_timeout_s=value)), "idle_timeout_s")


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ({"broker_port_base": 65536}, "broker_port_base"),
        ({"broker_ports": {1: 70000}}, "broker_ports.1"),
        ({"metrics": {"listen": "127.0.0.1:65536"}}, "metrics.listen"),
    ],
)
def test_ports_beyond_65535_exit_2(tmp_path: Path, extra: dict, key: str) -> None:
    port = free_port_block(4)
    assert_refused(run_sluice(tmp_path, base_config(port, **extra)), key)


def test_a_reserve_of_open_files_the_limit_cannot_hold_exits_2(tmp_path: Path) -> None:
    port = free_port_block(4)
    result = run_sluice(tmp_path, base_config(port, reserved_open_files=1_000_000))
    assert_refused(result, "reserved_open_files")
    assert "open-file limit" in result.stderr
