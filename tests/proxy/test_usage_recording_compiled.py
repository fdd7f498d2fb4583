"""proxy/filters/_usage_recording.c: the compiled `record_request` does what UsageRecording.request does.

Two ledgers, each with its recording, take the same random requests, one through each twin: Produce of
several versions naming topics by name and by id (known and unknown), cut short (its topics lost), passing
through as it arrives (a FrameHead, observed), other APIs and keys beyond any table; several users,
client-ids and brokers; ledgers so small that entities and topics overflow, drained now and then. After
every request both ledgers, their overflow, the recordings' caches and the observers a passing request got
are the same. The recorder's own tests (test_usage_recording, test_pipeline_pass_through's usage cases) run
the compiled one, as the proxy does where the install has it.
"""

from __future__ import annotations

import random
import sys
import uuid
from typing import Any, ClassVar

import pytest
from kafka.protocol.consumer.fetch import FetchResponse
from kafka.protocol.producer import ProduceRequest
from without_module import check_without

from sluice.protocol import response_walks
from sluice.protocol.api_keys import ApiKey
from sluice.protocol.codec_quirks import encode_body
from sluice.protocol.frames import FrameHead
from sluice.protocol.headers import (
    RequestHeader,
    encode_request_header,
    encode_response,
    frame,
    parse_request_header,
)
from sluice.protocol.node_endpoints import rewrite_node_endpoints
from sluice.proxy.filter_api.contract import InFlight
from sluice.proxy.filters import usage_recorder
from sluice.proxy.filters.usage_recorder import UsageRecording
from sluice.quota.usage_ledger import UsageLedger

SCENARIOS = 200
STEPS = 25
KNOWN, UNKNOWN = uuid.UUID(int=1), uuid.UUID(int=2)
NAMES = {KNOWN.bytes: "known"}
# What a recording may have seen in Metadata answers (its `_names_seen`): nothing; the known id; both ids,
# under other names; the known id with an empty name (which `_named`'s `or` passes over to the names given).
SEEN: list[dict[bytes, str]] = [
    {},
    {KNOWN.bytes: "known"},
    {KNOWN.bytes: "known-seen", UNKNOWN.bytes: "unknown-seen"},
    {KNOWN.bytes: ""},
]
_Partition = ProduceRequest.TopicProduceData.PartitionProduceData


def _compiled() -> Any:
    compiled = usage_recorder._record_request
    assert compiled is not usage_recorder._request_of, "built without proxy/filters/_usage_recording.c"
    return compiled


def test_this_install_runs_the_compiled_usage_recording() -> None:
    assert _compiled().__module__ == "sluice.proxy.filters._usage_recording"


def _produce(rng: random.Random, version: int, client_id: str | None) -> bytes:
    topics = []
    for name in rng.sample(["a", "b", "c", "d", "e"], rng.randint(1, 3)):
        partitions = [
            ProduceRequest.TopicProduceData.PartitionProduceData(
                index=i, records=b"\x01" * rng.randint(0, 90)
            )
            for i in range(rng.randint(1, 2))
        ]
        identity: dict[str, object] = (
            {"topic_id": rng.choice([KNOWN, UNKNOWN])} if version >= 13 else {"name": name}
        )
        topics.append(ProduceRequest.TopicProduceData(**identity, partition_data=partitions))
    request = ProduceRequest(version=version, acks=1, timeout_ms=1000, topic_data=topics)
    return frame(encode_request_header(0, version, 7, client_id) + bytes(request.encode(version=version)))


def _request(rng: random.Random) -> tuple[bytes, bool]:
    """A request's bytes, and whether it is handed over as a FrameHead (passing through)."""
    client_id = rng.choice(["pump", "pump", "other", None])
    kind = rng.choice(["produce", "produce", "produce", "cut", "head", "metadata", "unknown"])
    if kind in ("produce", "cut", "head"):
        data = _produce(rng, rng.choice([3, 7, 9, 12, 13]), client_id)
        if kind == "cut":  # inside the body: the header stays whole
            data = data[: rng.randint(4 + parse_request_header(data).size + 1, len(data) - 1)]
        return data, kind == "head"
    key = 3 if kind == "metadata" else rng.choice([500, 127, 32767])
    return frame(encode_request_header(key, 1, 8, client_id) + b"\x00\x00\x00\x00"), False


