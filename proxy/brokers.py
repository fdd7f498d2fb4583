"""Where each broker really is, and which proxy listener stands in for it.

Every broker address a client could learn (Metadata, FindCoordinator, DescribeCluster) passes through
`advertise`, which records the broker's real address for the upstream side and makes sure a listener for
that node exists before the rewritten answer leaves the proxy.
"""

from __future__ import annotations

from collections.abc import Callable

Address = tuple[str, int]


class BrokerDirectory:
    __slots__ = ("_advertised_host", "_on_new_node", "_port_for", "_real")

    def __init__(
        self,
        advertised_host: str,
        port_for: Callable[[int], int],
        on_new_node: Callable[[int], None],
    ) -> None:
        self._advertised_host = advertised_host
        self._port_for = port_for
        self._on_new_node = on_new_node
        self._real: dict[int, Address] = {}

    def upstream_address(self, node_id: int) -> Address | None:
        return self._real.get(node_id)

    def known_nodes(self) -> dict[int, Address]:
        return dict(self._real)

    def advertise(self, node_id: int, real_host: str, real_port: int) -> Address:
        """Learn where `node_id` really is and return the proxy address that stands for it."""
        is_new = node_id not in self._real
        self._real[node_id] = (real_host, real_port)
        if is_new:
            # Synchronous on purpose: the listener must accept before any client can read this answer.
            self._on_new_node(node_id)
        return self._advertised_host, self._port_for(node_id)
