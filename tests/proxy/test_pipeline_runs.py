"""proxy/data_path/_pipeline_runs.c: the request pipeline's compiled hot loops do what its Python ones do.

Two pipelines, one on each twin of the runs (`forward_plain` and `answers_plain` against RequestPipeline's
`_forward_plain_in_python` and `_answers_plain_in_python`), take the same random traffic: reads of
pipelined requests (Produce with acks 1 and 0, small and large enough to count toward a broker's load,
Metadata, an unknown API key) and of answers (in order, out of order, to acks=0 requests, cut short), through
scripted filters that pass, rewrite, throttle, answer, defer, close and refuse, beside a gate that mutes and
a broker share that fills. Every call the collaborators see, what each pipeline forwards, its state and
each error are the same. The pipeline's own tests run on both twins too (tests/proxy/conftest.py's
`both_runs`); what the proxy runs is the compiled one, where the install has it.
"""

from __future__ import annotations

import random
import struct
import sys
from collections import Counter
from typing import Any

import pytest
from twin_outcomes import shape

from sluice.protocol.errors import ProtocolError
from sluice.protocol.frames import FrameSplitter
from sluice.protocol.headers import RequestHeader, encode_request, encode_response
from sluice.proxy.data_path import request_pipeline
from sluice.proxy.data_path.broker_load import COUNTED_MIN_BYTES
from sluice.proxy.data_path.filter_runs import FilterRuns
from sluice.proxy.data_path.request_pipeline import ACKS0_REMEMBERED, CloseConnection, RequestPipeline
from sluice.proxy.filter_api.contract import (
    TABLE_SIZE,
    Answer,
    Close,
    Defer,
    EntryKind,
    Forward,
    InFlight,
    Respond,
)
from sluice.proxy.observability.metrics import ProxyMetrics

SCENARIOS = 300
STEPS = 12
ACKS0_WARM_UP = ACKS0_REMEMBERED + 10


def _compiled() -> tuple[Any, Any]:
    forward, answers = request_pipeline._forward_plain, request_pipeline._answers_plain
    assert forward is not RequestPipeline._forward_plain_in_python, "built without _pipeline_runs.c"
    assert answers is not RequestPipeline._answers_plain_in_python, "built without _pipeline_runs.c"
    return forward, answers


def test_this_install_runs_the_compiled_pipeline_runs() -> None:
    forward, answers = _compiled()
    assert forward.__module__ == answers.__module__ == "sluice.proxy.data_path._pipeline_runs"


# ---- the collaborators, logging what they are asked -------------------------------------------------


class _Script:
    """Random choices that both worlds make alike (one seed each, the same)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)


class _Filter:
    def __init__(self, name: str, log: list[object], script: _Script) -> None:
        self._name, self._log, self._rng = name, log, script.rng

    def on_request(self, header: RequestHeader, frame: Any) -> Any:
        self._log.append((self._name, "request", header.correlation_id, shape(frame)))
        kind = self._rng.choice(["same"] * 12 + ["bytes", "forward", "answer", "defer", "close", "refuse"])
        if kind == "same":
            return frame
        if kind == "bytes":
            return bytes(frame)  # rewritten: not the common case
        if kind == "forward":
            return Forward(frame, self._rng.choice([0, 5]))
        if kind == "answer":
            answer = encode_response(header.api_key, header.api_version, header.correlation_id, b"made")
            return Answer(answer, self._rng.choice([0, 3]), self._rng.choice([0, 7]))
        if kind == "defer":
            return Defer(f"ready-{header.correlation_id}")
        if kind == "close":
            return Close("scripted")
        raise ProtocolError("scripted_refusal", f"request {header.correlation_id}")

    def on_response(self, request: InFlight, frame: Any) -> Any:
        self._log.append((self._name, "response", request.header.correlation_id, shape(frame)))
        kind = self._rng.choice(["same"] * 10 + ["bytes", "respond", "refuse"])
        if kind == "same":
            return frame
        if kind == "bytes":
            return bytes(frame) + b"!"
        if kind == "respond":
            return Respond(frame, self._rng.choice([0, 4, -1, 2.5]), self._rng.choice([0, 6]))
        raise ProtocolError("scripted_refusal", f"answer {request.header.correlation_id}")


class _Gate:
    def __init__(self, log: list[object]) -> None:
        self._log = log
        self.muted = False

    def expect_response(self) -> None:
        self._log.append(("gate", "expect_response"))

    def response_sent(self) -> None:
        self._log.append(("gate", "response_sent"))


class _Sink:
    def __init__(self, log: list[object]) -> None:
        self._log = log

    def send_response(self, frame: Any, delay_ms: int) -> None:
        self._log.append(("sink", shape(frame), shape(delay_ms)))

    def deliver_reply(self, reply: object, body: bytes) -> None:
        self._log.append(("reply", reply, body))


class _Counters:
    def __init__(self, log: list[object]) -> None:
        self._log = log

    def count_request(self, api_key: int, size: int) -> None:
        self._log.append(("count_request", shape(api_key), size))

    def count_response(self, api_key: int, size: int) -> None:
        self._log.append(("count_response", shape(api_key), size))


class _Share:
    """A broker share with room for some requests, then none until given back."""

    def __init__(self, log: list[object], script: _Script) -> None:
        self._log, self._rng = log, script.rng

    def take(self, size: int) -> bool:
        taken = self._rng.random() < 0.8
        self._log.append(("take", size, taken))
        return taken

    def fits(self, size: int) -> bool:
        return True

    def give(self, size: int) -> None:
        self._log.append(("give", size))

    def wait(self, size: int) -> object:
        self._log.append(("wait", size))
        return f"room-{size}"

    def close(self, in_flight: int) -> None:
        self._log.append(("share_close", in_flight))


class _Runs(FilterRuns):
    """The runs of one chain of scripted filters, which no request passes through as it arrives."""

    __slots__ = ()

    def may_stream(self, key: int) -> bool:
        return False


class _Direct(_Filter):
    """One scripted filter standing for a whole chain's runs (a deferred request goes through it again)."""

    def on_request(self, header: RequestHeader, frame: Any, deferred: object = None) -> Any:
        return super().on_request(header, frame)

    def may_stream(self, key: int) -> bool:
        return False