def _compiled_fetch() -> Any:
    compiled = usage_recorder._record_fetch_response
    assert compiled is not usage_recorder._fetch_response_of, "built without proxy/filters/_usage_recording.c"
    return compiled


def _fetch_answer(rng: random.Random, version: int) -> bytes:
    topic = FetchResponse.FetchableTopicResponse
    topics = []
    for name in rng.sample(["a", "b", "c", "d", "e"], rng.randint(0, 3)):
        partitions = [
            topic.PartitionData(partition_index=i, high_watermark=1, records=b"\x01" * rng.randint(0, 90))
            for i in range(rng.randint(1, 2))
        ]
        identity: dict[str, object] = (
            {"topic_id": rng.choice([KNOWN, UNKNOWN])} if version >= 13 else {"topic": name}
        )
        topics.append(topic(**identity, partitions=partitions))
    message = FetchResponse(version=version, throttle_time_ms=0, responses=topics)
    return encode_response(ApiKey.FETCH, version, 9, encode_body(message, version))


def _fetch(rng: random.Random) -> tuple[RequestHeader, bytes, bool]:
    """The header of a Fetch request, its answer (maybe cut, or too short for a header), and whether the
    NodeEndpoints rewrite walks it first and keeps its topics (v16+, as the proxy's does)."""
    version = rng.choice([4, 11, 12, 13, 15, 16, 17])
    client_id = rng.choice(["pump", "pump", "other", None])
    header = parse_request_header(frame(encode_request_header(1, version, 9, client_id)))
    data = _fetch_answer(rng, version)
    kind = rng.choice(["whole", "whole", "whole", "cut", "short"])
    if kind == "cut":
        data = data[: rng.randint(9, len(data) - 1)]
    elif kind == "short":
        data = data[: rng.randint(0, 7)]
    return header, data, kind == "whole" and version >= 16 and rng.random() < 0.7


def _snapshot(world: _World) -> object:
    ledger = world.ledger
    entities = {
        key: (u.produce_bytes, u.fetch_bytes, dict(u.requests), {k: list(v) for k, v in u.topics.items()})
        for key, u in ledger._entities.items()
    }
    sink, overflow = ledger._sink, ledger._overflow
    cache = world.recording._cache
    return (
        entities,
        (sink.produce_bytes, sink.fetch_bytes, dict(sink.requests), dict(sink.topics)),
        (overflow.entities, overflow.topics, overflow.bytes, sorted(overflow.refused, key=repr)),
        ledger.generation,
        None if cache is None else (cache[:3], type(cache[3]).__name__, cache[3] is ledger._sink),
        [
            (type(o).__name__, o._user, o._client_id, o._broker, o._stream._size)  # type: ignore[attr-defined]
            for o in world.observers
        ],
        world.walk_left,
    )


class _World:
    def __init__(self, seed: int) -> None:
        rng = random.Random(seed)
        self.ledger = UsageLedger("x", max_entities=rng.randint(1, 4), max_topics=rng.randint(0, 4))
        self.recording = UsageRecording(self.ledger, NAMES.get)
        self.recording._names_seen.update(rng.choice(SEEN))
        self.observers: list[object] = []
        self.walk_left = False
        self.drained: list[object] = []

    def request(self, record: Any, user: str, data: bytes, head: bool, broker: int | None) -> None:
        header = parse_request_header(data)
        if head:
            passing = FrameHead(memoryview(data)[:40], len(data))
            record(self.recording, user, header, passing, broker)
            self.observers.extend(passing.observers or [])
        else:
            record(self.recording, user, header, memoryview(data), broker)

    def fetch(
        self, record: Any, user: str, header: RequestHeader, data: bytes, walked: bool, broker: int | None
    ) -> None:
        answer = memoryview(data)
        if walked:  # the rewrite's walk, kept for the usage records (taken once, by whichever asks)
            rewrite_node_endpoints(1, header.api_version, answer, lambda *a: None, 4 + 5, True)
        record(self.recording, user, header, answer, broker)
        # the walk kept is taken (let go with the answer it holds) by whichever asks for it
        self.walk_left = response_walks._last_fetch[0] is not None
        response_walks._last_fetch = response_walks._NO_FETCH_WALK

    def drain(self) -> None:
        self.drained.append(self.ledger.drain(0, 1000).rows)


