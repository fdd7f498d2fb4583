"""`sluice run --workers N` and `--instance-id` on the command line: what start-up accepts and refuses."""

from __future__ import annotations

import pytest
import yaml

from sluice.config import ConfigError, load_config
from sluice.proxy.cli import main
from sluice.proxy.process.workers import check_workers, worker_config

QUOTA = {"entities": [{"client_id": "pump", "producer_byte_rate": 100_000}]}


def _config(tmp_path, **sections) -> str:
    path = tmp_path / "sluice.yaml"
    tree = {"listen": "127.0.0.1:19092", "upstream": {"bootstrap": ["127.0.0.1:9"]}, **sections}
    path.write_text(yaml.safe_dump(tree))
    return str(path)


def test_workers_with_quotas_but_no_fleet_is_refused_naming_the_key(tmp_path, capsys) -> None:
    code = main(["run", "--config", _config(tmp_path, quota=QUOTA), "--workers", "2"])
    assert code == 2
    err = capsys.readouterr().err
    assert "fleet.enabled" in err and "--workers 2" in err


def test_zero_workers_is_refused(tmp_path, capsys) -> None:
    assert main(["run", "--config", _config(tmp_path), "--workers", "0"]) == 2
    assert "--workers" in capsys.readouterr().err


def test_workers_are_accepted_with_a_fleet_or_without_quotas(tmp_path) -> None:
    fleet = load_config(_config(tmp_path, quota=QUOTA, usage={"enabled": True}, fleet={"enabled": True}), {})
    check_workers(fleet, 4)
    check_workers(load_config(_config(tmp_path), {}), 4)
    with pytest.raises(ConfigError):
        check_workers(load_config(_config(tmp_path, quota=QUOTA), {}), 2)
    check_workers(load_config(_config(tmp_path, quota=QUOTA), {}), 1)  # the default: one process


def test_each_worker_serves_metrics_on_its_own_port(tmp_path) -> None:
    config = load_config(_config(tmp_path, metrics={"listen": "127.0.0.1:9404"}), {})
    assert [worker_config(config, i).metrics_listen.port for i in range(3)] == [9404, 9405, 9406]
    assert worker_config(config, 2).listen == config.listen


def test_instance_id_and_workers_from_the_command_line(tmp_path) -> None:
    from sluice.proxy.cli import SUBCOMMANDS, command_parser
    from sluice.proxy.commands.run import config_overrides

    (run,) = [command for command in SUBCOMMANDS if command.name == "run"]
    parser, _module = command_parser(run)  # the same parsing `sluice run` does
    args = parser.parse_args(["--config", _config(tmp_path), "--instance-id", "edge-a", "--workers", "3"])
    assert args.workers == 3
    assert load_config(args.config, config_overrides(args)).usage.instance_id == "edge-a"
