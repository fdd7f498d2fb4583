"""The client section (the proxy's own Kafka client): defaults, every key, errors that name the key, and a
password that never shows, neither in the settings' repr nor in an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.config import ConfigError, load_config
from sluice.config.client_settings import ClientSasl, Secret
from sluice.proxy.cli import main

BASE = {"listen": "127.0.0.1:9092", "upstream.bootstrap": ["kafka:19092"]}
PASSWORD = "hunter2-but-longer"


def load(**client: object):
    return load_config(None, {**BASE, "client": client})


def error(**client: object) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load(**client)
    return caught.value


def test_defaults_client_id_sluice_no_credentials() -> None:
    settings = load_config(None, BASE).client
    assert (settings.client_id, settings.request_timeout_s, settings.sasl) == ("sluice", 30.0, None)


@pytest.mark.parametrize("mechanism", ["PLAIN", "scram-sha-256", "SCRAM-SHA-512"])
def test_every_key_is_read(mechanism: str) -> None:
    settings = load(
        client_id="sluice-eu-1",
        request_timeout_s=12.5,
        sasl={"mechanism": mechanism, "username": "proxy", "password": PASSWORD},
    ).client
    assert (settings.client_id, settings.request_timeout_s) == ("sluice-eu-1", 12.5)
    assert settings.sasl == ClientSasl(mechanism.upper(), "proxy", Secret(PASSWORD))
    assert settings.sasl.password.reveal() == PASSWORD


def test_the_password_can_come_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "password"
    path.write_text(PASSWORD + "\n")  # the newline `echo` and editors add is not part of it
    sasl = load(sasl={"mechanism": "PLAIN", "username": "proxy", "password_file": str(path)}).client.sasl
    assert sasl is not None and sasl.password.reveal() == PASSWORD


def test_the_password_never_shows_in_repr_str_or_format() -> None:
    config = load(sasl={"mechanism": "PLAIN", "username": "proxy", "password": PASSWORD})
    for text in (
        repr(config),
        str(config),
        repr(config.client),
        str(config.client.sasl),
        f"{config.client.sasl}",
    ):
        assert PASSWORD not in text
    secret = config.client.sasl.password
    assert PASSWORD not in repr(secret) + str(secret) + f"{secret}" + f"{secret!r}"


@pytest.mark.parametrize(
    ("client", "key", "fragment"),
    [
        (
            {"sasl": {"mechanism": "GSSAPI", "username": "p", "password": "x"}},
            "client.sasl.mechanism",
            "PLAIN",
        ),
        (
            {"sasl": {"mechanism": "SCRAM-SHA-1", "username": "p", "password": "x"}},
            "client.sasl.mechanism",
            "one of",
        ),
        ({"sasl": {"username": "p", "password": "x"}}, "client.sasl.mechanism", "SCRAM-SHA-512"),
        ({"sasl": {"mechanism": "PLAIN", "password": "x"}}, "client.sasl.username", "user name"),
        ({"sasl": {"mechanism": "PLAIN", "username": "p"}}, "client.sasl.password", "password"),
        (
            {"sasl": {"mechanism": "PLAIN", "username": "p", "password": ""}},
            "client.sasl.password",
            "non-empty",
        ),
        (
            {"sasl": {"mechanism": "PLAIN", "username": "p", "pasword": "x"}},
            "client.sasl.pasword",
            "password",
        ),
        ({"sasl": "PLAIN"}, "client.sasl", "a mapping"),
        ({"client_id": ""}, "client.client_id", "client id"),
        ({"request_timeout_s": 0}, "client.request_timeout_s", "> 0"),
        ({"timeout": 1}, "client.timeout", "known keys under client"),
    ],
)
def test_errors_name_the_key(client: dict, key: str, fragment: str) -> None:
    caught = error(**client)
    assert caught.key == key and fragment in str(caught)


def test_a_password_given_twice_or_unreadable_is_named(tmp_path: Path) -> None:
    both = error(sasl={"mechanism": "PLAIN", "username": "p", "password": PASSWORD, "password_file": "/x"})
    assert both.key == "client.sasl.password_file" and "not both" in str(both)
    missing = error(sasl={"mechanism": "PLAIN", "username": "p", "password_file": str(tmp_path / "nope")})
    assert missing.key == "client.sasl.password_file" and "a readable file" in str(missing)
    (tmp_path / "empty").write_text("\n")
    empty = error(sasl={"mechanism": "PLAIN", "username": "p", "password_file": str(tmp_path / "empty")})
    assert "non-empty" in str(empty)


def test_an_error_about_the_password_never_quotes_it() -> None:
    for bad in ([PASSWORD], {"p": PASSWORD}, 1.5):
        caught = error(sasl={"mechanism": "PLAIN", "username": "p", "password": bad})
        assert caught.key == "client.sasl.password"
        assert PASSWORD not in str(caught) and PASSWORD not in repr(caught.value)
    # A misspelt key is named with a hint, but its value (most likely the password) is not shown.
    typo = error(sasl={"mechanism": "PLAIN", "username": "p", "passwrd": PASSWORD})
    assert typo.key == "client.sasl.passwrd" and "did you mean 'password'?" in str(typo)
    assert PASSWORD not in str(typo) and PASSWORD not in repr(typo.value)


@pytest.mark.parametrize(
    ("client_yaml", "key"),
    [
        ("  sasl: {mechanism: KERBEROS, username: p, password: pw}\n", "client.sasl.mechanism"),
        ("  sasl: {mechanism: SCRAM-SHA-256, username: p}\n", "client.sasl.password"),
    ],
)
def test_sluice_run_exits_2_naming_the_key(tmp_path: Path, capsys, client_yaml: str, key: str) -> None:
    path = tmp_path / "sluice.yaml"
    path.write_text("listen: 127.0.0.1:9092\nupstream: {bootstrap: ['127.0.0.1:1']}\nclient:\n" + client_yaml)
    assert main(["run", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert key in err and "pw" not in err.replace("password", "")