def test_the_compiled_recording_does_what_the_python_one_does_on_random_requests() -> None:
    compiled, compiled_fetch = _compiled(), _compiled_fetch()
    met = dict.fromkeys(
        (
            "topics",
            "overflow_topics",
            "overflow_entities",
            "observed",
            "fetched",
            "walked",
            "fetched_topic_bytes",
            "named_as_seen",
        ),
        0,
    )
    for seed in range(SCENARIOS):
        reference, translated = _World(seed), _World(seed)
        rng = random.Random(seed * 31)
        for _ in range(STEPS):
            if rng.random() < 0.08:
                reference.drain()
                translated.drain()
                assert translated.drained == reference.drained, seed
                continue
            user = rng.choice(["alice", "alice", "bob", ""])
            broker = rng.choice([None, 1, 2])
            if rng.random() < 0.3:
                header, answer, walked = _fetch(rng)
                reference.fetch(UsageRecording.fetch_response, user, header, answer, walked, broker)
                translated.fetch(compiled_fetch, user, header, answer, walked, broker)
                met["fetched"] += 1
                met["walked"] += walked
            else:
                data, head = _request(rng)
                reference.request(UsageRecording.request, user, data, head, broker)
                translated.request(compiled, user, data, head, broker)
            assert _snapshot(translated) == _snapshot(reference), seed
        met["topics"] += sum(len(u.topics) for u in reference.ledger._entities.values())
        met["overflow_topics"] += reference.ledger._overflow.topics
        met["overflow_entities"] += reference.ledger._overflow.entities
        met["observed"] += len(reference.observers)
        met["fetched_topic_bytes"] += sum(
            counters[1] for u in reference.ledger._entities.values() for counters in u.topics.values()
        )
        met["named_as_seen"] += sum(
            topic.endswith("-seen") for u in reference.ledger._entities.values() for topic, _ in u.topics
        )
    # the scenarios met topics kept, topics and entities refused, and requests passing through
    assert met["topics"] > 200 and met["overflow_topics"] > 50 and met["overflow_entities"] > 50
    assert met["observed"] > 100
    # Fetch answers, some walked by the rewrite first, their topics' bytes counted
    assert met["fetched"] > 1000 and met["walked"] > 100 and met["fetched_topic_bytes"] > 1000
    # topic ids named by what the recording saw in Metadata answers
    assert met["named_as_seen"] > 20


def test_topic_ids_are_named_without_the_pythons_named(monkeypatch: pytest.MonkeyPatch) -> None:
    # A Fetch v13+ answer names its topics by id: the compiled record names them itself (no Python frame per
    # answer), as `_named` does: by what a Metadata answer named them, else by the names given, else the id
    # written out (an empty name counts as none, as `or` has it).
    compiled_fetch = _compiled_fetch()
    calls: list[object] = []
    python_named = UsageRecording._named

    def counted(self: UsageRecording, found: Any) -> list[tuple[str, int]]:
        calls.append(found)
        return python_named(self, found)

    monkeypatch.setattr(UsageRecording, "_named", counted)
    header = parse_request_header(frame(encode_request_header(1, 16, 9, "pump")))
    answer = encode_response(ApiKey.FETCH, 16, 9, encode_body(_fetch_message(), 16))
    for seen, given, topics in (
        ({KNOWN.bytes: "orders", UNKNOWN.bytes: "payments"}, {}, {"orders", "payments"}),
        ({KNOWN.bytes: "orders"}, {}, {"orders", str(UNKNOWN)}),
        ({KNOWN.bytes: "orders", UNKNOWN.bytes: ""}, {UNKNOWN.bytes: "given"}, {"orders", "given"}),
        ({}, NAMES, {"known", str(UNKNOWN)}),
    ):
        recording = UsageRecording(UsageLedger("x"), given.get)
        recording._names_seen.update(seen)
        compiled_fetch(recording, "alice", header, memoryview(answer), 1)
        usage = recording.usage("alice", "pump")
        assert {topic for topic, _broker in usage.topics} == topics
        assert sorted(counters[1] for counters in usage.topics.values()) == [3, 5]
    assert calls == []


