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
from kafka.protocol.producer import ProduceRequest

from sluice.protocol.frames import FrameHead
from sluice.protocol.headers import encode_request_header, frame, parse_request_header
from sluice.proxy.filters import usage_recorder
from sluice.proxy.filters.usage_recorder import UsageRecording
from sluice.quota.usage_ledger import UsageLedger

SCENARIOS = 200
STEPS = 25
KNOWN, UNKNOWN = uuid.UUID(int=1), uuid.UUID(int=2)
NAMES = {KNOWN.bytes: "known"}
_Partition = ProduceRequest.TopicProduceData.PartitionProduceData


def _compiled() -> Any:
    compiled = usage_recorder._record_request
    assert compiled is not UsageRecording.request, "built without proxy/filters/_usage_recording.c"
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
        (sink.produce_bytes, dict(sink.requests), dict(sink.topics)),
        (overflow.entities, overflow.topics, overflow.bytes, sorted(overflow.refused, key=repr)),
        ledger.generation,
        None if cache is None else (cache[:3], type(cache[3]).__name__, cache[3] is ledger._sink),
        [
            (type(o).__name__, o._user, o._client_id, o._broker, o._stream._size)  # type: ignore[attr-defined]
            for o in world.observers
        ],
    )


class _World:
    def __init__(self, seed: int) -> None:
        rng = random.Random(seed)
        self.ledger = UsageLedger("x", max_entities=rng.randint(1, 4), max_topics=rng.randint(0, 4))
        self.recording = UsageRecording(self.ledger, NAMES.get)
        self.observers: list[object] = []
        self.drained: list[object] = []

    def request(self, record: Any, user: str, data: bytes, head: bool, broker: int | None) -> None:
        header = parse_request_header(data)
        if head:
            passing = FrameHead(memoryview(data)[:40], len(data))
            record(self.recording, user, header, passing, broker)
            self.observers.extend(passing.observers or [])
        else:
            record(self.recording, user, header, memoryview(data), broker)

    def drain(self) -> None:
        self.drained.append(self.ledger.drain(0, 1000).rows)


def test_the_compiled_recording_does_what_the_python_one_does_on_random_requests() -> None:
    compiled = _compiled()
    met = {"topics": 0, "overflow_topics": 0, "overflow_entities": 0, "observed": 0, "cut": 0}
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
            data, head = _request(rng)
            broker = rng.choice([None, 1, 2])
            reference.request(UsageRecording.request, user, data, head, broker)
            translated.request(compiled, user, data, head, broker)
            assert _snapshot(translated) == _snapshot(reference), seed
        met["topics"] += sum(len(u.topics) for u in reference.ledger._entities.values())
        met["overflow_topics"] += reference.ledger._overflow.topics
        met["overflow_entities"] += reference.ledger._overflow.entities
        met["observed"] += len(reference.observers)
    # the scenarios met topics kept, topics and entities refused, and requests passing through
    assert met["topics"] > 200 and met["overflow_topics"] > 50 and met["overflow_entities"] > 50
    assert met["observed"] > 100


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


def test_the_compiled_recording_leaks_nothing_on_any_path() -> None:
    # What stays allocated after many requests of every kind (sys.getallocatedblocks: objects of any type,
    # so a tuple or an entity leaked per call shows) is what one round of them leaves.
    compiled = _compiled()
    rng = random.Random(4)
    requests = [_request(rng) for _ in range(40)]
    ledger = UsageLedger("x", max_entities=2, max_topics=2)
    recording = UsageRecording(ledger, NAMES.get)

    def one_round() -> None:
        for n, (data, head) in enumerate(requests):
            header = parse_request_header(data)
            passing: object = FrameHead(memoryview(data)[:40], len(data)) if head else memoryview(data)
            compiled(recording, ["alice", "bob", "carol"][n % 3], header, passing, n % 2 or None)

    for _ in range(100):  # the interpreter's caches and free lists settle first
        one_round()
    before = sys.getallocatedblocks()
    for _ in range(300):
        one_round()
    assert sys.getallocatedblocks() - before < 100


def test_a_subclass_of_the_recording_runs_its_own_request() -> None:
    # Its usage() or _named() may be its own: the compiled one does not write them out for it.
    class Counting(UsageRecording):
        calls = 0

        def request(self, *args: Any) -> None:
            Counting.calls += 1
            super().request(*args)

    data = _produce(random.Random(5), 9, "pump")
    recording = Counting(UsageLedger("x"), NAMES.get)
    _compiled()(recording, "alice", parse_request_header(data), memoryview(data), 1)
    assert Counting.calls == 1 and recording.usage("alice", "pump").topics
