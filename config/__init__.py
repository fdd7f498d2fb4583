"""Sluice's configuration: the validated model and `load_config`, which builds it from YAML and flags."""

from config.errors import ConfigError
from config.load import load_config
from config.model import HostPort, LogConfig, ProxyConfig

__all__ = ["ConfigError", "HostPort", "LogConfig", "ProxyConfig", "load_config"]