def test_the_names_seen_are_read_anew_for_each_id_as_the_python_reads_them() -> None:
    # Names given that rebind the recording's names seen (nothing in the proxy does): the next id is looked
    # up in the new dict by both twins.
    header = parse_request_header(frame(encode_request_header(1, 16, 9, "pump")))
    answer = encode_response(ApiKey.FETCH, 16, 9, encode_body(_fetch_message(), 16))
    outcomes = []
    for record in (UsageRecording.fetch_response, _compiled_fetch()):
        recording = UsageRecording(UsageLedger("x"))

        def rebinding(topic_id: bytes, recording: UsageRecording = recording) -> str:
            recording._names_seen = {UNKNOWN.bytes: "rebound"}
            return "given"

        recording._topic_names = rebinding
        record(recording, "alice", header, memoryview(answer), 1)
        outcomes.append({k: list(v) for k, v in recording.usage("alice", "pump").topics.items()})
    assert outcomes[0] == outcomes[1] == {("given", 1): [0, 3], ("rebound", 1): [0, 5]}


def _fetch_message() -> Any:
    """A Fetch v16 answer's body: two topics by id (KNOWN with 3 record bytes, UNKNOWN with 5)."""
    topic = FetchResponse.FetchableTopicResponse
    partition = topic.PartitionData
    topics = [
        topic(topic_id=topic_id, partitions=[partition(partition_index=0, records=b"r" * size)])
        for topic_id, size in ((KNOWN, 3), (UNKNOWN, 5))
    ]
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=topics)


def test_the_compiled_recording_keeps_no_reference_to_what_passed() -> None:
    compiled = _compiled()
    ledger = UsageLedger("x")
    recording = UsageRecording(ledger, NAMES.get)
    data = _produce(random.Random(1), 9, "pump")
    header = parse_request_header(data)
    view = memoryview(data)
    compiled(recording, "alice", header, view, 1)  # the entity and its topics exist from here on
    usage = recording.usage("alice", "pump")
    (topic, _broker), *_ = usage.topics
    watched = (header, view, recording, ledger, usage, header.client_id, topic, usage.requests, usage.topics)
    before = [sys.getrefcount(x) for x in watched]
    for _ in range(300):
        compiled(recording, "alice", header, view, 1)
    assert [sys.getrefcount(x) for x in watched] == before


def test_only_a_protocol_error_of_the_walk_costs_just_the_topics() -> None:
    # Any other error of the walk is a bug, raised as the Python raises it (bound again for this test).
    from sluice.protocol.errors import ProtocolError
    from sluice.protocol.produce_stream import produce_topics
    from sluice.proxy.filters import _usage_recording
    from sluice.quota.usage_ledger import EntityUsage

    def broken(frame: object, header: object) -> object:
        raise ValueError("a bug in the walk")

    compiled = _compiled()
    data = _produce(random.Random(2), 9, "pump")
    recording = UsageRecording(UsageLedger("x"), NAMES.get)
    bound = (usage_recorder.PRODUCE, FrameHead, produce_topics, ProtocolError, EntityUsage)
    _usage_recording.bind(*bound[:2], broken, *bound[3:], usage_recorder._StreamedProduce, UsageRecording)
    try:
        with pytest.raises(ValueError, match="a bug in the walk"):
            compiled(recording, "alice", parse_request_header(data), memoryview(data), 1)
    finally:
        _usage_recording.bind(*bound, usage_recorder._StreamedProduce, UsageRecording)
    compiled(recording, "alice", parse_request_header(data), memoryview(data), 1)  # bound as before
    assert recording.usage("alice", "pump").topics


