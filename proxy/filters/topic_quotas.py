"""TopicQuotas: produce byte rates per topic (`quota.topics`, quota/topic_quotas.py), charged as forwarded.

Each partition batch of a Produce is charged to its topic (its record set's size), the request's topics
together to the total; the throttle is the longest any of its topics earned (a topic is over only while
the total is over too). Nothing is dropped: the request is forwarded and the producer is throttled
exactly like a client quota throttle, with `Forward(frame, throttle)`. The chain keeps the larger of this
throttle and the client quota's for the same request, and ClientQuotas (after this filter) tells it in
the response and holds the client, in whichever throttle mode is configured.

The topic quotas are read per request (`quota.topics` can appear, change and go with a reload). Produce
v13 names topics by id; the filter keeps clients at v12, where they are named.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Protocol

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.headers import RequestHeader
from sluice.protocol.produce_topics import LAST_WITH_TOPIC_NAMES, produce_topic_sizes
from sluice.quota import QuotaTags, TopicQuotas

from ..filter_api.contract import (
    ConnectionInfo,
    Filter,
    FilterFactory,
    Forward,
    RequestEffect,
    RequestFrame,
    whole,
)
from ..observability.quota_metrics import ThrottleStats

_TOPIC_TAGS = QuotaTags("", "")


class TopicQuotasInForce(Protocol):
    """Where the topic quotas in force are read (control_plane's LiveQuotas): one attribute, per Produce."""

    topics: TopicQuotas | None


class TopicQuotaFilter(Filter):
    request_api_keys = frozenset({ApiKey.PRODUCE})
    max_versions: ClassVar[Mapping[int, int]] = {ApiKey.PRODUCE: LAST_WITH_TOPIC_NAMES}

    __slots__ = ("_live", "_shared")

    def __init__(self, conn: ConnectionInfo, shared: TopicQuotasFactory) -> None:
        super().__init__(conn)
        self._shared = shared
        # Read directly, not through the factory: this runs for every Produce, nearly always to find None.
        self._live = shared.live

    def on_request(self, header: RequestHeader, frame: RequestFrame) -> RequestEffect:
        quotas = self._live.topics
        if quotas is None:
            return frame
        sizes = produce_topic_sizes(whole(frame), header)
        if sizes is None:
            return frame  # a version naming topics by id: the clamp keeps clients from it
        throttle = quotas.record_request(sizes.items(), self.conn.now_ms())
        if throttle <= 0:
            return frame
        self._shared.stats.record_quota("TopicProduce", _TOPIC_TAGS, throttle)
        return Forward(frame, throttle)


class TopicQuotasFactory(FilterFactory):
    """`live.topics` is the topic quotas in force now (None: none configured)."""

    filter_class = TopicQuotaFilter

    def __init__(self, live: TopicQuotasInForce, stats: ThrottleStats) -> None:
        self.live = live
        self.stats = stats

    def create(self, conn: ConnectionInfo) -> TopicQuotaFilter:
        return TopicQuotaFilter(conn, self)

    def reads_body_now(self, api_key: int) -> bool:
        # Only while topic quotas exist: otherwise a large Produce may pass through as it arrives.
        return self.live.topics is not None
