"""The `sluice` command line: every subcommand explains itself, --version, usage errors, check-config."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from sluice.config.client_settings import Secret
from sluice.config.effective import HIDDEN, effective_config, mask_credentials
from sluice.config.load import TOP_LEVEL_KEYS, load_config
from sluice.config.quota_section import QUOTA_KEYS
from sluice.proxy.cli import SUBCOMMANDS, command_parser, main

REPO = Path(__file__).resolve().parents[2]
CONFIG_EXAMPLE = REPO / "docs" / "config-example.yaml"
SHIPPED_CONFIGS = sorted(
    [CONFIG_EXAMPLE, *REPO.glob("docs/examples/*.yaml"), *REPO.glob("docs/compose/*.yaml")]
)


def sluice(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run `sluice ARGS` in this process: (exit code, stdout, stderr)."""
    try:
        code = main(list(args))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def test_help_gives_every_subcommands_purpose(capsys) -> None:
    code, out, _ = sluice(capsys, "--help")
    assert code == 0
    for command in SUBCOMMANDS:
        line = next(line for line in out.splitlines() if line.split()[:1] == [command.name])
        assert command.purpose in line, line
        assert "see `sluice" not in line
    assert "sluice COMMAND --help" in out


def test_every_purpose_is_one_short_line_of_its_own() -> None:
    names = [command.name for command in SUBCOMMANDS]
    assert len(names) == len(set(names))
    for command in SUBCOMMANDS:
        assert command.purpose and "\n" not in command.purpose and len(command.purpose) <= 80, command


@pytest.mark.parametrize("command", SUBCOMMANDS, ids=lambda command: command.name)
def test_every_subcommand_has_its_own_help(capsys, command) -> None:
    code, out, _ = sluice(capsys, command.name, "--help")
    assert code == 0
    assert out.startswith(f"usage: sluice {command.name} ")
    assert "COMMAND" not in out.splitlines()[0]


def test_version_is_the_installed_package_version(capsys) -> None:
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    code, out, _ = sluice(capsys, "--version")
    assert code == 0
    assert out.strip() == f"sluice {declared}"


def test_the_installed_console_script_answers_version() -> None:
    script = Path(sys.executable).with_name("sluice")
    completed = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=30)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.startswith("sluice ")


def test_an_unknown_flag_for_run_is_an_error_of_run_with_a_hint_about_quotas(capsys) -> None:
    code, out, err = sluice(capsys, "run", "--quota", "5")
    assert code == 2
    assert out == ""
    assert err.startswith("usage: sluice run ")
    assert "sluice run: error: unrecognized arguments: --quota 5" in err
    assert "quota: section" in err and "docs/config-example.yaml" in err
    assert "COMMAND" not in err  # not the top-level usage


def test_other_usage_errors_of_run_carry_no_quota_hint(capsys) -> None:
    code, _, err = sluice(capsys, "run", "--broker-port-base", "x")
    assert code == 2
    assert "sluice run: error: argument --broker-port-base" in err
    assert "quota" not in err


def test_run_help_shows_defaults_and_where_quotas_come_from(capsys) -> None:
    _, out, _ = sluice(capsys, "run", "--help")
    flat = " ".join(out.split())
    assert "Quotas come from the configuration file's `quota:` section" in flat
    assert "docs/config-example.yaml" in flat and "docs/quotas.md" in flat
    for default in ("default: listen port + 1", "default: listen's host", "default: none"):
        assert default in flat, default
    assert "idle_timeout_s 600" in flat and "shutdown_timeout_s 30" in flat


def test_an_unknown_or_missing_command_is_a_usage_error(capsys) -> None:
    code, _, err = sluice(capsys, "bogus")
    assert code == 2 and "invalid choice: 'bogus'" in err
    code, _, err = sluice(capsys)
    assert code == 2 and "required: COMMAND" in err


def test_tool_defaults_are_shown(capsys) -> None:
    _, out, _ = sluice(capsys, "mock-cluster", "--help")
    assert "(default: 3)" in " ".join(out.split())
    _, out, _ = sluice(capsys, "consume", "--help")
    assert "(default: 10000)" in " ".join(out.split())


# ---- check-config -----------------------------------------------------------------------------------


def test_check_config_prints_the_effective_configuration(capsys) -> None:
    code, out, err = sluice(capsys, "check-config", str(CONFIG_EXAMPLE))
    assert code == 0, err
    printed = yaml.safe_load(out)
    assert printed == effective_config(load_config(CONFIG_EXAMPLE))
    # Defaults the file leaves out are filled in.
    assert printed["quota"]["sensor"]["controller_mutation_rate"] == "token_bucket"
    assert printed["quota"]["entities"][0] == {"client_id": "pump", "producer_byte_rate": 100000}
    assert out.startswith(f"# {CONFIG_EXAMPLE} is valid.")