def test_a_list_of_topics_changed_while_it_is_added_is_read_as_the_python_reads_it() -> None:
    # A broker whose hash changes the list under the loop (nothing the proxy passes does): the compiled
    # loop reads each item anew, as Python's for loop does, and fails on the one that is no pair as the
    # Python fails, after adding the ones before it.
    from sluice.protocol.errors import ProtocolError
    from sluice.protocol.produce_stream import produce_topics
    from sluice.proxy.filters import _usage_recording
    from sluice.quota.usage_ledger import EntityUsage

    class Meddling(int):
        found: ClassVar[list[object]] = []

        def __hash__(self) -> int:
            if len(self.found) > 1:
                self.found[1] = 12345678
            return int.__hash__(self)

    def walk(frame: object, header: object) -> list[object]:
        Meddling.found = [("a", 10), ("b", 20)]
        return Meddling.found

    data = _produce(random.Random(3), 9, "pump")
    outcomes = []
    for record in (UsageRecording.request, _compiled()):
        recording = UsageRecording(UsageLedger("x"), NAMES.get)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(usage_recorder, "produce_topics", walk)
            bound = (usage_recorder.PRODUCE, FrameHead, walk, ProtocolError, EntityUsage)
            _usage_recording.bind(*bound, usage_recorder._StreamedProduce, UsageRecording)
            try:
                with pytest.raises(TypeError):
                    record(recording, "alice", parse_request_header(data), memoryview(data), Meddling(1))
            finally:
                _usage_recording.bind(
                    *bound[:2], produce_topics, *bound[3:], usage_recorder._StreamedProduce, UsageRecording
                )
        outcomes.append({k: list(v) for k, v in recording.usage("alice", "pump").topics.items()})
    assert outcomes[0] == outcomes[1] == {("a", 1): [10, 0]}


def test_a_list_of_ids_changed_while_they_are_named_is_read_as_the_python_reads_it() -> None:
    # A key of _names_seen equal to an id (nothing a Metadata answer stores: its ids are bytes) whose
    # comparison empties the list being named: the compiled loop holds the pair it names and reads the
    # list's length anew, as Python's for loop does, and names what the Python names.
    from sluice.protocol.errors import ProtocolError
    from sluice.protocol.produce_stream import produce_topics
    from sluice.proxy.filters import _usage_recording
    from sluice.quota.usage_ledger import EntityUsage

    class Meddling:
        found: ClassVar[list[object]] = []

        def __hash__(self) -> int:
            return hash(KNOWN.bytes)

        def __eq__(self, other: object) -> bool:
            self.found.clear()
            return False

    def walk(frame: object, header: object) -> list[object]:
        Meddling.found = [(KNOWN.bytes, 20), (UNKNOWN.bytes, 10)]
        return Meddling.found

    data = _produce(random.Random(3), 9, "pump")
    outcomes = []
    for record in (UsageRecording.request, _compiled()):
        recording = UsageRecording(UsageLedger("x"), NAMES.get)
        recording._names_seen.update({UNKNOWN.bytes: "unknown", Meddling(): "meddling"})  # type: ignore[dict-item]
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(usage_recorder, "produce_topics", walk)
            bound = (usage_recorder.PRODUCE, FrameHead, walk, ProtocolError, EntityUsage)
            _usage_recording.bind(*bound, usage_recorder._StreamedProduce, UsageRecording)
            try:
                record(recording, "alice", parse_request_header(data), memoryview(data), 1)
            finally:
                _usage_recording.bind(
                    *bound[:2], produce_topics, *bound[3:], usage_recorder._StreamedProduce, UsageRecording
                )
        outcomes.append({k: list(v) for k, v in recording.usage("alice", "pump").topics.items()})
    # the first id named by the names given (the key's comparison said no), and the list emptied meanwhile
    assert outcomes[0] == outcomes[1] == {("known", 1): [20, 0]}


