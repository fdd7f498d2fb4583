"""QuotaReloader: SIGHUP (and `sluice reload`) re-reads the configuration file, and its quotas apply live.

A valid file changes the quotas in force at once (proxy/control_plane/quota_state.py: the file's quotas, with
the store's on top; existing sensors keep their samples, spec V16), and the topic quotas and quota-admin
principals with them; every change is logged as `quota_changed`. Keys that only take effect after a
restart are named in `config_reloaded`. An invalid file is refused: `config_reload_failed` names the key
and what was expected (never the value, which could be a credential), and nothing changes. No connection
is touched either way.
"""

from __future__ import annotations

from sluice.config.errors import ConfigError
from sluice.config.model import ProxyConfig
from sluice.config.reload import reload_config
from sluice.proxy.control_plane.quota_state import QuotaState

from ..observability.log import get_logger
from .quota_store_service import log_quota_changes

_log = get_logger("sluice.reload")


class QuotaReloader:
    def __init__(self, state: QuotaState, running: ProxyConfig) -> None:
        self._state = state
        # What the proxy started with: the keys that need a restart are compared with it.
        self._started = running
        self.source: tuple[str, dict[str, object]] | None = None  # (file, start-up flags)
        self.reloads = 0
        self.failures = 0

    def reload(self) -> bool:
        """Re-read the file; True if it was valid and applied."""
        if self.source is None:
            _log.warning("config_reload_skipped", reason="the proxy was started without a configuration file")
            return False
        path, overrides = self.source
        try:
            reloaded = reload_config(path, self._started, overrides)
        except ConfigError as exc:
            self.failures += 1
            _log.error(
                "config_reload_failed", key=exc.key, expected=exc.expected, kept="the running configuration"
            )
            return False
        changes = self._state.reload(reloaded.quota)
        log_quota_changes(changes, "file")
        self.reloads += 1
        _log.info(
            "config_reloaded",
            file=str(path),
            quota_changes=len(changes),
            restart_required=list(reloaded.restart_required),
        )
        return True
