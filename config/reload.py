"""Reloading the configuration file while the proxy runs (SIGHUP, `sluice reload`).

`reload_config` reads and validates the file exactly as start-up does (the same flags on top). An
invalid file raises ConfigError naming the key, and the caller keeps the configuration in force. A
valid one comes back with the settings that apply live and the keys whose change needs a restart:

* live: `quota.entities` (client and IP quotas), `quota.topics`, `quota.admin_principals`, and
  `quota.broker_protection` once the proxy runs with it (changed or removed); adding it to a proxy started
  without it needs a restart, since its filter is in the chain only then (so a proxy without it pays
  nothing for it on the data path): until then the running configuration keeps it absent;
* after a restart: everything else (listeners, upstream, TLS, SASL, quota windows and sensors, the
  throttle mode, the store topic, ...). Those keep their running values until then, and are reported so
  the operator is told.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import NamedTuple

from sluice.config.load import load_config
from sluice.config.model import ProxyConfig
from sluice.config.quota_settings import QuotaSettings

LIVE_QUOTA_FIELDS = ("rules", "ip_rules", "topics", "broker_protection", "admin_principals")
# QuotaSettings field -> the file key an operator knows it by.
_QUOTA_KEYS = {
    "engine": "quota.window / quota.controller_window / quota.legacy_windows / quota.sensor",
    "throttle_mode": "quota.throttle_mode",
    "fetch_throttle": "quota.fetch_throttle",
    "mutations": "quota.mutations",
    "store": "quota.store",
    "admin": "quota.admin",
}


class Reloaded(NamedTuple):
    """A valid reloaded file: its configuration, what applies now, and what waits for a restart."""

    config: ProxyConfig
    restart_required: tuple[str, ...]

    @property
    def quota(self) -> QuotaSettings:
        return self.config.quota


def reload_config(
    path: str | os.PathLike[str], running: ProxyConfig, overrides: Mapping[str, object] | None = None
) -> Reloaded:
    """Read `path` again (with the start-up flags in `overrides` on top); ConfigError if it is invalid."""
    new = load_config(path, overrides)
    restart = restart_required(running, new)
    if running.quota.broker_protection is None and new.quota.broker_protection is not None:
        new = dataclasses.replace(new, quota=dataclasses.replace(new.quota, broker_protection=None))
    return Reloaded(new, restart)


def restart_required(running: ProxyConfig, new: ProxyConfig) -> tuple[str, ...]:
    """The keys whose new value only takes effect after a restart, in file order."""
    keys: list[str] = []
    for field in dataclasses.fields(running):
        if field.name == "quota":
            continue
        if getattr(running, field.name) != getattr(new, field.name):
            keys.append(field.name)
    for field in dataclasses.fields(running.quota):
        if field.name == "broker_protection" and running.quota.broker_protection is None:
            if new.quota.broker_protection is not None:
                keys.append("quota.broker_protection")  # added: its filter joins the chain at start
            continue
        if field.name in LIVE_QUOTA_FIELDS:
            continue
        if _differs(getattr(running.quota, field.name), getattr(new.quota, field.name)):
            keys.append(_QUOTA_KEYS.get(field.name, f"quota.{field.name}"))
    return tuple(keys)


def _differs(old: object, new: object) -> bool:
    # QuotaConfig holds a read-only mapping of sensor kinds; compare field by field.
    if dataclasses.is_dataclass(old) and dataclasses.is_dataclass(new):
        return any(_differs(getattr(old, f.name), getattr(new, f.name)) for f in dataclasses.fields(old))
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        return dict(old) != dict(new)
    return old != new