def test_the_compiled_recording_leaks_nothing_on_any_path() -> None:
    # What stays allocated after many requests of every kind (sys.getallocatedblocks: objects of any type,
    # so a tuple or an entity leaked per call shows) is what one round of them leaves.
    compiled = _compiled()
    rng = random.Random(4)
    requests = [_request(rng) for _ in range(40)]
    ledger = UsageLedger("x", max_entities=2, max_topics=2)
    recording = UsageRecording(ledger, NAMES.get)
    recording._names_seen[KNOWN.bytes] = "known"  # ids named by what it saw, and by the names given

    compiled_fetch = _compiled_fetch()
    answers = [_fetch(rng) for _ in range(40)]  # whole, cut and short, some walked by the rewrite first

    def one_round() -> None:
        for n, (data, head) in enumerate(requests):
            header = parse_request_header(data)
            passing: object = FrameHead(memoryview(data)[:40], len(data)) if head else memoryview(data)
            compiled(recording, ["alice", "bob", "carol"][n % 3], header, passing, n % 2 or None)
        for n, (header, data, walked) in enumerate(answers):
            answer = memoryview(data)
            if walked:
                rewrite_node_endpoints(1, header.api_version, answer, lambda *a: None, 9, True)
            compiled_fetch(recording, ["alice", "bob"][n % 2], header, answer, n % 2 or None)

    for _ in range(100):  # the interpreter's caches and free lists settle first
        one_round()
    before = sys.getallocatedblocks()
    # The small ints every answer passes through (a header's size 4 or 5, a body's start 8 or 9, the
    # versions) are shared objects, whose references a leak would raise (their blocks were allocated once).
    small = [4, 5, 8, 9, *sorted({header.api_version for header, _, _ in answers})]
    shared = [sys.getrefcount(n) for n in small]
    for _ in range(300):
        one_round()
    assert sys.getallocatedblocks() - before < 100
    assert all(abs(sys.getrefcount(n) - count) < 1000 for n, count in zip(small, shared, strict=True))


@pytest.mark.parametrize("install", ["compiled", "python"])
def test_a_subclass_of_the_recording_runs_its_own_request_and_fetch_response(install: str) -> None:
    # Its usage() or _named() may be its own: the compiled one does not write them out for it, and an install
    # without it calls the recording's methods, its own among them.
    record, record_fetch = (
        (_compiled(), _compiled_fetch())
        if install == "compiled"
        else (usage_recorder._request_of, usage_recorder._fetch_response_of)
    )

    class Counting(UsageRecording):
        calls = 0

        def request(self, *args: Any) -> None:
            Counting.calls += 1
            super().request(*args)

        def fetch_response(self, *args: Any) -> None:
            Counting.calls += 10
            super().fetch_response(*args)

    data = _produce(random.Random(5), 9, "pump")
    recording = Counting(UsageLedger("x"), NAMES.get)
    record(recording, "alice", parse_request_header(data), memoryview(data), 1)
    assert Counting.calls == 1 and recording.usage("alice", "pump").topics
    header = parse_request_header(frame(encode_request_header(1, 12, 9, "pump")))
    record_fetch(recording, "alice", header, memoryview(_fetch_answer(random.Random(6), 12)), 1)
    assert Counting.calls == 11 and recording.usage("alice", "pump").fetch_bytes


def test_an_install_without_the_compiled_recording_runs_the_recordings_own_methods() -> None:
    # What usage_recorder binds when the extension cannot be imported: the fallbacks the subclass test above
    # runs (a subprocess, so that this process keeps its compiled module).
    check_without(
        "sluice.proxy.filters._usage_recording",
        "from sluice.proxy.filters import usage_recorder as u\n"
        "assert u._record_request is u._request_of and u._record_fetch_response is u._fetch_response_of\n"
        "assert u.UsageRecording.usage is u.usage_in_python\n",
    )


