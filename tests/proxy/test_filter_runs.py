"""proxy/data_path/_filter_runs.c: the compiled FilterRuns does what filter_runs.FilterRunsInPython does.

Random chains of scripted filters (each returns, in turn, what its script says: the frame, a rewritten one,
Forward, Answer, Defer, Close, Respond with any throttle, delay or mute, or an exception) run on both
twins, built alike from one seed: every call the filters see, every mute asked for, and every outcome are
the same, compared by type and value. The chain's own tests (test_filter_chain, test_request_pipeline,
test_pipeline_pass_through) run on both as well (tests/proxy/conftest.py's `both_runs`); what the
proxy runs is the compiled one, where the install has it.
"""

from __future__ import annotations

import gc
import random
import sys
import weakref
from collections.abc import Callable
from typing import Any

import pytest
from twin_outcomes import shape

from sluice.protocol.frames import FrameHead
from sluice.protocol.headers import RequestHeader
from sluice.proxy.data_path import filter_runs
from sluice.proxy.data_path.filter_chain import ConnectionFilters
from sluice.proxy.data_path.filter_runs import Deferred, FilterRunsInPython
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

CASES = 20000


def _compiled() -> type[FilterRunsInPython]:
    assert filter_runs.FilterRuns is not FilterRunsInPython, "built without proxy/data_path/_filter_runs.c"
    return filter_runs.FilterRuns


def test_this_install_runs_the_compiled_filter_runs() -> None:
    # CI builds the wheel and the development install with a C compiler: the Python runs here would mean the
    # build skipped the extension (pyproject.toml's ext-modules is optional).
    compiled = _compiled()
    assert compiled.__module__ == "sluice.proxy.data_path._filter_runs"
    assert ConnectionFilters.__mro__[1] is compiled


# ---- scripted filters ---------------------------------------------------------------------------------

_READY = object()  # a Defer's `ready`, told apart by identity


class _Refused(Exception):
    """What a scripted filter (or mute) raises."""


_REQUEST_KINDS = ["same", "same", "same", "view", "bytes", "bytearray", "forward", "forward_new"]
_REQUEST_KINDS += ["answer", "defer", "close", "raise"]


def _request_outcome(rng: random.Random, n: int) -> Callable[[Any], Any]:
    throttle = rng.choice([0, 0, 3, 7, 7.0, 13, -2, 2.5, 1 << 70, -(1 << 70)])  # 7.0: ties of two types
    kind = rng.choice(_REQUEST_KINDS)
    if kind == "same":
        return lambda frame: frame
    if kind == "view":
        return lambda frame: memoryview(b"view-%d" % n)
    if kind == "bytes":
        return lambda frame: b"bytes-%d" % n
    if kind == "bytearray":  # neither a memoryview, bytes nor an effect: taken as a frame
        return lambda frame: bytearray(b"array-%d" % n)
    if kind == "forward":
        return lambda frame: Forward(frame, throttle)
    if kind == "forward_new":
        return lambda frame: Forward(memoryview(b"forwarded-%d" % n), throttle)
    if kind == "answer":
        return lambda frame: Answer(b"answer-%d" % n, throttle, rng.choice([0, 5]))
    if kind == "defer":
        return lambda frame: Defer(_READY)
    if kind == "close":
        return lambda frame: Close(f"closed-{n}")

    def refuse(frame: Any) -> Any:
        raise _Refused(f"request-{n}")

    return refuse


def _response_outcome(rng: random.Random, n: int) -> Callable[[Any], Any]:
    delay = rng.choice([0, 0, 4, 9, 9.0, -1, 1.5, 1 << 70])
    mute = rng.choice([0, 0, 6, 13, -3, 1 << 70])
    kind = rng.choice(["same", "same", "same", "view", "bytes", "respond", "respond_new", "raise"])
    if kind == "same":
        return lambda frame: frame
    if kind == "view":
        return lambda frame: memoryview(b"answer-view-%d" % n)
    if kind == "bytes":
        return lambda frame: b"answer-bytes-%d" % n
    if kind == "respond":
        return lambda frame: Respond(frame, delay, mute)
    if kind == "respond_new":
        return lambda frame: Respond(memoryview(b"responded-%d" % n), delay_ms=delay, mute_ms=mute)

    def refuse(frame: Any) -> Any:
        raise _Refused(f"response-{n}")

    return refuse


class _Scripted:
    """A filter answering each call with the next outcome of its script, logging what it was handed."""

    def __init__(self, name: str, log: list[object], seed: int) -> None:
        self._name = name
        self._log = log
        self._rng = random.Random(seed)
        self._calls = 0

    def on_request(self, header: RequestHeader, frame: Any) -> Any:
        self._calls += 1
        self._log.append((self._name, "request", header.api_key, shape(frame)))
        return _request_outcome(self._rng, self._calls)(frame)

    def on_response(self, request: InFlight, frame: Any) -> Any:
        self._calls += 1
        self._log.append((self._name, "response", request.header.api_key, shape(frame)))
        return _response_outcome(self._rng, self._calls)(frame)


