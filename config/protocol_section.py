"""Turn the raw `protocol:` mapping into ProtocolSettings, or raise ConfigError naming the key."""

from __future__ import annotations

from sluice.config.errors import MISSING
from sluice.config.protocol_settings import ProtocolSettings, UnvettedApis
from sluice.config.values import parse_choice, parse_section, value_at

PROTOCOL_KEYS = ("unvetted_apis",)


def parse_protocol_section(raw: object, key: str = "protocol") -> ProtocolSettings:
    section = parse_section(raw, key, PROTOCOL_KEYS)
    unvetted = value_at(section, "unvetted_apis")
    if unvetted is MISSING:
        return ProtocolSettings()
    choices = [choice.value for choice in UnvettedApis]
    return ProtocolSettings(UnvettedApis(parse_choice(unvetted, f"{key}.unvetted_apis", choices)))
