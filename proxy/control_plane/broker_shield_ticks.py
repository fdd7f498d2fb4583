"""The broker shield's once-a-second work (quota/broker_shield.py `tick`), and its log events.

A `Periodic` service calls it: the latency triggers are evaluated (`broker_latency_engaged`, `_lowered`,
`_raised`, `_released`), holding episodes are reported (`broker_throttle_started` when a broker starts
holding topics back, `broker_throttle_stopped` once it has held none for five seconds) and idle topics
leave their broker's share. Engaging and releasing, and the episodes, are logged at info; each step of a
held threshold at debug (up to one per broker per second).
"""

from __future__ import annotations

from collections.abc import Callable

from sluice.quota.broker_shield import BrokerShield

from ..observability.log import get_logger

_log = get_logger("sluice.broker_shield")
_DEBUG_EVENTS = frozenset({"broker_latency_lowered", "broker_latency_raised"})


class ShieldTicker:
    """`tick(now_ms)` for a Periodic service; reads the shield in force each time (it may come and go)."""

    def __init__(self, shield: Callable[[], BrokerShield | None]) -> None:
        self._shield = shield

    def tick(self, now_ms: int) -> None:
        shield = self._shield()
        if shield is None:
            return
        for event in shield.tick(now_ms):
            log = _log.debug if event.event in _DEBUG_EVENTS else _log.info
            log(event.event, **event.fields)