class _World:
    def __init__(self, seed: int, compiled: bool) -> None:
        self.log: list[object] = []
        script = _Script(seed)
        self._script = script
        self._compiled = compiled
        filters = tuple(_Filter(f"f{i}", self.log, script) for i in range(script.rng.randint(0, 3)))
        self.gate = _Gate(self.log)
        one = bytes(TABLE_SIZE + 1)
        runs: object = _Runs(
            self._mute, one, (filters,), one, (filters,), one, (filters,), one, lambda: False
        )
        if script.rng.random() < 0.3:
            # One filter as the whole chain: its effects reach the pipeline as they are (a throttle of 0 in a
            # Forward, a delay of 0 or less in a Respond), which the chain's runs would have taken off.
            runs = _Direct("direct", self.log, script)
        # The proxy's own metrics (whose counting the compiled runs write out), or a stand-in logging calls
        self.metrics: ProxyMetrics | _Counters = (
            ProxyMetrics() if script.rng.random() < 0.5 else _Counters(self.log)
        )
        self.pipeline = RequestPipeline(
            runs,  # type: ignore[arg-type]  # (what the pipeline calls of its filters)
            self.gate,
            _Sink(self.log),
            self.metrics,
            FrameSplitter(),
            FrameSplitter(),
        )
        if script.rng.random() < 0.5:
            self.pipeline.load = _Share(self.log, script)
        self.pipeline.upstream_ready()

    def _mute(self, ms: int) -> None:
        self.log.append(("mute", ms))
        self.gate.muted = True

    def act(self, name: str, *args: Any) -> None:
        """One call on the pipeline, on this world's twin of the runs; what it did, logged."""
        saved = request_pipeline._forward_plain, request_pipeline._answers_plain
        if not self._compiled:
            request_pipeline._forward_plain = RequestPipeline._forward_plain_in_python
            request_pipeline._answers_plain = RequestPipeline._answers_plain_in_python
        try:
            returned = getattr(self.pipeline, name)(*args)
            self.log.append(("returned", name, shape(returned)))
        except (ProtocolError, CloseConnection) as exc:
            self.log.append(("raised", name, type(exc).__name__, str(exc)))
        finally:
            request_pipeline._forward_plain, request_pipeline._answers_plain = saved
        pipeline = self.pipeline
        self.log.append(
            (
                "after",
                shape(pipeline.outgoing),
                pipeline.state.value,
                pipeline.in_flight,
                pipeline.waiting,
                [
                    (shape(entry.header), entry.kind.value, entry.throttle_ms, entry.load)
                    for entry in pipeline._in_flight
                ],
            )
        )
        metrics = self.metrics
        if isinstance(metrics, ProxyMetrics):
            counted = (metrics.requests, metrics.request_bytes, metrics.responses, metrics.response_bytes)
            self.log.append(("counted", [dict(enumerate(c)) for c in map(list, counted)]))
            if any(metrics.requests):
                _MET["counted"] += 1
        pipeline.outgoing = []


def _produce(correlation_id: int, acks: int, large: bool) -> bytes:
    padding = b"r" * (COUNTED_MIN_BYTES if large else 40)
    body = b"\x00" + struct.pack(">hi", acks, 30_000) + b"\x01\x00" + padding
    return encode_request(0, 9, correlation_id, "client", body)


