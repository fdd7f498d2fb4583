"""Which broker a client connection's requests reach: the node its listener stands for.

A connection on a broker listener (`broker-<node id>`, as the server names them) is forwarded to that
node, so that is where its Produce bytes go: the leader of the partitions it writes, or a broker that
answers NOT_LEADER_OR_FOLLOWER (and still took the bytes in). A bootstrap connection is forwarded to
whichever bootstrap server answered first; it is charged to the node whose address that is
(`conn.upstream_peer` against the addresses the brokers advertise). Clients rarely produce on it (Kafka
clients use it for their first Metadata request), and when the bootstrap servers are named differently
from what the brokers advertise (a DNS alias, a load balancer) it matches no node: such requests are
charged to no broker, and counted.
"""

from __future__ import annotations

from collections.abc import Callable

from .brokers import Address

BROKER_LISTENER_PREFIX = "broker-"


def listener_name(node_id: int) -> str:
    """The name of the listener that stands for `node_id` (ConnectionInfo.listener)."""
    return f"{BROKER_LISTENER_PREFIX}{node_id}"


def listener_node(listener: str) -> int | None:
    """The node a listener stands for; None for the bootstrap listener."""
    if listener.startswith(BROKER_LISTENER_PREFIX):
        try:
            return int(listener[len(BROKER_LISTENER_PREFIX) :])
        except ValueError:
            return None
    return None


class BrokerNodes:
    """Resolves a connection (its listener and upstream address) to a broker node id."""

    __slots__ = ("_known_nodes",)

    def __init__(self, known_nodes: Callable[[], dict[int, Address]]) -> None:
        self._known_nodes = known_nodes  # BrokerDirectory.known_nodes: node -> its real address

    def node_of(self, listener: str, upstream_peer: str) -> int | None:
        node = listener_node(listener)
        if node is not None or not upstream_peer:
            return node
        for known, (host, port) in self._known_nodes().items():
            if f"{host}:{port}" == upstream_peer:
                return known
        return None
