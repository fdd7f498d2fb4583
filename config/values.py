"""Turn raw YAML/flag values into typed values, or raise ConfigError naming the key."""

from __future__ import annotations

import difflib
import ipaddress
import math
import re
from collections.abc import Callable, Collection, Mapping
from typing import TypeVar

from sluice.config.errors import MISSING, ConfigError
from sluice.config.model import MAX_PORT, HostPort

HOST_PORT = f"host:port with a non-empty host and a port in 1..{MAX_PORT} (IPv6 as [::1]:9092)"
MAX_NODE_ID = 2**31 - 1  # Kafka node ids are int32

_HOSTNAME = re.compile(r"[A-Za-z0-9._-]+")
_DIGITS = re.compile(r"[0-9]+")  # not str.isdigit(): that accepts "²" and other non-ASCII digits


Value = TypeVar("Value")


def is_wildcard(host: str) -> bool:
    """True for 0.0.0.0 and ::, which a server can bind but a client cannot connect to."""
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def is_ip_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _is_host(text: str) -> bool:
    return _is_ipv6(text) or _HOSTNAME.fullmatch(text) is not None


def parse_host(value: object, key: str) -> str:
    """A bare host name or IP address (IPv6 with or without brackets)."""
    if isinstance(value, str):
        host = value.strip()
        if host.startswith("[") and host.endswith("]") and _is_ipv6(host[1:-1]):
            return host[1:-1]
        if _is_host(host):
            return host
    raise ConfigError(key, value, "a host name or IP address")


def parse_host_port(value: object, key: str) -> HostPort:
    if not isinstance(value, str):
        raise ConfigError(key, value, HOST_PORT)
    text = value.strip()
    if text.startswith("["):
        host, bracket, port_text = text[1:].partition("]")
        if not bracket or not port_text.startswith(":") or not _is_ipv6(host):
            raise ConfigError(key, value, HOST_PORT)
        port_text = port_text[1:]
    else:
        host, colon, port_text = text.rpartition(":")
        if not colon or not host:
            raise ConfigError(key, value, HOST_PORT)
        if ":" in host:
            raise ConfigError(key, value, f"{HOST_PORT}; put IPv6 addresses in brackets")
        if not _is_host(host):
            raise ConfigError(key, value, HOST_PORT)
    if _DIGITS.fullmatch(port_text) is None or not 1 <= int(port_text) <= MAX_PORT:
        raise ConfigError(key, value, HOST_PORT)
    return HostPort(host, int(port_text))


def parse_bootstrap(value: object, key: str) -> tuple[HostPort, ...]:
    """A list of host:port, or one comma-separated string of them."""
    entries: list[object]
    if isinstance(value, str):
        entries = list(value.split(","))
    elif isinstance(value, list | tuple):
        entries = list(value)
    else:
        raise ConfigError(key, value, "a non-empty list of host:port (or one comma-separated string)")
    if not entries or entries == [""]:
        raise ConfigError(key, value, "a non-empty list of host:port (or one comma-separated string)")
    return tuple(parse_host_port(entry, f"{key}[{index}]") for index, entry in enumerate(entries))


def parse_int(value: object, key: str, low: int, high: int) -> int:
    # bool is an int subclass: YAML `true` must not become port 1.
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(key, value, f"an integer in {low}..{high}")
    return value


def parse_number(
    value: object,
    key: str,
    *,
    above: float | None = None,
    at_least: float | None = None,
    at_most: float | None = None,
) -> float:
    """A finite int or float, strictly above `above` or not below `at_least`, and not above `at_most`."""
    if at_least is not None and at_most is not None:
        bound = f"in {at_least:.10g}..{at_most:.10g}"
    else:
        bound = f"> {above:g}" if above is not None else f">= {at_least:g}"
        if at_most is not None:
            bound += f" and <= {at_most:.10g}"
    expected = f"a finite number {bound}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(key, value, expected)
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        raise ConfigError(key, value, expected) from None
    if not math.isfinite(number):
        raise ConfigError(key, value, expected)
    if (
        (above is not None and not number > above)
        or (at_least is not None and not number >= at_least)
        or (at_most is not None and not number <= at_most)
    ):
        raise ConfigError(key, value, expected)
    return number


def parse_bool(value: object, key: str) -> bool:
    """YAML true/false (and the YAML 1.1 spellings yes/no/on/off, which PyYAML reads as booleans)."""
    if isinstance(value, bool):
        return value
    raise ConfigError(key, value, "true or false")


def parse_choice(value: object, key: str, choices: Collection[str]) -> str:
    """One of `choices`, case-insensitively; returned in lower case."""
    if isinstance(value, str) and value.strip().lower() in choices:
        return value.strip().lower()
    raise ConfigError(key, value, "one of " + ", ".join(choices))


def value_at(mapping: Mapping[object, object], name: str) -> object:
    """The value under `name`, or MISSING: a key set to null counts as not given, everywhere in the file."""
    value = mapping.get(name)
    return MISSING if value is None else value


def parse_section(raw: object, key: str, known: tuple[str, ...]) -> Mapping[object, object]:
    """A mapping holding only `known` keys (an empty one when not given)."""
    if raw is MISSING:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(key, raw, f"a mapping with the keys {', '.join(known)}")
    reject_unknown_keys(raw, known, prefix=f"{key}.")
    return raw


def reject_unknown_keys(mapping: Mapping[object, object], known: tuple[str, ...], prefix: str) -> None:
    """ConfigError for the first key of `mapping` not in `known`; `prefix` is the dotted path plus a dot."""
    for key in mapping:
        if key in known:
            continue
        where = f"under {prefix[:-1]}" if prefix else "at the top level"
        close = difflib.get_close_matches(str(key), known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(
            f"{prefix}{key}",
            mapping[key],
            f"a known key: {key!r} is unknown{hint}; known keys {where}: {', '.join(known)}",
        )


def _parse_node_id(raw: object, key: str) -> int:
    # YAML gives `3:` as an int and `"3":` as a str; dotted overrides always give a str.
    if isinstance(raw, str) and _DIGITS.fullmatch(raw.strip()):
        raw = int(raw)
    if isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw <= MAX_NODE_ID:
        raise ConfigError(key, raw, f"a broker node id (an integer in 0..{MAX_NODE_ID}) as the key")
    return raw


def parse_node_map(
    value: object, key: str, what: str, parse_value: Callable[[object, str], Value]
) -> dict[int, Value]:
    """A mapping of broker node id to `what`, each value read by `parse_value(raw, key)`; no node twice."""
    if not isinstance(value, Mapping):
        raise ConfigError(key, value, f"a mapping of broker node id to {what}")
    found: dict[int, Value] = {}
    for raw_node, raw in value.items():
        entry_key = f"{key}.{raw_node}"
        node = _parse_node_id(raw_node, entry_key)
        if node in found:
            raise ConfigError(entry_key, raw, f"each node id once (node {node} is listed twice)")
        found[node] = parse_value(raw, entry_key)
    return found


def parse_broker_ports(value: object, key: str) -> dict[int, int]:
    """A mapping of broker node id to port; no node or port twice."""
    ports = parse_node_map(value, key, "port", lambda raw, entry_key: parse_int(raw, entry_key, 1, MAX_PORT))
    seen: set[int] = set()
    for node, port in ports.items():
        if port in seen:
            raise ConfigError(f"{key}.{node}", port, "a port no other broker_ports entry uses")
        seen.add(port)
    return ports
