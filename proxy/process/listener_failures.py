"""What the server does when a broker listener cannot open, and when an entity finds the
quota engine's entity cap reached: logs and metrics, kept out of the server's life cycle.

* A node learnt later (from a client's answer: Metadata, a coordinator, a KIP-951 NodeEndpoints entry)
  whose listener cannot open is not advertised (`BrokerDirectory`): logged `broker_not_advertised` once
  per node, counted at every try, and `broker_advertised_again` once its listener opens on a later try.
* Nodes found by the start-up discovery whose listeners cannot open stop the proxy: exit 2 when the
  configuration makes the port impossible (a `broker_ports` key is named), 1 when the machine refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..observability.log import get_logger

if TYPE_CHECKING:
    from sluice.quota import QuotaKey, QuotaManagers

    from ..cluster.brokers import BrokerDirectory, ListenerUnavailable
    from ..observability.metrics import ProxyMetrics

_log = get_logger("sluice.server")

EXIT_LISTENER_FAILED = 1
EXIT_CONFIG_ERROR = 2
_OVERFLOW_LOG_INTERVAL_S = 60.0


class ListenerFailures:
    def __init__(
        self,
        metrics: ProxyMetrics,
        directory: Callable[[], BrokerDirectory],
        fail: Callable[[int, str, dict[str, Any]], None],
    ) -> None:
        self._metrics = metrics
        self._directory = directory
        self._fail = fail
        self._logged: set[int] = set()  # nodes whose failure is logged and not yet mended

    def unavailable(self, failure: ListenerUnavailable) -> None:
        """Counted at every try; logged once per node (every answer naming it would otherwise say it again),
        and again only after its listener opened and then failed anew."""
        self._metrics.broker_listener_failures += 1
        self._metrics.brokers_not_advertised = len(self._directory().unavailable())
        if failure.node_id in self._logged:
            return
        self._logged.add(failure.node_id)
        _log.error(
            "broker_not_advertised",
            node_id=failure.node_id,
            address=failure.address,
            error=failure.reason,
            hint="clients see this broker's partitions as leaderless until its listener opens",
        )

    def recovered(self, node_id: int) -> None:
        self._logged.discard(node_id)
        self._metrics.brokers_not_advertised = len(self._directory().unavailable())
        _log.warning("broker_advertised_again", node_id=node_id)

    def at_start_up(self, failures: list[ListenerUnavailable]) -> None:
        """Nodes the start-up discovery found whose listeners cannot open: fatal, so the operator fixes the
        ports before any client is told about them."""
        config_error = any(failure.config_error for failure in failures)
        self._fail(
            EXIT_CONFIG_ERROR if config_error else EXIT_LISTENER_FAILED,
            "startup_failed",
            {
                "error": "; ".join(str(failure) for failure in failures),
                "addresses": [failure.address for failure in failures],
            },
        )


class EntityOverflowLog:
    """An entity found quota.max_entities reached: said at once, then at most once a minute per quota."""

    def __init__(self, managers: Callable[[], QuotaManagers], max_entities: int) -> None:
        self._managers = managers
        self._max_entities = max_entities
        self._logged: dict[QuotaKey, float] = {}

    def __call__(self, key: QuotaKey, user: str, client_id: str | None) -> None:
        now = asyncio.get_running_loop().time()
        if now - self._logged.get(key, -_OVERFLOW_LOG_INTERVAL_S) < _OVERFLOW_LOG_INTERVAL_S:
            return
        self._logged[key] = now
        _log.warning(
            "quota_entities_overflow",
            quota=key.value,
            max_entities=self._max_entities,
            overflows=self._managers().manager(key).overflows,
            client_id=client_id,
            outcome="new entities share one overflow sensor per quota rule until idle sensors expire",
        )
