"""Where each broker really is, and which proxy listener stands in for it.

Every broker address a client could learn (Metadata, FindCoordinator, DescribeCluster) passes through
`advertise`, which records the broker's real address for the upstream side and makes sure a listener for
that node exists before the rewritten answer leaves the proxy.

A node whose listener cannot open (its port is taken, beyond 65535, or collides with another listener) is
never advertised: `advertise` returns None and the rewrite leaves it out. Telling clients to connect to a
port the proxy does not hold would hand them to whatever holds it: that process would see their
credentials and carry their traffic past every quota.
The listener is tried again at most every `retry_s`, when the node is next advertised.
"""

from __future__ import annotations

import time
from collections.abc import Callable

Address = tuple[str, int]


class ListenerUnavailable(Exception):
    """The listener for a broker node cannot open. `config_error`: the configuration makes it impossible
    (a port beyond 65535 or taken by another of Sluice's listeners), rather than the machine refusing."""

    def __init__(self, node_id: int, address: str, reason: str, config_error: bool) -> None:
        super().__init__(f"no listener for broker {node_id} on {address}: {reason}")
        self.node_id = node_id
        self.address = address
        self.reason = reason
        self.config_error = config_error


# node_id -> the port its listener holds; raises ListenerUnavailable.
OpenListener = Callable[[int], int]
OnUnavailable = Callable[[ListenerUnavailable], None]
OnRecovered = Callable[[int], None]  # a node that had no listener has one now


class BrokerDirectory:
    __slots__ = (
        "_advertised_host",
        "_clock",
        "_failed",
        "_on_recovered",
        "_on_unavailable",
        "_open",
        "_ports",
        "_real",
        "_retry_s",
    )

    def __init__(
        self,
        advertised_host: str,
        open_listener: OpenListener,
        on_unavailable: OnUnavailable | None = None,
        on_recovered: OnRecovered | None = None,
        retry_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._advertised_host = advertised_host
        self._open = open_listener
        self._on_unavailable = on_unavailable
        self._on_recovered = on_recovered
        self._retry_s = retry_s
        self._clock = clock
        self._real: dict[int, Address] = {}
        self._ports: dict[int, int] = {}
        self._failed: dict[int, tuple[float, ListenerUnavailable]] = {}

    def upstream_address(self, node_id: int) -> Address | None:
        return self._real.get(node_id)

    def known_nodes(self) -> dict[int, Address]:
        return dict(self._real)

    def unavailable(self) -> dict[int, ListenerUnavailable]:
        """Nodes learnt but not advertised, with why."""
        return {node_id: failure for node_id, (_at, failure) in self._failed.items()}

    def advertise(self, node_id: int, real_host: str, real_port: int) -> Address | None:
        """Learn where `node_id` really is; return the proxy address that stands for it, or None when the
        proxy has no listener for it (then it must not be advertised)."""
        self._real[node_id] = (real_host, real_port)
        port = self._ports.get(node_id)
        if port is not None:
            return self._advertised_host, port
        failed = self._failed.get(node_id)
        now = self._clock()
        if failed is not None and now - failed[0] < self._retry_s:
            return None
        try:
            # Synchronous on purpose: the listener must accept before any client can read this answer.
            port = self._open(node_id)
        except ListenerUnavailable as exc:
            self._failed[node_id] = (now, exc)
            if self._on_unavailable is not None:
                self._on_unavailable(exc)
            return None
        self._ports[node_id] = port
        if self._failed.pop(node_id, None) is not None and self._on_recovered is not None:
            self._on_recovered(node_id)
        return self._advertised_host, port