class _World:
    """One twin's runs over a random chain: its filters, mutes, CPU checks and what they logged."""

    def __init__(self, runs_type: type[FilterRunsInPython], seed: int) -> None:
        rng = random.Random(seed)
        self.log: list[object] = []
        self._cpu_answers = random.Random(seed + 1)
        filters = [_Scripted(f"f{i}", self.log, seed * 100 + i) for i in range(rng.randint(1, 5))]

        def table() -> tuple[bytes, tuple[tuple[Any, ...], ...]]:
            groups = [()] + [
                tuple(rng.sample(filters, rng.randint(1, len(filters)))) for _ in range(rng.randint(0, 3))
            ]
            return bytes(rng.randrange(len(groups)) for _ in range(TABLE_SIZE + 1)), tuple(groups)

        request_group, request_groups = table()
        response_group, response_groups = table()
        cpu_group, cpu_groups = table()
        cpu_adds = bytes(rng.choice([0, 0, 1]) for _ in range(TABLE_SIZE + 1))
        self.runs = runs_type(
            self._mute,
            request_group,
            request_groups,
            response_group,
            response_groups,
            cpu_group,
            cpu_groups,
            cpu_adds,
            self._cpu_needed,
        )

    def _mute(self, ms: Any) -> None:
        self.log.append(("mute", shape(ms)))
        if ms == 13:
            raise _Refused("mute")

    def _cpu_needed(self) -> Any:
        answer = self._cpu_answers.choice([True, False, 1, 0, "", "yes"])
        self.log.append(("cpu_needed", shape(answer)))
        return answer


_KEYS = [0, 1, 3, 18, 127, 128, -1, -32768, 32767, 1 << 64, -(1 << 64), True]


def _outcome(call: Callable[[], object]) -> object:
    try:
        return ("returned", shape(call()))
    except (_Refused, TypeError) as exc:  # TypeError: whole() of a FrameHead, when a filter defers one
        return ("raised", type(exc).__name__, str(exc))


def _request_call(rng: random.Random, runs: FilterRunsInPython) -> Callable[[], object]:
    header = RequestHeader(rng.choice(_KEYS), rng.randint(0, 12), rng.randint(0, 99), "client", 10)
    frame: Any = memoryview(b"request")
    if rng.random() < 0.1:
        frame = FrameHead(memoryview(b"head"), 1 << 20)
    if rng.random() < 0.3:
        deferred = Deferred(
            _READY,
            header,
            memoryview(b"original"),
            memoryview(b"so far"),
            rng.choice([-2, -1, 0, 1, 2, 3, 6, 1 << 80, -(1 << 80)]),  # a slice's start, clamped
            rng.choice([0, 4, 9, -1, 1 << 70]),
        )
        if rng.random() < 0.5:
            return lambda: runs.on_request(header, frame, deferred)
        return lambda: runs.on_request(header, frame, deferred=deferred)
    return lambda: runs.on_request(header, frame)


def _response_call(rng: random.Random, runs: FilterRunsInPython) -> Callable[[], object]:
    header = RequestHeader(rng.choice(_KEYS), rng.randint(0, 12), rng.randint(0, 99), "client", 10)
    request = InFlight(header, EntryKind.FORWARDED, rng.choice([0, 5]))
    frame = memoryview(b"answer") if rng.random() < 0.8 else b"answer-bytes"
    return lambda: runs.on_response(request, frame)