def test_check_config_fills_in_defaults_for_a_minimal_file(capsys, tmp_path) -> None:
    path = tmp_path / "minimal.yaml"
    path.write_text("listen: 127.0.0.1:9092\nupstream: {bootstrap: kafka:9092}\n")
    code, out, _ = sluice(capsys, "check-config", str(path))
    assert code == 0
    printed = yaml.safe_load(out)
    assert printed["broker_port_base"] == 9093
    assert printed["advertised_host"] == "127.0.0.1"
    assert printed["metrics"] == {"listen": None}
    assert printed["quota"]["throttle_mode"] == "kip219" and printed["quota"]["entities"] == []


def test_check_config_applies_flags_as_run_would(capsys) -> None:
    code, out, _ = sluice(capsys, "check-config", str(CONFIG_EXAMPLE), "--listen", "127.0.0.1:7000")
    assert code == 0
    assert yaml.safe_load(out)["listen"] == "127.0.0.1:7000"


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("listen: 127.0.0.1:9092\nupstream: {bootstrap: [k:9092]}\nlisten_port: 3\n", "listen_port"),
        ("listen: 127.0.0.1:9092\n", "upstream.bootstrap"),
        (
            "listen: 127.0.0.1:9092\nupstream: {bootstrap: [k:9092]}\n"
            "quota: {entities: [{client_id: pump, producer_byte_rate: 1.5}]}\n",
            "quota.entities[0].producer_byte_rate",
        ),
        (
            "listen: 127.0.0.1:9092\nupstream: {bootstrap: [k:9092]}\nquota: {sensor_kinds: window}\n",
            "quota.",
        ),
        (
            "listen: 127.0.0.1:9092\nupstream: {bootstrap: [k:9092]}\n"
            "tls: {listener: {cert: /nonexistent/cert.pem, key: /nonexistent/key.pem}}\n",
            "tls.listener.cert",
        ),
        ("listen: [unclosed\n", "file"),
        (
            "listen: 127.0.0.1:9092\nupstream: {bootstrap: [k:9092]}\nprotocol: {unvetted_apis: allow}\n",
            "protocol.unvetted_apis",
        ),
        (
            "listen: 127.0.0.1:9092\nupstream: {bootstrap: [k:9092], bind_address: 'k:1'}\n",
            "upstream.bind_address",
        ),
    ],
)
def test_check_config_exits_2_naming_the_key(capsys, tmp_path, text: str, key: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code, out, err = sluice(capsys, "check-config", str(path))
    assert code == 2
    assert out == ""
    assert err.startswith("sluice check-config: config error: ") and key in err, err


def test_check_config_of_a_missing_file_exits_2(capsys, tmp_path) -> None:
    code, _, err = sluice(capsys, "check-config", str(tmp_path / "absent.yaml"))
    assert code == 2 and "a readable file" in err


@pytest.mark.parametrize("path", SHIPPED_CONFIGS, ids=lambda path: str(path.relative_to(REPO)))
def test_every_shipped_configuration_loads_and_its_effective_form_loads_back_the_same(path, tmp_path) -> None:
    rendered = effective_config(load_config(path), reveal=True)
    again = tmp_path / "effective.yaml"
    again.write_text(yaml.safe_dump(rendered))
    assert effective_config(load_config(again), reveal=True) == rendered


def test_the_effective_configuration_has_every_section_the_loader_knows() -> None:
    # A new configuration section must be rendered too, or check-config would hide it.
    rendered = effective_config(load_config(CONFIG_EXAMPLE))
    assert set(rendered) == set(TOP_LEVEL_KEYS)
    assert set(rendered["quota"]) == set(QUOTA_KEYS)


def test_the_proxys_own_password_is_never_printed(capsys, tmp_path) -> None:
    secret_file = tmp_path / "password"
    secret_file.write_text("s3cret-from-a-file\n")
    for sasl in (
        "{mechanism: PLAIN, username: sluice, password: s3cret-inline}",
        f"{{mechanism: SCRAM-SHA-512, username: sluice, password_file: {secret_file}}}",
    ):
        path = tmp_path / "with-sasl.yaml"
        path.write_text(
            f"listen: 127.0.0.1:9092\nupstream: {{bootstrap: [k:9092]}}\nclient: {{sasl: {sasl}}}\n"
        )
        code, out, err = sluice(capsys, "check-config", str(path))
        assert code == 0, err
        assert "s3cret" not in out + err
        assert yaml.safe_load(out)["client"]["sasl"]["password"] == HIDDEN
        assert yaml.safe_load(out)["client"]["sasl"]["username"] == "sluice"
        # Loaded back with the password revealed, the configuration is the same one.
        revealed = effective_config(load_config(path), reveal=True)
        again = tmp_path / "again.yaml"
        again.write_text(yaml.safe_dump(revealed))
        assert load_config(again).client == load_config(path).client


def test_credentials_are_hidden_wherever_they_sit() -> None:
    tree = {
        "upstream": {"sasl": {"mechanism": "PLAIN", "username": "sluice", "password": "s3cret"}},
        "tls": {"listener": {"cert": "/etc/proxy.pem", "key": "/etc/proxy.key", "key_password": "pw"}},
        "clients": [{"oauth": {"client_secret": "x", "token_endpoint_url": "https://idp"}}],
        "sasl": {"oauthbearer": {"principal_claim": "sub"}},
        "unset": {"password": None},
        "anywhere": [Secret("s3cret")],
    }
    masked = mask_credentials(tree)
    assert masked["upstream"]["sasl"] == {"mechanism": "PLAIN", "username": "sluice", "password": HIDDEN}
    assert masked["tls"]["listener"] == {
        "cert": "/etc/proxy.pem",
        "key": "/etc/proxy.key",
        "key_password": HIDDEN,
    }
    assert masked["clients"][0]["oauth"] == {"client_secret": HIDDEN, "token_endpoint_url": "https://idp"}
    assert masked["sasl"] == tree["sasl"]
    assert masked["unset"] == {"password": None}
    assert masked["anywhere"] == [HIDDEN]
    assert tree["upstream"]["sasl"]["password"] == "s3cret"  # the input is left alone


def _readme_sluice_commands() -> list[list[str]]:
    """Every `sluice ...` line of the README's shell blocks, as arguments, without redirections."""
    text = (REPO / "README.md").read_text()
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if not words or not words[0].endswith("bin/sluice"):
                continue
            cut = next(
                (i for i, w in enumerate(words) if w in ("&", "|") or w[:1] in "<>" or w[:2] == "2>"), None
            )
            commands.append(words[1:cut])
    return commands


def test_the_readme_has_sluice_commands_and_every_one_parses() -> None:
    commands = _readme_sluice_commands()
    assert {"mock-cluster", "check-config", "run", "perf-test", "consume"} <= {c[0] for c in commands}
    by_name = {command.name: command for command in SUBCOMMANDS}
    for words in commands:
        parser, _module = command_parser(by_name[words[0]])
        parser.parse_args(words[1:])  # a usage error raises SystemExit and fails the test


def _without(module: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """`sluice ARGV` in a fresh interpreter where `module` cannot be imported (its extra not installed)."""
    code = (
        f"import sys; sys.modules[{module!r}] = None; from sluice.proxy.cli import main; "
        f"sys.exit(main({list(argv)!r}))"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("module", "argv", "extra"),
    [
        ("confluent_kafka", ["perf-test", "--topic", "t", "--num-records", "1"], "broker"),
        ("confluent_kafka", ["consume", "--help"], "broker"),
        ("matplotlib", ["demo"], "demo"),
        ("pyspark", ["pipeline", "report", "--input", "x", "--out", "y"], "pipeline"),
    ],
)
def test_a_command_without_its_extra_says_what_to_install(module: str, argv: list[str], extra: str) -> None:
    done = _without(module, *argv)
    assert done.returncode == 3
    assert done.stdout == ""
    assert done.stderr == (
        f"sluice {argv[0]}: needs the {extra} extra ({module} not installed): "
        f"pip install 'sluice-kafka[{extra}]' (in a clone: pip install '.[{extra}]')\n"
    )


def _readme_line(starting: str) -> str:
    (line,) = [line for line in (REPO / "README.md").read_text().splitlines() if line.startswith(starting)]
    return line


@pytest.mark.parametrize(
    ("loop", "variable", "log"),
    [("until curl", "SLUICE", "out/sluice.log"), ("until [ -s out/mock.ready ]", "MOCK", "out/mock.log")],
)
def test_the_quickstarts_waits_end_when_their_process_has_exited(
    tmp_path: Path, loop: str, variable: str, log: str
) -> None:
    # The process failed at once (a port taken, a bad file): the README's own line must stop waiting.
    script = f"cd {tmp_path}; mkdir -p out; false & {variable}=$!; wait ${variable}; {_readme_line(loop)}"
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert log in done.stdout
