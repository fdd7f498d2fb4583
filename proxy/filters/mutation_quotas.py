"""MutationQuotas: KIP-599's controller_mutation_rate on CreateTopics, CreatePartitions and DeleteTopics.

Each topic is charged the partitions it creates or deletes (spec §4):
* CreateTopics: its assignments, else num_partitions, with -1 meaning the cluster's num.partitions;
* CreatePartitions: the new count minus the current one;
* DeleteTopics: the current count.
Current counts and num.partitions come from the proxy's TopicCache; a miss defers the request while the
proxy asks the broker on the same connection.

Strict request versions (CreateTopics >= 6, DeleteTopics >= 5, CreatePartitions >= 3) admit topics in
request order until the bucket is below zero; the rest are refused with THROTTLING_QUOTA_EXCEEDED (89).
Sluice forwards only the admitted topics and merges the broker's answer with its refusals in the client's
order; when nothing is admitted it answers by itself. Permissive versions (older clients, librdkafka) are
always forwarded and charged, and only throttled. Either way the connection is muted as the request is
charged (so requests pipelined behind it wait, as behind a broker that mutes before reading on), and the
response carries the throttle.

A topic the broker refuses for its own reasons (it exists, bad count, unknown) is refunded, since a broker
charges only after its checks pass. Validate-only requests are exempt unless
`quota.mutations.validate_only: charge` (KRaft's behaviour). Every successful mutation that passes,
throttled or not, keeps the topic cache current.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from sluice.config.quota_settings import MutationSettings, ValidateOnly
from sluice.protocol.api_keys import ApiKey
from sluice.protocol.headers import RequestHeader, encode_response, response_header_size
from sluice.protocol.throttle_field import raise_frame_throttle_ms
from sluice.protocol.topic_mutations import (
    MUTATION_MAX_VERSIONS,
    MutationRequest,
    TopicMutation,
    decode_mutation_request,
    merge_mutation_response,
    mutation_request_subset,
    result_errors,
)
from sluice.quota import QuotaManagers
from sluice.quota.mutations import (
    UNBOUNDED_CONTROLLER_MUTATION_QUOTA,
    ControllerMutationQuota,
    charge_topics,
    is_strict,
)

from ..cluster.topic_cache import KAFKA_DEFAULT_NUM_PARTITIONS, TopicCache
from ..filter_api.contract import (
    Answer,
    ConnectionInfo,
    Defer,
    EntryKind,
    Filter,
    FilterFactory,
    Forward,
    Frame,
    InFlight,
    RequestEffect,
    RequestFrame,
    Respond,
    whole,
)
from ..observability.quota_metrics import MutationRates, ThrottleStats
from .frames import with_body

_KEYS = frozenset({ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS})
QUOTA_KIND = "ControllerMutation"


class _Asked(NamedTuple):
    """What the topic cache was last asked for on one connection."""

    names: frozenset[str]
    by_id: bool
    num_partitions: bool


_NOTHING_ASKED = _Asked(frozenset(), False, False)


@dataclass(slots=True)
class _Plan:
    """What on_request decided for one request, for its on_response."""

    request: MutationRequest
    quota: ControllerMutationQuota
    permits: list[int]  # per topic, in request order (0 for topics not charged)
    forwarded: list[int] = field(default_factory=list)  # indexes sent to the broker
    refused: list[int] = field(default_factory=list)  # indexes Sluice refused with 89


class MutationQuotas(Filter):
    request_api_keys = _KEYS
    response_api_keys = _KEYS
    max_versions = MUTATION_MAX_VERSIONS

    __slots__ = ("_asked", "_charge_validate_only", "_manager", "_plans", "_rates", "_stats", "_topics")

    def __init__(self, conn: ConnectionInfo, shared: MutationQuotasFactory) -> None:
        super().__init__(conn)
        self._manager = shared.manager
        self._charge_validate_only = shared.charge_validate_only
        self._topics = shared.topics
        self._stats = shared.stats
        self._rates = shared.rates
        # What the cache was just asked for: the deferred request then goes on with what the cluster said
        # (a topic it does not know counts 0, and the broker reports the error; an unanswered
        # num.partitions counts Kafka's default for this request).
        self._asked = _NOTHING_ASKED
        # What on_request decided for each forwarded request, by correlation id, for its on_response.
        self._plans: dict[int, _Plan] = {}

    # ---- requests -------------------------------------------------------------------------------

    def on_request(self, header: RequestHeader, frame: RequestFrame) -> RequestEffect:
        if not self._manager.quotas_enabled:
            return frame  # no controller_mutation_rate configured (it may be, from the next request on)
        conn = self.conn
        user, client_id = conn.user, header.client_id
        key, version = header.api_key, header.api_version
        frame = whole(frame)  # its body is read: never a FrameHead
        body = memoryview(frame)[4 + header.size :]
        request = decode_mutation_request(key, version, body)
        now = conn.now_ms()
        if not self._manager.resolve(user, client_id).limited or (
            request.validate_only and not self._charge_validate_only
        ):
            # Not charged, but its answer still keeps the topic cache current.
            self._plans[header.correlation_id] = _Plan(
                request, UNBOUNDED_CONTROLLER_MUTATION_QUOTA, [0] * len(request.topics)
            )
            return frame
        lookup = self._lookup_needed(request, now)
        if lookup is not None:
            return lookup
        permits = [self._permits(request.api_key, topic) for topic in request.topics]
        quota = self._manager.new_quota_for_request(user, client_id, key, version, now)
        self._stats.touch(QUOTA_KIND, self._manager.resolve(user, client_id).tags)
        plan = _Plan(request, quota, permits)
        if is_strict(key, version):
            for index, accepted in enumerate(charge_topics(quota, permits, now)):
                (plan.forwarded if accepted else plan.refused).append(index)
        else:
            for permit in permits:
                quota.record(permit, now)
            plan.forwarded = list(range(len(request.topics)))
        if not plan.forwarded:
            return self._answer_alone(header, plan)
        self._plans[header.correlation_id] = plan
        # The requests behind this one wait, as on a broker; its response tells the throttle (and counts it).
        throttle = self._throttle(header, plan, told=False)
        if plan.refused:
            frame = with_body(frame, header.size, mutation_request_subset(key, version, body, plan.forwarded))
        return Forward(frame, throttle) if throttle > 0 else frame

    def _lookup_needed(self, request: MutationRequest, now_ms: int) -> Defer | None:
        """Defer the request while the cache learns what it lacks, or None when nothing is missing."""
        topics = self._topics
        asked, self._asked = self._asked, _NOTHING_ASKED
        need_default = (
            request.api_key == ApiKey.CREATE_TOPICS
            and topics.num_partitions is None
            and not asked.num_partitions
            and any(t.partitions == -1 and not t.assignments for t in request.topics)
        )
        names: list[str] = []
        ids: list[bytes] = []
        if request.api_key != ApiKey.CREATE_TOPICS:
            for topic in request.topics:
                if topic.name is not None:
                    names.append(topic.name)
                elif (
                    topic.topic_id is not None
                    and not asked.by_id
                    and topics.id_lookup_due(topic.topic_id, now_ms)
                ):
                    ids.append(topic.topic_id)
            names = [name for name in topics.missing(names, now_ms) if name not in asked.names]
        if not names and not ids and not need_default:
            return None
        self._asked = _Asked(frozenset(names), bool(ids), need_default)
        return Defer(topics.refresh(self.conn, names, ids=ids, need_default=need_default))

    def _permits(self, api_key: int, topic: TopicMutation) -> int:
        topics = self._topics
        if api_key == ApiKey.CREATE_TOPICS:
            if topic.assignments:
                return topic.assignments
            if topic.partitions == -1:
                return topics.num_partitions or KAFKA_DEFAULT_NUM_PARTITIONS
            return max(topic.partitions, 0)
        name = topic.name if topic.name is not None else topics.name_of(topic.topic_id or b"")
        current = (topics.partitions(name) if name is not None else None) or 0
        if api_key == ApiKey.CREATE_PARTITIONS:
            return max(topic.partitions - current, 0)
        return current  # DeleteTopics

    def _answer_alone(self, header: RequestHeader, plan: _Plan) -> Answer:
        """Every topic refused: the whole response, made here, muting the client until it has left."""
        throttle = self._throttle(header, plan)
        body = merge_mutation_response(
            header.api_key, header.api_version, plan.request, None, [], plan.refused, throttle
        )
        response = encode_response(header.api_key, header.api_version, header.correlation_id, body)
        return Answer(response, throttle_ms=max(throttle, 0))

    # ---- responses ------------------------------------------------------------------------------

    def on_response(self, request: InFlight, frame: Frame) -> Frame | Respond:
        header = request.header
        plan = self._plans.pop(header.correlation_id, None)
        if plan is None or request.kind is EntryKind.ANSWERED:
            return frame  # not planned here (no quota then), or Sluice's own answer: already complete
        conn = self.conn
        key, version = header.api_key, header.api_version
        header_size = response_header_size(key, version, frame)
        body = memoryview(frame)[4 + header_size :]
        refunded = self._settle(header, plan, result_errors(key, version, body))
        if plan.quota is UNBOUNDED_CONTROLLER_MUTATION_QUOTA:
            return frame
        throttle = self._throttle(header, plan)
        if refunded:
            # Topics the broker refused are not charged; the bucket as it is now decides (the mute
            # started when the request was charged is not shortened).
            now = conn.now_ms()
            throttle = min(
                throttle, self._manager.sensor_for(conn.user, header.client_id, now).throttle_ms(now)
            )
        mute = max(throttle, 0)
        if plan.refused:
            merged = merge_mutation_response(
                key, version, plan.request, body, plan.forwarded, plan.refused, throttle
            )
            return Respond(with_body(frame, header_size, merged), mute_ms=mute)
        if throttle <= 0:
            return frame
        patched = bytearray(frame)
        raise_frame_throttle_ms(key, version, patched, header_size, throttle)  # no field before v2: mute only
        return Respond(memoryview(patched), mute_ms=throttle)

    def _settle(self, header: RequestHeader, plan: _Plan, errors: dict[str | bytes, int]) -> bool:
        """Refund topics the broker refused, keep the topic cache current and count what was mutated.
        True if anything was refunded."""
        conn = self.conn
        now = conn.now_ms()
        request, topics = plan.request, self._topics
        refunded = False
        mutated = 0
        for index in plan.forwarded:
            topic = request.topics[index]
            permits = plan.permits[index]
            key = topic.name if topic.name is not None else topic.topic_id
            if key is None or errors.get(key, -1) != 0:  # an entry with neither was refused
                if permits:
                    self._manager.unrecord(conn.user, header.client_id, permits, now)
                    refunded = True
                continue
            mutated += permits
            name = topic.name if topic.name is not None else topics.name_of(topic.topic_id or b"")
            if request.validate_only or name is None:
                continue
            if request.api_key == ApiKey.DELETE_TOPICS:
                topics.topic_deleted(name)
            elif request.api_key == ApiKey.CREATE_PARTITIONS:
                topics.topic_created(name, topic.partitions, now)
            else:
                created = topic.assignments or (
                    topic.partitions if topic.partitions > 0 else topics.num_partitions
                )
                if created:
                    topics.topic_created(name, created, now)
        if plan.quota is not UNBOUNDED_CONTROLLER_MUTATION_QUOTA:
            tags = self._manager.resolve(conn.user, header.client_id).tags
            self._rates.record(tags, mutated, now)
            usage = self._stats.usage
            if usage is not None:  # what was charged and kept, for the usage records and the fleet
                usage.usage(conn.user, header.client_id).partition_mutations += mutated
        return refunded

    def _throttle(self, header: RequestHeader, plan: _Plan, told: bool = True) -> int:
        """The throttle this request earned, as of now (it shrinks while the request waits). `told`: it goes
        into the response, and so into the usage records."""
        now = self.conn.now_ms()
        throttle = plan.quota.throttle_time_ms(now)
        if throttle > 0:
            user, client_id = self.conn.user, header.client_id
            tags = self._manager.resolve(user, client_id).tags
            self._stats.record_quota(QUOTA_KIND, tags, throttle, now, (user, client_id) if told else None)
            self._stats.record_response(header.api_key, throttle)
        return throttle


class MutationQuotasFactory(FilterFactory):
    """What every connection's MutationQuotas shares: the quota manager, the topic cache, the metrics."""

    filter_class = MutationQuotas

    def __init__(
        self,
        managers: QuotaManagers,
        settings: MutationSettings,
        topics: TopicCache,
        stats: ThrottleStats,
        rates: MutationRates,
    ) -> None:
        self.manager = managers.controller_mutation
        self.charge_validate_only = settings.validate_only is ValidateOnly.CHARGE
        self.topics = topics
        self.stats = stats
        self.rates = rates

    def create(self, conn: ConnectionInfo) -> MutationQuotas:
        return MutationQuotas(conn, self)
