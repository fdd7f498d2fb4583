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

import time
from collections.abc import Callable

from .brokers import Address

# An upstream address that is no known broker is looked for again at most this often (the directory may
# have learnt it since), so a connection whose bootstrap server is an alias costs no look-up per request.
MISS_RETRY_S = 1.0

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

    __slots__ = ("_by_address", "_clock", "_known_nodes", "_read_at")

    def __init__(
        self, known_nodes: Callable[[], dict[int, Address]], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._known_nodes = known_nodes  # BrokerDirectory.known_nodes: node -> its real address
        self._clock = clock
        self._by_address: dict[str, int] = {}  # "host:port" -> node, as last read
        self._read_at: float | None = None

    def node_of(self, listener: str, upstream_peer: str) -> int | None:
        node = listener_node(listener)
        if node is not None or not upstream_peer:
            return node
        node = self._by_address.get(upstream_peer)
        if node is None:
            now = self._clock()
            if self._read_at is None or now - self._read_at >= MISS_RETRY_S:
                self._read_at = now
                self._by_address = {f"{h}:{p}": n for n, (h, p) in self._known_nodes().items()}
                node = self._by_address.get(upstream_peer)
        return node
