"""UsageRecorder: what each entity sends and receives, into the usage ledger (while usage records are on).

Per request: one count by API. Per Produce: the request's size (header + body without the 4-byte length,
what `producer_byte_rate` is charged) and the record-set bytes per topic; a large Produce passed through
as it arrives is observed as it goes by (`protocol/produce_stream.py`), so usage records never make the
proxy read a request whole. Per Fetch response as sent to the
client: its size (body + 4, what `consumer_byte_rate` is charged) and the record-set bytes per topic. The
topic breakdown walks the topic/partition structure without decoding a record
(`protocol/produce_stream.py`, `protocol/record_sets.py`); a body it cannot walk is left to the broker
(or the client) to refuse, and only the breakdown is lost. Topic bytes are kept per broker: the node the
connection reaches (proxy/cluster/broker_nodes.py), None where it cannot be told. Throttles, CPU time and
partition mutations come from the quota filters, which charge them.

It runs after the quota filters, so it counts what was forwarded and what the client got.

Topic names: Produce and Fetch v13+ name topics by id. A client learns the ids from Metadata answers,
which pass through here: the names they pair with ids are kept (`METADATA_NAMES_MAX_BYTES` bounds the
answer decoded, so an all-topics answer of a large cluster costs the loop nothing; the topic cache's own
look-ups then name what they know), and a topic is recorded by name. An id still unknown is recorded as
its UUID text.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.errors import ProtocolError
from sluice.protocol.frames import FrameHead
from sluice.protocol.headers import RequestHeader, response_header_size
from sluice.protocol.produce_stream import ProduceTopicStream, produce_topics
from sluice.protocol.record_sets import TopicBytes, fetch_topic_bytes
from sluice.protocol.response_walks import walked_fetch_topics
from sluice.protocol.topic_metadata import TOPIC_IDS_METADATA_VERSION, decode_topic_partitions
from sluice.quota.usage_ledger import EntityUsage, UsageLedger

from ..cluster.broker_nodes import BrokerNodes
from ..filter_api.contract import ConnectionInfo, Filter, FilterFactory, Frame, InFlight, RequestFrame

# Plain ints, as the header parse gives keys: what the compiled readers answer themselves (they hand an enum
# member to their Python).
PRODUCE, FETCH, METADATA = int(ApiKey.PRODUCE), int(ApiKey.FETCH), int(ApiKey.METADATA)
# A Metadata answer larger than this is not decoded for names (a client's own topics fit many times over).
METADATA_NAMES_MAX_BYTES = 256 * 1024
# Names kept from Metadata answers; past this the map starts again (ids of deleted topics do not pile up).
MAX_TOPIC_NAMES = 100_000
_ALL_API_KEYS = frozenset(range(128))
# A topic id (Produce and Fetch v13+ name topics by id) -> its name, when the proxy knows it.
TopicNames = Callable[[bytes], str | None]


def _no_names(_topic_id: bytes) -> str | None:
    return None


class UsageRecording:
    """The recording itself, shared by every connection: the ledger and how topic ids get names."""

    __slots__ = ("_cache", "_ledger", "_names_seen", "_topic_names")

    def __init__(self, ledger: UsageLedger, topic_names: TopicNames = _no_names) -> None:
        self._ledger = ledger
        self._topic_names = topic_names
        self._names_seen: dict[bytes, str] = {}  # topic id -> name, from Metadata answers
        # (user, client_id) -> its counters, for the ledger's current generation only.
        self._cache: tuple[int, str, str | None, EntityUsage] | None = None

    def usage(self, user: str, client_id: str | None, /) -> EntityUsage:
        # (positional only, as the compiled one takes them)
        cached = self._cache
        ledger = self._ledger
        if (
            cached is not None
            and cached[0] == ledger.generation
            and cached[1] == user
            and cached[2] == client_id
        ):
            return cached[3]
        usage = ledger.entity(user, client_id)
        self._cache = (ledger.generation, user, client_id, usage)
        return usage

    def request(
        self, user: str, header: RequestHeader, frame: Frame | FrameHead, broker: int | None = None
    ) -> None:
        """Count the request, and a Produce's bytes and topics. The reference of the compiled one
        (proxy/filters/_usage_recording.c, `record_request`), which the filters run where the install has
        it; it writes out `usage`, `_named`, and EntityUsage's `add_request` and `add_topics` inline: a change
        to any of them is a change to it."""
        usage = self.usage(user, header.client_id)
        key = header.api_key
        usage.add_request(key)
        if key != PRODUCE:
            return
        usage.produce_bytes += len(frame) - 4
        if type(frame) is FrameHead:
            frame.observe(_StreamedProduce(self, user, header, len(frame), broker))
            return
        try:
            found = produce_topics(frame, header)  # from the walk a topic quota made, if one did
        except ProtocolError:
            return
        usage.add_topics(self._named(found), False, broker)

    def produced(
        self, user: str, client_id: str | None, found: TopicBytes, broker: int | None = None
    ) -> None:
        self.usage(user, client_id).add_topics(self._named(found), False, broker)

    def fetch_response(
        self, user: str, header: RequestHeader, frame: Frame, broker: int | None = None
    ) -> None:
        """Count a Fetch answer's size and its topics' record bytes. The reference of the compiled one
        (proxy/filters/_usage_recording.c, `record_fetch_response`), which writes out `usage`, `_named` and
        EntityUsage's `add_topics` inline, as `request`'s does."""
        usage = self.usage(user, header.client_id)
        try:
            header_size = response_header_size(FETCH, header.api_version, frame)
        except ProtocolError:
            return
        usage.fetch_bytes += len(frame) - 4 - header_size + 4
        # The walk the NodeEndpoints rewrite made of this very answer (v16+), if it made one.
        found = walked_fetch_topics(header.api_version, frame, 4 + header_size)
        if found is None:
            try:
                found = fetch_topic_bytes(header.api_version, frame, 4 + header_size)
            except ProtocolError:
                return
        usage.add_topics(self._named(found), True, broker)

    def metadata_response(self, header: RequestHeader, frame: Frame) -> None:
        """Keep the (id, name) pairs of a Metadata answer: the ids the client will name topics by."""
        if header.api_version < TOPIC_IDS_METADATA_VERSION or len(frame) > METADATA_NAMES_MAX_BYTES:
            return
        try:
            header_size = response_header_size(METADATA, header.api_version, frame)
            # Only names are read: an answer with bytes past its schema still names its topics.
            found = decode_topic_partitions(
                header.api_version, memoryview(frame)[4 + header_size :], allow_trailing=True
            )
        except ProtocolError:
            return  # an answer it cannot read costs only the names
        seen = self._names_seen
        for name, topic in found.items():
            if topic.topic_id and topic.error_code == 0:
                if len(seen) >= MAX_TOPIC_NAMES:
                    seen.clear()
                seen[topic.topic_id] = name

    def _named(self, found: TopicBytes) -> list[tuple[str, int]]:
        for topic, _size in found:
            if type(topic) is not str:
                break
        else:
            # Every topic named already: no new list. (The type as a string: cast's argument is evaluated
            # on every call, and list[...] builds a new generic alias each time, 0.2 us per request.)
            return cast("list[tuple[str, int]]", found)
        named: list[tuple[str, int]] = []
        for topic, size in found:
            if not isinstance(topic, str):
                # A topic id the proxy has no name for is reported as the id, in the UUID's text form.
                topic = self._names_seen.get(topic) or self._topic_names(topic) or str(uuid.UUID(bytes=topic))
            named.append((topic, size))
        return named


class _StreamedProduce:
    """A Produce passing through: its topic breakdown, read from its pieces as they go by, is added when it
    ends (to the interval it ends in)."""

    __slots__ = ("_broker", "_client_id", "_recording", "_stream", "_user")

    def __init__(
        self, recording: UsageRecording, user: str, header: RequestHeader, size: int, broker: int | None
    ) -> None:
        self._recording, self._user, self._client_id = recording, user, header.client_id
        self._broker = broker
        self._stream = ProduceTopicStream(header.api_version, header.size, size)

    def feed(self, piece: memoryview) -> None:
        self._stream.feed(piece)

    def end(self) -> None:
        found = self._stream.result()
        if found is not None:  # else malformed: the broker refuses it, only the breakdown is lost
            self._recording.produced(self._user, self._client_id, found, self._broker)


class UsageRecorder(Filter):
    request_api_keys = _ALL_API_KEYS
    # Counting a request needs only its header; a large Produce's topic breakdown is observed as it passes.
    head_only_api_keys = _ALL_API_KEYS
    response_api_keys = frozenset({FETCH, METADATA})

    __slots__ = ("_broker", "_nodes", "_recording")

    def __init__(self, conn: ConnectionInfo, shared: UsageRecorderFactory) -> None:
        super().__init__(conn)
        self._recording = shared.recording
        self._nodes = shared.nodes
        self._broker: int | None = None

    def on_request(self, header: RequestHeader, frame: RequestFrame) -> RequestFrame:
        broker = self._broker
        if broker is None:
            broker = self._broker_node()
        # a FrameHead too (head_only_api_keys)
        _record_request(self._recording, self.conn.user, header, frame, broker)
        return frame

    def on_response(self, request: InFlight, frame: Frame) -> Frame:
        header = request.header
        if header.api_key == METADATA:
            self._recording.metadata_response(header, frame)
        else:
            broker = self._broker
            if broker is None:
                broker = self._broker_node()
            _record_fetch_response(self._recording, self.conn.user, header, frame, broker)
        return frame

    def _broker_node(self) -> int | None:
        """The broker this connection reaches, found once (a bootstrap connection's may be unknown)."""
        broker = self._broker
        if broker is None and self._nodes is not None:
            conn = self.conn
            broker = self._broker = self._nodes.node_of(conn.listener, conn.upstream_peer)
        return broker


class UsageRecorderFactory(FilterFactory):
    """The usage recording every connection's UsageRecorder adds to."""

    filter_class = UsageRecorder

    def __init__(self, recording: UsageRecording, nodes: BrokerNodes | None = None) -> None:
        self.recording = recording
        self.nodes = nodes

    def create(self, conn: ConnectionInfo) -> UsageRecorder:
        return UsageRecorder(conn, self)


def _request_of(
    recording: UsageRecording, user: str, header: RequestHeader, frame: Frame | FrameHead, broker: int | None
) -> None:
    recording.request(user, header, frame, broker)  # a subclass's own, as the compiled one runs it


def _fetch_response_of(
    recording: UsageRecording, user: str, header: RequestHeader, frame: Frame, broker: int | None
) -> None:
    recording.fetch_response(user, header, frame, broker)


# The filter's methods as written here: the references of the compiled ones, which hand them what they do
# not write out (a call before the connection's broker is known, which finds it or finds none; a Metadata
# answer; keywords; a subclass of the filter).
on_request_in_python = UsageRecorder.on_request
on_response_in_python = UsageRecorder.on_response
# The recording's `usage` as written here: the reference of the compiled one (`usage_of`).
usage_in_python = UsageRecording.usage

# What every connection's UsageRecorder runs per request and per Fetch answer: compiled where the install
# has it (proxy/filters/_usage_recording.c), else the recording's request and fetch_response, the
# references.
_record_request: Callable[[UsageRecording, str, RequestHeader, Frame | FrameHead, int | None], None] = (
    _request_of
)
_record_fetch_response: Callable[[UsageRecording, str, RequestHeader, Frame, int | None], None] = (
    _fetch_response_of
)
if not TYPE_CHECKING:  # the type checker reads the Python method; the compiled one takes the same
    try:
        from sluice.proxy.filters import _usage_recording
    except ImportError:  # built without a C compiler
        pass
    else:
        _usage_recording.bind(
            PRODUCE, FrameHead, produce_topics, ProtocolError, EntityUsage, _StreamedProduce, UsageRecording
        )
        _usage_recording.bind_fetch(FETCH, response_header_size, walked_fetch_topics, fetch_topic_bytes)
        _usage_recording.bind_slots(UsageRecording, UsageLedger, EntityUsage, RequestHeader)
        # `usage` too, which the client quotas' compiled charge of CPU time asks per charged answer
        UsageRecording.usage = _usage_recording.usage_method_of(UsageRecording)
        # the filter's own two methods too: a Python frame less per request and per Fetch answer
        UsageRecorder.on_request, UsageRecorder.on_response = _usage_recording.bind_recorder(
            UsageRecorder, on_request_in_python, on_response_in_python, InFlight, METADATA
        )
        _record_request = _usage_recording.record_request
        _record_fetch_response = _usage_recording.record_fetch_response