def test_the_recordings_usage_is_compiled_and_answers_as_the_python_one() -> None:
    # A method of the class (the client quotas' compiled charge of CPU time calls it with no frame), which
    # finds the same entity and keeps the same cache as the reference, over drains and several entities.
    compiled = UsageRecording.usage
    assert type(compiled).__name__ == "method_descriptor" and compiled is not usage_recorder.usage_in_python
    rng = random.Random(11)
    twins = [UsageRecording(UsageLedger("x", max_entities=2)) for _ in range(2)]
    methods = (compiled, usage_recorder.usage_in_python)
    for step in range(300):
        user, client_id = rng.choice(["alice", "bob"]), rng.choice(["pump", "other", None])
        before = [recording._cache for recording in twins]
        got = [method(recording, user, client_id) for method, recording in zip(methods, twins, strict=True)]
        assert [g is r._ledger.entity(user, client_id) for g, r in zip(got, twins, strict=True)] == [True] * 2
        caches = [recording._cache for recording in twins]
        assert caches[0] is not None and caches[1] is not None
        assert caches[0][:3] == caches[1][:3] == (twins[0]._ledger.generation, user, client_id)
        assert [c[3] is g for c, g in zip(caches, got, strict=True)] == [True, True]
        kept = [b is not None and b[:3] == c[:3] for b, c in zip(before, caches, strict=True)]
        assert kept[0] == kept[1] and (not kept[0] or before[0][3] is got[0]), step  # a hit: the same one
        if rng.random() < 0.1:
            for recording in twins:
                recording._ledger.drain(0, 1000)
    with pytest.raises(TypeError, match="takes 2 arguments"):
        compiled(twins[0], "alice")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        compiled(object(), "alice", None)  # type: ignore[arg-type]
    for method in methods:  # both take their arguments by position only
        with pytest.raises(TypeError):
            method(twins[0], "alice", client_id=None)  # type: ignore[call-arg]


def test_keywords_and_errors_other_than_a_protocol_error_are_the_pythons() -> None:
    compiled, compiled_fetch = _compiled(), _compiled_fetch()
    data = _produce(random.Random(7), 9, "pump")
    header = parse_request_header(frame(encode_request_header(1, 12, 9, "pump")))
    answer = memoryview(_fetch_answer(random.Random(8), 12))
    snapshots = []
    for record, fetched in (
        (UsageRecording.request, UsageRecording.fetch_response),
        (compiled, compiled_fetch),
    ):
        world = _World(9)
        record(world.recording, "alice", parse_request_header(data), memoryview(data), broker=2)
        fetched(world.recording, "alice", header, answer, broker=2)
        failures = []
        for bad in ("a text long enough", None, 12):  # no frame: what fails is raised, not swallowed
            with pytest.raises(Exception) as failure:
                fetched(world.recording, "alice", header, bad, 1)
            failures.append((type(failure.value), str(failure.value)))
        snapshots.append((_snapshot(world), failures))
    assert snapshots[0] == snapshots[1]
    assert snapshots[0][1][0][0] is TypeError


class _Nodes:
    """The broker a connection reaches, by its listener: `broker-N` is N, the bootstrap's unknown."""

    def node_of(self, listener: str, upstream_peer: str) -> int | None:
        return int(listener[7:]) if listener.startswith("broker-") else None


class _Conn:
    def __init__(self, listener: str) -> None:
        self.user, self.listener, self.upstream_peer = "", listener, "127.0.0.1:9"


