"""Sluice's configuration: the validated model and `load_config`, which builds it from YAML and flags."""

from config.errors import ConfigError
from config.load import load_config
from config.model import HostPort, LogConfig, ProxyConfig
from config.quota_settings import FetchThrottle, QuotaRule, QuotaSettings, ThrottleMode

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
