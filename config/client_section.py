"""Turn the raw `client:` mapping into ClientSettings, or raise ConfigError naming the key.

A password problem never puts the password in the error: the value shown is a `Secret` (printed as
asterisks) or the offending file path.
"""

from __future__ import annotations

from collections.abc import Mapping

from sluice.config.client_settings import (
    DEFAULT_CLIENT_ID,
    DEFAULT_REQUEST_TIMEOUT_S,
    SASL_MECHANISMS,
    ClientSasl,
    ClientSettings,
    Secret,
)
from sluice.config.errors import MISSING, ConfigError
from sluice.config.values import parse_number, parse_section, reject_unknown_keys, value_at

CLIENT_KEYS = ("client_id", "request_timeout_s", "sasl")
SASL_KEYS = ("mechanism", "username", "password", "password_file")
_MAX_PASSWORD_FILE_BYTES = 64 * 1024


def parse_client_section(raw: object, key: str = "client") -> ClientSettings:
    section = parse_section(raw, key, CLIENT_KEYS)
    client_id = value_at(section, "client_id")
    timeout = value_at(section, "request_timeout_s")
    return ClientSettings(
        client_id=DEFAULT_CLIENT_ID if client_id is MISSING else _client_id(client_id, f"{key}.client_id"),
        request_timeout_s=DEFAULT_REQUEST_TIMEOUT_S
        if timeout is MISSING
        else parse_number(timeout, f"{key}.request_timeout_s", above=0),
        sasl=_sasl(value_at(section, "sasl"), f"{key}.sasl"),
    )


def _client_id(raw: object, key: str) -> str:
    if isinstance(raw, str) and raw.strip() and raw.isprintable():
        return raw.strip()
    raise ConfigError(key, raw, "a non-empty client id")


def _sasl(raw: object, key: str) -> ClientSasl | None:
    if isinstance(raw, Mapping):
        # A mistyped key here is likely `pasword: <the password>`: name the key, never show its value.
        redacted = {name: value if name in SASL_KEYS else Secret("") for name, value in raw.items()}
        reject_unknown_keys(redacted, SASL_KEYS, prefix=f"{key}.")
    section = parse_section(raw, key, SASL_KEYS)
    if not section:
        return None
    mechanism = value_at(section, "mechanism")
    if mechanism is MISSING:
        raise ConfigError(f"{key}.mechanism", MISSING, "one of " + ", ".join(SASL_MECHANISMS))
    if not isinstance(mechanism, str) or mechanism.strip().upper() not in SASL_MECHANISMS:
        raise ConfigError(f"{key}.mechanism", mechanism, "one of " + ", ".join(SASL_MECHANISMS))
    username = value_at(section, "username")
    if username is MISSING or not isinstance(username, str) or not username.strip():
        raise ConfigError(f"{key}.username", username, "the proxy's own user name (a non-empty string)")
    return ClientSasl(mechanism.strip().upper(), username.strip(), _password(section, key))


def _password(section: Mapping[object, object], key: str) -> Secret:
    inline, path = value_at(section, "password"), value_at(section, "password_file")
    if inline is not MISSING and path is not MISSING:
        raise ConfigError(
            f"{key}.password_file", path, f"either {key}.password or {key}.password_file, not both"
        )
    if path is not MISSING:
        return _password_file(path, f"{key}.password_file")
    if inline is MISSING:
        raise ConfigError(
            f"{key}.password",
            MISSING,
            f"the proxy's own password (or {key}.password_file naming a file with it)",
        )
    if isinstance(inline, bool) or not isinstance(inline, str | int):
        raise ConfigError(f"{key}.password", Secret(""), "a string")
    text = str(inline)  # YAML reads an all-digit password as a number; it is still the password
    if not text:
        raise ConfigError(f"{key}.password", Secret(""), "a non-empty password")
    return Secret(text)


def _password_file(raw: object, key: str) -> Secret:
    if not isinstance(raw, str) or not raw.strip():
        raise ConfigError(key, raw, "the path of a file holding the password")
    path = raw.strip()
    try:
        with open(path, "rb") as stream:
            data = stream.read(_MAX_PASSWORD_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(key, path, f"a readable file ({exc.strerror or type(exc).__name__})") from None
    if len(data) > _MAX_PASSWORD_FILE_BYTES:
        raise ConfigError(key, path, f"a password file of at most {_MAX_PASSWORD_FILE_BYTES} bytes")
    try:
        # One trailing newline is what editors and `echo` add; it is not part of the password.
        text = data.decode("utf-8").removesuffix("\n").removesuffix("\r")
    except UnicodeDecodeError:
        raise ConfigError(key, path, "a UTF-8 text file") from None
    if not text:
        raise ConfigError(key, path, "a file holding a non-empty password")
    return Secret(text)