def test_the_compiled_filter_methods_do_what_the_python_ones_do_on_random_traffic() -> None:
    """UsageRecorder's compiled on_request and on_response (the recorder's call into the recording, its
    broker found by the Python on a connection's first call) against its Python methods, on the traffic of
    the test above, over connections to brokers and to the bootstrap (whose broker is unknown)."""
    assert usage_recorder.UsageRecorder.on_request is not usage_recorder.on_request_in_python
    methods = {
        "compiled": (usage_recorder.UsageRecorder.on_request, usage_recorder.UsageRecorder.on_response),
        "python": (usage_recorder.on_request_in_python, usage_recorder.on_response_in_python),
    }
    for seed in range(SCENARIOS // 2):
        worlds = {name: _World(seed) for name in methods}
        filters: dict[tuple[str, str], Any] = {}
        rng = random.Random(seed * 37)
        for _ in range(STEPS):
            user = rng.choice(["alice", "alice", "bob", ""])
            listener = rng.choice(["broker-1", "broker-1", "broker-2", "bootstrap"])
            head = header = answer = walked = data = None
            if rng.random() < 0.3:
                header, answer, walked = _fetch(rng)
            else:
                data, head = _request(rng)
            for name, (on_request, on_response) in methods.items():
                world = worlds[name]
                recorder = filters.get((name, listener))
                if recorder is None:
                    factory = usage_recorder.UsageRecorderFactory(world.recording, _Nodes())  # type: ignore[arg-type]
                    recorder = filters[(name, listener)] = factory.create(_Conn(listener))  # type: ignore[arg-type]
                recorder.conn.user = user

                def request(_r: Any, _u: str, h: RequestHeader, f: Any, _b: Any, via: Any = recorder) -> None:
                    assert on_request(via, h, f) is f  # noqa: B023 (called at once, in this iteration)

                def response(
                    _r: Any, _u: str, h: RequestHeader, f: Any, _b: Any, via: Any = recorder
                ) -> None:
                    assert on_response(via, InFlight(h), f) is f  # noqa: B023

                if data is None:
                    world.fetch(response, user, header, answer, walked, None)
                else:
                    world.request(request, user, data, head, None)
            assert _snapshot(worlds["compiled"]) == _snapshot(worlds["python"]), seed


def test_the_compiled_filter_methods_hand_the_rest_to_the_python() -> None:
    """A connection's first request (its broker not yet found), a Metadata answer and keywords go to the
    Python methods; the requests and Fetch answers after them do not."""
    calls: list[str] = []
    recorder_class = usage_recorder.UsageRecorder

    def request(f: Any, header: RequestHeader, frame: Any) -> Any:
        calls.append("request")
        return usage_recorder.on_request_in_python(f, header, frame)

    def response(f: Any, request: InFlight, frame: Any) -> Any:
        calls.append("response")
        return usage_recorder.on_response_in_python(f, request, frame)

    from sluice.proxy.filters import _usage_recording  # type: ignore[attr-defined]

    on_request, on_response = _usage_recording.bind_recorder(
        recorder_class, request, response, InFlight, usage_recorder.METADATA
    )
    try:
        recording = UsageRecording(UsageLedger("x"), NAMES.get)
        recorder = usage_recorder.UsageRecorderFactory(recording, _Nodes()).create(_Conn("broker-1"))  # type: ignore[arg-type]
        rng = random.Random(5)
        data = _produce(rng, 9, "pump")
        header = parse_request_header(data)
        fetch_header, answer, _walked = _fetch(random.Random(3))
        for _ in range(3):
            on_request(recorder, header, data)
            on_response(recorder, InFlight(fetch_header), answer)
        assert calls == ["request"]
        metadata = parse_request_header(frame(encode_request_header(3, 1, 8, "pump") + b"\x00\x00\x00\x00"))
        on_response(recorder, InFlight(metadata), encode_response(3, 1, 8, b"\x00" * 8))
        on_request(recorder, header, frame=data)
        with pytest.raises(TypeError):  # the Python method's refusal of a keyword it does not take
            on_response(recorder, InFlight(fetch_header), answer, extra=1)
        with pytest.raises(TypeError):
            on_request(recorder, header, data, extra=1)
        assert calls == ["request", "response", "request"]
        # an in-flight entry too short for its header: read by name, as the Python reads it
        with pytest.raises(IndexError):
            on_response(recorder, tuple.__new__(InFlight, ()), answer)
        with pytest.raises(IndexError):
            usage_recorder.on_response_in_python(recorder, tuple.__new__(InFlight, ()), answer)

        class OwnRecorder(recorder_class):  # type: ignore[misc, valid-type]
            __slots__ = ()

        own = OwnRecorder(recorder.conn, usage_recorder.UsageRecorderFactory(recording, _Nodes()))
        own._broker = 1
        before = len(calls)
        on_request(own, header, data)  # a subclass: its methods may be its own, so the Python's run
        assert calls[before:] == ["request"]
    finally:
        _usage_recording.bind_recorder(
            recorder_class,
            usage_recorder.on_request_in_python,
            usage_recorder.on_response_in_python,
            InFlight,
            usage_recorder.METADATA,
        )