def _request(rng: random.Random, correlation_id: int) -> bytes:
    kind = rng.choice(["produce", "produce", "produce0", "large", "metadata", "unknown"])
    if kind == "produce":
        return _produce(correlation_id, 1, False)
    if kind == "produce0":
        return _produce(correlation_id, 0, False)
    if kind == "large":
        return _produce(correlation_id, rng.choice([1, 0]), True)
    if kind == "metadata":
        return encode_request(3, 1, correlation_id, "client", b"\xff\xff\xff\xff")
    # an API no table names: counted in the metrics' last slot, or its own just below it
    return encode_request(rng.choice([500, 126, 127, 128, 32767]), 0, correlation_id, "client", b"")


def _step(rng: random.Random, reference: _World, next_id: int) -> tuple[str, list[bytes] | None, int]:
    """The next call of a scenario, the same for both worlds: answers are made for what the reference
    pipeline has in flight (mostly in order, now and then another id or a frame cut short)."""
    action = rng.choice(["client", "client", "broker", "broker", "broker", "release", "resume", "unmute"])
    if action == "client":
        frames = []
        for _ in range(rng.randint(1, 6)):
            frames.append(_request(rng, next_id))
            next_id += 1
        return "client_frames", frames, next_id
    if action == "broker":
        waiting = [
            e.header.correlation_id for e in reference.pipeline._in_flight if e.kind is EntryKind.FORWARDED
        ]
        answers = []
        for correlation_id in waiting[: rng.randint(1, 5)]:
            if rng.random() < 0.05:
                correlation_id = rng.choice([correlation_id + 1, next_id - 1])  # another request's id
            answer = encode_response(0, 9, correlation_id, b"answer")
            answers.append(answer[:7] if rng.random() < 0.02 else answer)
        return "broker_frames", answers, next_id
    return action, None, next_id


def _act(world: _World, action: str, frames: list[bytes] | None) -> None:
    if action == "unmute":
        world.gate.muted = False
        world.log.append(("unmuted",))
    elif frames is None:
        world.act(action)
    else:
        world.act(action, [memoryview(frame).toreadonly() for frame in frames])


