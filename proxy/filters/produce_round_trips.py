"""ProduceRoundTrips: each broker's Produce round trip (forwarded -> answered), for the latency trigger.

Last in the chain, so its `on_request` runs as a Produce is forwarded (after any filter that deferred or
answered it), in the same pass that writes it upstream; `on_response` runs as the broker's answer is
matched to it. The difference is the round trip as the proxy sees it: the broker's time plus the network
both ways, and, for a large request passed through as it arrives, the time the client took to send the
rest of it. Recorded per broker (quota/round_trips.py) only while the latency trigger is configured;
otherwise both hooks return at once.

A Produce with acks=0 has no answer: its entry is dropped when a later answer is matched (answers come
in request order), and at most `MAX_PENDING` are kept, so a connection that only sends acks=0 keeps
nothing more. The filter reads only the header: a large Produce still passes through as it arrives.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.headers import RequestHeader
from sluice.quota.broker_shield import BrokerShield

from ..broker_nodes import BrokerNodes
from .base import ConnectionInfo, EntryKind, Filter, FilterFactory, Frame, InFlight

_PRODUCE = ApiKey.PRODUCE
_FORWARDED = EntryKind.FORWARDED
MAX_PENDING = 256


class ProduceRoundTrips(Filter):
    request_api_keys = frozenset({_PRODUCE})
    response_api_keys = frozenset({_PRODUCE})
    head_only_api_keys = frozenset({_PRODUCE})

    __slots__ = ("_node", "_pending", "_shared")

    def __init__(self, conn: ConnectionInfo, shared: ProduceRoundTripsFactory) -> None:
        super().__init__(conn)
        self._shared = shared
        self._node: int | None = None
        # (correlation id, forwarded at ms) of the Produce requests not answered yet; made at first use.
        self._pending: deque[tuple[int, int]] | None = None

    def on_request(self, header: RequestHeader, frame: Frame) -> Frame:
        shield = self._shared.shield()
        if shield is None or not shield.measures_latency:
            return frame
        pending = self._pending
        if pending is None:
            pending = self._pending = deque(maxlen=MAX_PENDING)
        pending.append((header.correlation_id, self.conn.now_ms()))
        return frame

    def on_response(self, request: InFlight, frame: Frame) -> Frame:
        pending = self._pending
        if not pending or request.kind is not _FORWARDED:
            return frame
        correlation_id = request.header.correlation_id
        while pending:
            sent_id, sent_ms = pending.popleft()
            if sent_id == correlation_id:
                self._answered(sent_ms)
                break
        return frame

    def _answered(self, sent_ms: int) -> None:
        shield = self._shared.shield()
        if shield is None or not shield.measures_latency:
            return
        node = self._node
        if node is None:
            conn = self.conn
            node = self._node = self._shared.nodes.node_of(conn.listener, conn.upstream_peer)
            if node is None:
                return
        now_ms = self.conn.now_ms()
        shield.round_trip(node, now_ms - sent_ms, now_ms)


class ProduceRoundTripsFactory(FilterFactory):
    filter_class = ProduceRoundTrips

    def __init__(self, shield: Callable[[], BrokerShield | None], nodes: BrokerNodes) -> None:
        self.shield = shield
        self.nodes = nodes

    def create(self, conn: ConnectionInfo) -> ProduceRoundTrips:
        return ProduceRoundTrips(conn, self)
