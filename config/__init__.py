"""Sluice's configuration: the validated model and `load_config`, which builds it from YAML and flags."""

from sluice.config.errors import ConfigError
from sluice.config.load import load_config
from sluice.config.model import HostPort, LogConfig, ProxyConfig
from sluice.config.quota_settings import FetchThrottle, QuotaRule, QuotaSettings, ThrottleMode

__all__ = [
    "ConfigError",
    "FetchThrottle",
    "HostPort",
    "LogConfig",
    "ProxyConfig",
    "QuotaRule",
    "QuotaSettings",
    "ThrottleMode",
    "load_config",
]
