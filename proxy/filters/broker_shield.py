"""BrokerShieldFilter: each Produce charged to the broker it reaches (`quota.broker_protection`).

The request's bytes per topic (its partition batches' record sets, protocol/produce_topics.py) are charged
to the broker node the connection forwards to (proxy/broker_nodes.py), under that broker's threshold
(quota/broker_shield.py): a topic over its share on a broker that is over its threshold earns a throttle,
returned as `Forward(frame, throttle)`, so only this connection (the one to that broker) is held and the
client's connections to other brokers carry on. Nothing is dropped. As for the proxy-wide topic quotas, the
chain keeps the larger of this throttle and the client quota's, and ClientQuotas (after this filter) tells
it in the response.

The shield is read per request (`quota.broker_protection` can appear, change and go with a reload).
Produce v13 names topics by id; the filter keeps clients at v12, where they are named.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import ClassVar

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.errors import ProtocolError
from sluice.protocol.headers import RequestHeader
from sluice.protocol.produce_topics import LAST_WITH_TOPIC_NAMES, produce_partition_sizes, topic_sizes
from sluice.quota import QuotaTags
from sluice.quota.broker_shield import BrokerShield

from ..broker_nodes import BrokerNodes
from .base import ConnectionInfo, Filter, FilterFactory, Forward, Frame
from .quota_metrics import ThrottleStats

BROKER_PRODUCE = "BrokerProduce"
_NO_TAGS = QuotaTags("", "")


class BrokerShieldFilter(Filter):
    request_api_keys = frozenset({ApiKey.PRODUCE})
    max_versions: ClassVar[Mapping[int, int]] = {ApiKey.PRODUCE: LAST_WITH_TOPIC_NAMES}

    __slots__ = ("_node", "_shared")

    def __init__(self, conn: ConnectionInfo, shared: BrokerShieldFactory) -> None:
        super().__init__(conn)
        self._shared = shared
        self._node: int | None = None

    def on_request(self, header: RequestHeader, frame: Frame) -> Frame | Forward:
        shield = self._shared.shield()
        if shield is None:
            return frame
        node = self._node
        if node is None:
            conn = self.conn
            node = self._node = self._shared.nodes.node_of(conn.listener, conn.upstream_peer)
            if node is None:
                self._shared.unattributed_bytes += len(frame) - 4
                return frame
        try:
            sizes = produce_partition_sizes(frame, header)
        except ProtocolError as exc:
            if exc.reason != "unsupported_version":
                raise
            return frame  # a version naming topics by id: the clamp keeps clients from it
        throttle = shield.record(node, topic_sizes(sizes).items(), self.conn.now_ms())
        if throttle <= 0:
            return frame
        self._shared.stats.record_quota(BROKER_PRODUCE, _NO_TAGS, throttle)
        return Forward(frame, throttle)


class BrokerShieldFactory(FilterFactory):
    """`shield()` gives the broker shield in force now (None: none configured)."""

    filter_class = BrokerShieldFilter

    def __init__(
        self, shield: Callable[[], BrokerShield | None], nodes: BrokerNodes, stats: ThrottleStats
    ) -> None:
        self.shield = shield
        self.nodes = nodes
        self.stats = stats
        # Produce bytes on bootstrap connections whose upstream is no known broker: charged to none.
        self.unattributed_bytes = 0

    def create(self, conn: ConnectionInfo) -> BrokerShieldFilter:
        return BrokerShieldFilter(conn, self)

    def reads_body_now(self, api_key: int) -> bool:
        # Only while the shield exists: otherwise a large Produce may pass through as it arrives.
        return self.shield() is not None
