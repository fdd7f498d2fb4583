"""BrokerShieldFilter: each Produce charged to the broker it reaches (`quota.broker_protection`), and timed.

The request's bytes per topic (its partition batches' record sets, protocol/produce_topics.py) are charged
to the broker node the connection forwards to (proxy/cluster/broker_nodes.py), under that broker's threshold
(quota/broker_shield.py): a topic over its share on a broker that is over its threshold earns a throttle,
returned as `Forward(frame, throttle)`, so only this connection (the one to that broker) is held and the
client's connections to other brokers carry on. Nothing is dropped. The chain keeps the larger of this
throttle and the other quotas' for the request, and ClientQuotas tells it in the response (from the
request's entry in flight, wherever this filter sits).

With `trigger: latency`, each Produce is also timed from when it is forwarded to when its answer is
matched to it (round_trip_clock.py): the broker's time and the network both ways, as the proxy sees them.

Last in the chain: its `on_request` runs as the Produce is forwarded, after any filter that deferred it
(the entity gate) or answered it instead, in the same pass that writes it upstream; so a request is
charged to its broker when the broker gets it, and its round trip starts then. The server puts it in the
chain only when `quota.broker_protection` is configured at start (a proxy without it pays nothing); the
shield is read per request, since a reload may change it or take it away: without it, both hooks return
at once and a large Produce may pass through as it arrives. Produce v13 names topics by id; the
filter keeps clients at v12, where they are named.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Protocol

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.headers import RequestHeader
from sluice.protocol.produce_topics import LAST_WITH_TOPIC_NAMES, produce_topic_sizes
from sluice.quota import QuotaTags
from sluice.quota.broker_shield import BrokerShield

from ..cluster.broker_nodes import BrokerNodes
from ..filter_api.contract import (
    ConnectionInfo,
    EntryKind,
    Filter,
    FilterFactory,
    Forward,
    Frame,
    InFlight,
    RequestEffect,
    RequestFrame,
    whole,
)
from ..observability.quota_metrics import ThrottleStats
from .round_trip_clock import RoundTripClock

BROKER_PRODUCE = "BrokerProduce"
_NO_TAGS = QuotaTags("", "")
_FORWARDED = EntryKind.FORWARDED


class ShieldInForce(Protocol):
    """Where the shield in force is read (control_plane's LiveQuotas): one attribute, per request."""

    brokers: BrokerShield | None


class BrokerShieldFilter(Filter):
    request_api_keys = frozenset({ApiKey.PRODUCE})
    response_api_keys = frozenset({ApiKey.PRODUCE})
    max_versions: ClassVar[Mapping[int, int]] = {ApiKey.PRODUCE: LAST_WITH_TOPIC_NAMES}

    __slots__ = ("_clock", "_live", "_node", "_shared")

    def __init__(self, conn: ConnectionInfo, shared: BrokerShieldFactory) -> None:
        super().__init__(conn)
        self._shared = shared
        self._live = shared.live
        self._node: int | None = None
        self._clock: RoundTripClock | None = None  # made when the first Produce is timed

    def on_request(self, header: RequestHeader, frame: RequestFrame) -> RequestEffect:
        shield = self._live.brokers
        if shield is None:
            return frame
        node = self._node
        if node is None:
            conn = self.conn
            node = self._node = self._shared.nodes.node_of(conn.listener, conn.upstream_peer)
            if node is None:
                self._shared.unattributed_bytes += len(frame) - 4
                return frame
        now = self.conn.now_ms()
        if shield.measures_latency:
            clock = self._clock
            if clock is None:
                clock = self._clock = RoundTripClock()
            clock.sent(header.correlation_id, now)
        sizes = produce_topic_sizes(whole(frame), header)
        if sizes is None:
            return frame  # a version naming topics by id: the clamp keeps clients from it
        throttle = shield.record(node, sizes.items(), now)
        if throttle <= 0:
            return frame
        self._shared.stats.record_quota(BROKER_PRODUCE, _NO_TAGS, throttle)
        return Forward(frame, throttle)

    def on_response(self, request: InFlight, frame: Frame) -> Frame:
        clock = self._clock
        if clock is None or request.kind is not _FORWARDED:
            return frame
        sent_ms = clock.answered(request.header.correlation_id)
        shield = self._live.brokers
        if sent_ms is not None and shield is not None and shield.measures_latency and self._node is not None:
            now = self.conn.now_ms()
            shield.round_trip(self._node, now - sent_ms, now)
        return frame


class BrokerShieldFactory(FilterFactory):
    """`live.brokers` is the broker shield in force now (None: none configured)."""

    filter_class = BrokerShieldFilter

    def __init__(self, live: ShieldInForce, nodes: BrokerNodes, stats: ThrottleStats) -> None:
        self.live = live
        self.nodes = nodes
        self.stats = stats
        # Produce bytes on bootstrap connections whose upstream is no known broker: charged to none.
        self.unattributed_bytes = 0

    def create(self, conn: ConnectionInfo) -> BrokerShieldFilter:
        return BrokerShieldFilter(conn, self)

    def reads_body_now(self, api_key: int) -> bool:
        # Only while the shield exists: otherwise a large Produce may pass through as it arrives.
        return self.live.brokers is not None