@pytest.mark.parametrize("direction", [_request_call, _response_call], ids=["request", "response"])
def test_the_compiled_runs_do_what_the_python_runs_do_on_random_chains(
    direction: Callable[[random.Random, FilterRunsInPython], Callable[[], object]],
) -> None:
    compiled = _compiled()
    kinds: set[object] = set()
    for seed in range(CASES // 10):
        reference, translated = _World(FilterRunsInPython, seed), _World(compiled, seed)
        calls = random.Random(seed), random.Random(seed)
        for _ in range(10):  # the filters' scripts go on from call to call
            expected = _outcome(direction(calls[0], reference.runs))
            got = _outcome(direction(calls[1], translated.runs))
            assert got == expected, (seed, reference.log)
            assert translated.log == reference.log, seed
            kinds.add(expected[1] if expected[0] == "raised" else expected[1][0])  # type: ignore[index]
    # every outcome was met (the random chains are not all pass-throughs)
    if direction is _request_call:
        effects = {"Forward", "Answer", "Deferred", "Close"}
        assert kinds >= {"memoryview", "bytes", "bytearray", "_Refused", *effects}
        assert "TypeError" in kinds  # a FrameHead deferred
    else:
        assert kinds >= {"memoryview", "bytes", "Respond", "_Refused"}


# ---- the compiled type's own safety -------------------------------------------------------------------


def _tables(filters: tuple[object, ...]) -> tuple[Any, ...]:
    one = bytes(TABLE_SIZE + 1)  # every key: group 0
    return (one, (filters,), one, (filters,), one, ((),), bytes(TABLE_SIZE + 1), lambda: False)


class _Returns:
    def __init__(self, out: object) -> None:
        self.out = out

    def on_request(self, header: RequestHeader, frame: Any) -> object:
        return self.out

    def on_response(self, request: InFlight, frame: Any) -> object:
        return self.out


@pytest.mark.parametrize(
    "out",
    [
        memoryview(b"rewritten"),
        Forward(memoryview(b"x"), 5),
        Answer(b"answer", 1, 0),
        Answer(b"answer", 9, 0),
        Defer(_READY),
        Close("bye"),
        Respond(memoryview(b"r"), 4, 2),
    ],
    ids=["view", "forward", "answer-replaced", "answer", "defer", "close", "respond"],
)
def test_the_compiled_runs_keep_no_reference_to_what_passed(out: object) -> None:
    compiled = _compiled()
    mutes: list[object] = []
    first = _Returns(Forward(memoryview(b"before"), 3))  # a throttle before: Answer(throttle 1) is replaced
    runs = compiled(mutes.append, *_tables((first, _Returns(out))))
    header = RequestHeader(0, 9, 1, "c", 10)
    frame = memoryview(b"request")
    request = InFlight(header, EntryKind.FORWARDED, 0)
    watched = (out, frame, header, request, _READY)

    def runs_of_each() -> None:
        runs.on_request(header, frame)
        runs.on_response(request, frame)
        runs.on_request(header, frame, Deferred(_READY, header, frame, frame, 1, 0))
        mutes.clear()

    # Warmed up first: the interpreter's own caches and free lists settle within a few thousand runs (an
    # Answer's _replace, Python code, leaves ~1,000 blocks more after 1,000 runs and none after 100,000).
    for _ in range(5000):
        runs_of_each()
    before = [sys.getrefcount(x) for x in watched]
    blocks = sys.getallocatedblocks()  # and nothing it made (a Forward, a Deferred) is left behind
    for _ in range(5000):
        runs_of_each()
    assert [sys.getrefcount(x) for x in watched] == before
    assert sys.getallocatedblocks() - blocks < 50


def test_a_connection_holding_its_runs_through_its_mute_is_collected() -> None:
    # The runs hold the connection's mute, a bound method of what holds the runs: a cycle the GC must see.
    compiled = _compiled()

    class Holder:
        def mute(self, ms: int) -> None:
            pass

    holder = Holder()
    holder.runs = compiled(holder.mute, *_tables(()))  # type: ignore[attr-defined]
    gone = weakref.ref(holder)
    del holder
    gc.collect()
    assert gone() is None


def test_the_compiled_runs_refuse_tables_they_cannot_index_and_an_unbuilt_instance() -> None:
    compiled = _compiled()
    good = _tables(())
    with pytest.raises(TypeError, match="request_group"):
        compiled(print, bytes(TABLE_SIZE), *good[1:])
    with pytest.raises(ValueError, match="names group 1 of 1"):
        compiled(print, bytes(TABLE_SIZE) + b"\x01", *good[1:])
    with pytest.raises(TypeError, match="each group a tuple"):
        compiled(print, good[0], ([],), *good[2:])

    class NeverBuilt(compiled):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            pass

    with pytest.raises(RuntimeError, match="__init__ was not called"):
        NeverBuilt().on_request(RequestHeader(0, 9, 1, "c", 10), memoryview(b"x"))
    with pytest.raises(RuntimeError, match="__init__ was not called"):
        NeverBuilt().on_response(InFlight(RequestHeader(0, 9, 1, "c", 10), EntryKind.FORWARDED), b"x")


def test_a_key_whose_comparisons_and_index_disagree_is_read_as_bytes_read_it() -> None:
    # (No header the proxy parses has one: its keys are ints.) In range by its comparisons, its __index__
    # decides the slot, as indexing the routing bytes does: a negative one from the end, a large one refused.
    class Odd:
        def __init__(self, index: int) -> None:
            self._index = index

        def __ge__(self, other: object) -> bool:
            return True

        def __le__(self, other: object) -> bool:
            return True

        def __lt__(self, other: object) -> bool:
            return True

        def __index__(self) -> int:
            return self._index

    for index in (-1, 200, 100_000, -100_000):
        header = RequestHeader(Odd(index), 9, 1, "c", 10)  # type: ignore[arg-type]
        outcomes: list[object] = []
        for runs_type in (FilterRunsInPython, _compiled()):
            runs = runs_type(print, *_tables((_Returns(memoryview(b"seen")),)))
            try:
                outcomes.append(shape(runs.on_request(header, memoryview(b"x"))))
            except IndexError:
                outcomes.append("IndexError")
        assert outcomes[0] == outcomes[1], index