@pytest.mark.parametrize("chunk", range(SCENARIOS // 50))
def test_the_compiled_runs_do_what_the_python_runs_do_on_random_traffic(chunk: int) -> None:
    _compiled()
    for seed in range(chunk * 50, (chunk + 1) * 50):
        reference, translated = _World(seed, compiled=False), _World(seed, compiled=True)
        rng, next_id = random.Random(seed * 7919), 0
        for _ in range(STEPS):
            action, frames, next_id = _step(rng, reference, next_id)
            _act(reference, action, frames)
            _act(translated, action, frames)
            assert translated.log == reference.log, seed
        _MET.update(entry[0] for entry in reference.log if isinstance(entry, tuple))


# What the scenarios met, over all of them: the runs' common cases and their ends, not only refusals.
_MET: Counter[object] = Counter()


def test_the_random_traffic_meets_every_case_the_runs_handle() -> None:
    _MET.clear()
    for chunk in range(SCENARIOS // 50):
        test_the_compiled_runs_do_what_the_python_runs_do_on_random_traffic(chunk)
    # answers sent on, throttled ones among them; requests counted, forwarded, held by a mute and a full
    # broker share, given back; errors of both sides (refusals, mismatched ids, frames cut short)
    assert _MET["sink"] > 300 and _MET["count_request"] > 700 and _MET["mute"] > 50
    assert _MET["gate"] > 50 and _MET["take"] > 60 and _MET["give"] > 40 and _MET["wait"] > 10
    assert _MET["raised"] > 100 and _MET["returned"] > 1400
    assert _MET["counted"] > 500  # the proxy's own metrics counted (the compiled runs write that out)


class _Quiet:
    """Collaborators that keep nothing: a pipeline's own allocations are what a leak test sees."""

    muted = False

    def expect_response(self) -> None:
        pass

    def response_sent(self) -> None:
        pass

    def send_response(self, frame: Any, delay_ms: int) -> None:
        pass

    def count_request(self, api_key: int, size: int) -> None:
        pass

    def count_response(self, api_key: int, size: int) -> None:
        pass


class _PassOn:
    def on_request(self, header: RequestHeader, frame: Any) -> Any:
        return frame

    def on_response(self, request: InFlight, frame: Any) -> Any:
        return frame


@pytest.mark.parametrize("counted_by", ["stand-in", "ProxyMetrics"])
def test_the_compiled_runs_leak_nothing(counted_by: str) -> None:
    # Correlation ids past the small ints' cache, so that an id kept by mistake is a block more per request;
    # the frames, reused every round, are watched by their references; the proxy's own metrics, whose
    # counting the runs write out, or a stand-in whose methods they call.
    _compiled()
    quiet, one = _Quiet(), bytes(TABLE_SIZE + 1)
    metrics = ProxyMetrics() if counted_by == "ProxyMetrics" else quiet
    filters = ((_PassOn(),),)
    runs = _Runs(lambda _ms: None, one, filters, one, filters, one, filters, one, lambda: False)
    pipeline = RequestPipeline(runs, quiet, quiet, metrics, FrameSplitter(), FrameSplitter())  # type: ignore[arg-type]
    pipeline.upstream_ready()
    requests = [
        memoryview(_produce(5000, 1, False)).toreadonly(),
        memoryview(_produce(5001, 0, False)).toreadonly(),
        memoryview(encode_request(3, 1, 5002, "client", b"\xff\xff\xff\xff")).toreadonly(),
    ]
    answers = [memoryview(encode_response(0, 9, i, b"answer")).toreadonly() for i in (5000, 5002)]

    def one_round() -> None:
        pipeline.client_frames(requests)
        pipeline.outgoing = []
        pipeline.broker_frames(answers)

    for _ in range(ACKS0_WARM_UP):  # the acks=0 ids remembered fill their bounded deque first
        one_round()
    before = sys.getallocatedblocks()
    references = [sys.getrefcount(frame) for frame in requests + answers]
    for _ in range(2000):
        one_round()
    assert sys.getallocatedblocks() - before < 100
    assert [sys.getrefcount(frame) for frame in requests + answers] == references
    assert pipeline.in_flight == 0
    if isinstance(metrics, ProxyMetrics):  # and what was counted was counted
        rounds = ACKS0_WARM_UP + 2000  # two Produce requests (one acks=0) and a Metadata a round, two answers
        assert (metrics.requests[0], metrics.requests[3]) == (2 * rounds, rounds)
        assert (metrics.responses[0], metrics.responses[3]) == (rounds, rounds)


@pytest.mark.parametrize("start", [0, 2**63 - 2, 2**64, -(2**63)])
def test_the_compiled_runs_count_as_python_adds_past_a_machine_word(start: int) -> None:
    """The compiled runs add to the metrics' counts in C while the sum fits a long long, and as Python adds
    beyond: a count just under 2**63 goes past it, one past 2**64 (which C cannot read) goes on, exactly."""
    _compiled()
    quiet = _Quiet()
    metrics = ProxyMetrics()
    filters = ((_PassOn(),),)
    one = bytes(TABLE_SIZE + 1)
    runs = _Runs(lambda _ms: None, one, filters, one, filters, one, filters, one, lambda: False)
    pipeline = RequestPipeline(runs, quiet, quiet, metrics, FrameSplitter(), FrameSplitter())  # type: ignore[arg-type]
    pipeline.upstream_ready()
    request = memoryview(_produce(5000, 1, False)).toreadonly()
    answer = memoryview(encode_response(0, 9, 5000, b"answer")).toreadonly()
    metrics.requests[0] = metrics.responses[0] = start
    metrics.request_bytes[0] = metrics.response_bytes[0] = start
    for _ in range(3):
        pipeline.client_frames([request])
        pipeline.outgoing = []
        pipeline.broker_frames([answer])
    assert (metrics.requests[0], metrics.responses[0]) == (start + 3, start + 3)
    # The metrics count a frame without its 4-byte length prefix.
    assert metrics.request_bytes[0] == start + 3 * (len(request) - 4)
    assert metrics.response_bytes[0] == start + 3 * (len(answer) - 4)


@pytest.mark.parametrize("muted", [False, True])
def test_the_compiled_runs_hold_requests_behind_a_real_throttle_gates_mute(muted: bool) -> None:
    """The runs read the connection's own ThrottleGate (the twin test's gates are stand-ins): a muted gate
    holds the requests, an open one lets them through, as in the Python. (That the read is at the slot's
    offset shows in speed, not in behaviour: a wrong offset would read another slot and fail this; a read by
    name would pass it.)"""
    _compiled()
    from sluice.proxy.data_path.throttle_gate import ThrottleGate

    forwarded = []
    for forward_plain in (request_pipeline._forward_plain, RequestPipeline._forward_plain_in_python):
        quiet, one = _Quiet(), bytes(TABLE_SIZE + 1)
        filters = ((_PassOn(),),)
        runs = _Runs(lambda _ms: None, one, filters, one, filters, one, filters, one, lambda: False)
        gate = ThrottleGate(None, None, None, None, None, None)  # type: ignore[arg-type]
        gate.muted = muted
        pipeline = RequestPipeline(runs, gate, quiet, quiet, FrameSplitter(), FrameSplitter())  # type: ignore[arg-type]
        pipeline.upstream_ready()
        frames = [memoryview(_produce(7000 + i, 1, False)).toreadonly() for i in range(3)]
        forwarded.append(forward_plain(pipeline, frames, 0))
    assert forwarded[0] == forwarded[1] == ((0 if muted else 3), None)
