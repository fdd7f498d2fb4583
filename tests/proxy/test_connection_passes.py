"""proxy/data_path/_connection_passes.c: ClientSide's compiled pass over a broker's read (`upstream_data`) and
its compiled sending of an answer (`send_response`) do what their Python methods (connection.PASSES_IN_PYTHON,
the references) do.

Each random scenario runs twice, on two real connections (tests/connection_harness.py: a real client socket
and a broker double on loopback), one served by each twin. The client's requests reach the broker; then the
test hands the broker's answers to the connection's `upstream_data` itself, cut into the pieces the scenario
chose (inside a frame, inside a length prefix, several frames at once; bytes, and sometimes a bytearray or a
view), so that both twins see the same reads. The answers may carry an id nobody asked for, end in a length
out of range or in an unfinished frame; the filters may delay answers (held by the gate, so later ones queue
behind them), answer a request themselves, fail, or close the connection, and may ask for the pass's time.
Both twins must give the client the same answers, log the same events and count the same metrics. Every
other test of the proxy runs the compiled twin, which this install has.
"""

from __future__ import annotations

import asyncio
import copy
import random
import struct
from collections.abc import Awaitable, Callable
from typing import Any

from connection_harness import WAIT_S, Broker, Proxy, responses_until_closed
from filter_factories import Factory
from structlog.testing import capture_logs
from without_module import check_without

from sluice.config.identity_settings import SaslSettings
from sluice.protocol.api_keys import ApiKey
from sluice.protocol.headers import RequestHeader, encode_request, encode_response
from sluice.proxy.data_path import connection
from sluice.proxy.data_path.connection import ClientSide
from sluice.proxy.data_path.request_pipeline import CloseConnection
from sluice.proxy.filter_api import Answer, Close, Defer, Filter, Frame, InFlight, Respond

METADATA, PRODUCE, API_VERSIONS = ApiKey.METADATA, ApiKey.PRODUCE, ApiKey.API_VERSIONS
SCENARIOS = 60
HELD_MS = 60_000  # far longer than a scenario: a delayed answer stays held, and those after it queue behind


def test_this_install_runs_the_compiled_passes() -> None:
    for name in ("upstream_data", "send_response", "get_buffer", "buffer_updated"):
        method = getattr(ClientSide, name)
        assert method is not connection.PASSES_IN_PYTHON[name], f"built without _connection_passes.c: {name}"
        assert type(method).__name__ == "method_descriptor" and method.__objclass__ is ClientSide


class SeesAnswers(Filter):
    response_api_keys = frozenset({METADATA, PRODUCE})

    def on_response(self, request: InFlight, frame: Frame) -> Frame:
        return frame


class DelaysProduceAcks(Filter):
    response_api_keys = frozenset({PRODUCE})

    def on_response(self, request: InFlight, frame: Frame) -> Respond:
        return Respond(frame, HELD_MS)


class FailsOnMetadataAnswer(Filter):
    """Fails on the answer to the Metadata request whose correlation id is `failing` (a filter bug)."""

    response_api_keys = frozenset({METADATA})
    failing = 0

    def on_response(self, request: InFlight, frame: Frame) -> Frame:
        # (A filter that asks for CPU time sees every answer: the key is checked too.)
        if request.header.api_key == METADATA and request.header.correlation_id == self.failing:
            raise RuntimeError("a filter bug")
        return frame


class ClosesOnProduceAnswer(Filter):
    response_api_keys = frozenset({PRODUCE})
    closing = 0

    def on_response(self, request: InFlight, frame: Frame) -> Frame:
        if request.header.api_key == PRODUCE and request.header.correlation_id == self.closing:
            raise CloseConnection("closed on an answer")
        return frame


class InterruptedOnAnswer(Filter):
    """Raises what is not an Exception (as a KeyboardInterrupt would) on the broker's answer to
    `interrupting`: it goes on up, once what the pass produced is written."""

    response_api_keys = frozenset({METADATA, PRODUCE})
    interrupting = 0

    def on_response(self, request: InFlight, frame: Frame) -> Frame:
        header = request.header
        if header.api_key in self.response_api_keys and header.correlation_id == self.interrupting:
            raise Interrupted
        return frame


class Interrupted(BaseException):
    pass


class AnswersApiVersions(Filter):
    request_api_keys = frozenset({API_VERSIONS})

    def on_request(self, header: RequestHeader, frame: Frame) -> Answer:
        return Answer(encode_response(API_VERSIONS, 0, header.correlation_id, b"mine"))


def _request(key: int, correlation_id: int) -> bytes:
    if key == PRODUCE:  # Produce v3 with acks=1 and no topics: all the proxy reads is acks
        return encode_request(PRODUCE, 3, correlation_id, "passes-test", struct.pack(">hhii", -1, 1, 1000, 0))
    return encode_request(key, 1 if key == METADATA else 0, correlation_id, "passes-test", b"")


def _answer_scenario(rng: random.Random) -> dict[str, Any]:
    keys = [rng.choice((METADATA, PRODUCE, API_VERSIONS)) for _ in range(rng.randint(1, 6))]
    factories: list[Factory] = []
    cpu = rng.random() < 0.5  # the pass is timed (a filter asks for CPU time)
    if rng.random() < 0.3:
        factories.append(Factory(DelaysProduceAcks, cpu=cpu))
    if rng.random() < 0.3:
        factories.append(Factory(FailsOnMetadataAnswer, cpu=cpu, failing=rng.randint(1, len(keys))))
    if rng.random() < 0.3:
        factories.append(Factory(ClosesOnProduceAnswer, cpu=cpu, closing=rng.randint(1, len(keys))))
    if rng.random() < 0.15:
        factories.append(Factory(InterruptedOnAnswer, cpu=cpu, interrupting=rng.randint(1, len(keys))))
    answered_here = rng.random() < 0.5
    if answered_here:
        factories.append(Factory(AnswersApiVersions, cpu=cpu))
    if not factories or (cpu and rng.random() < 0.5):
        factories.append(Factory(SeesAnswers, cpu=cpu))
    if answered_here and keys[-1] == API_VERSIONS:
        keys.append(METADATA)  # the last request reaches the broker: the proxy has read them all once it has
    # The broker's answers to what was forwarded, in order, with a fault at the end or within.
    forwarded = [(i + 1, key) for i, key in enumerate(keys) if not (answered_here and key == API_VERSIONS)]
    answers = [encode_response(key, 1, cid, bytes(rng.randint(0, 40))) for cid, key in forwarded]
    fault = rng.choice(("none", "none", "stranger", "bad length", "unfinished", "short prefix"))
    if fault == "stranger" and answers:
        at = rng.randrange(len(answers))
        answers[at] = encode_response(METADATA, 1, 99, b"nobody asked")
    elif fault == "bad length":
        answers.append(struct.pack(">i", rng.choice((-1, 0, 1 << 30))) + bytes(8))
    elif fault == "unfinished" and answers:
        answers[-1] = answers[-1][: rng.randint(5, len(answers[-1]) - 1)]
    elif fault == "short prefix":
        answers.append(bytes(rng.randint(1, 3)))
    stream = b"".join(answers)
    cuts = sorted({rng.randint(1, max(1, len(stream) - 1)) for _ in range(rng.randint(0, 4))} | {len(stream)})
    pieces: list[bytes | bytearray | memoryview] = []
    start = 0
    for end in cuts:
        piece = stream[start:end]
        kind = rng.random()
        pieces.append(bytearray(piece) if kind < 0.1 else memoryview(piece) if kind < 0.2 else piece)
        start = end
    return {
        "keys": keys,
        "factories": factories,
        "pieces": [p for p in pieces if len(p)],
        "drain": rng.random() < 0.2,  # shutdown began first: the last answer's pass closes the connection
        "unproven": rng.random() < 0.3,  # Kafka's limits before proof, until the broker's first answer
    }


def _state(conn: ClientSide, before: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a pass leaves in the connection, its splitters and its guard (with `before`, the clocks as whether
    they moved on: the read's time, the activity's, the CPU time counted)."""
    state: dict[str, Any] = {
        "read at": conn._last_read,
        "active at": conn._last_activity,
        "cpu": conn.cpu_ns,
        "read buffer lent": conn._read_buffer is not connection._NO_BUFFER,
        "replies": len(conn._replies),
    }
    for side, splitter in (("requests", conn._requests), ("responses", conn._responses)):
        state[side] = (
            splitter.buffered_bytes,
            splitter.pending_frame_bytes,
            splitter.passing_through,
            len(splitter.through),
            [type(piece).__name__ for piece in splitter._pending],
        )
    guard = conn._guard
    if guard is not None:
        state["guard"] = (guard._reserved, guard._waiting, guard.proven, guard.awaiting_answer)
    if before is not None:
        for clock in ("read at", "active at", "cpu"):
            state[clock] = state[clock] > before[clock]
    return state


def _logged_and_counted(logs: list[dict[str, Any]], proxy: Proxy) -> dict[str, Any]:
    """The events logged (what says which connection left out) and the proxy's counts (ProxyMetrics' slots;
    the gauges read at scrape time left out)."""
    metrics = proxy.settings.metrics
    names = [name for name in type(metrics).__slots__ if name not in ("request_memory", "broker_loads")]
    return {
        "logged": [
            (e["event"], e.get("cause"), e.get("reason"), e.get("side"), str(e.get("error", "")))
            for e in logs
            if e["event"] != "connection_opened"
        ],
        "counted": {name: copy.deepcopy(getattr(metrics, name)) for name in names},
    }


async def _outcome(
    scenario: dict[str, Any],
    methods: dict[str, Any],
    run: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]],
) -> dict[str, Any]:
    """`run(scenario)` on a connection whose class has `methods` (one twin of each) for the run."""
    saved = {name: ClientSide.__dict__[name] for name in methods}
    for name, method in methods.items():
        setattr(ClientSide, name, method)
    try:
        return await run(scenario)
    finally:
        for name, method in saved.items():
            setattr(ClientSide, name, method)


async def _run_answers(scenario: dict[str, Any]) -> dict[str, Any]:
    """The client's requests reach the broker; then the broker's answers, cut into the scenario's pieces, are
    handed to the connection's `upstream_data`: what the client got, what was logged and what was counted."""
    broker = Broker()
    proxy = Proxy(await broker.start(), *scenario["factories"])
    if scenario["unproven"]:
        proxy.settings.unproven_limits = SaslSettings()
    try:
        reader, writer = await proxy.connect()
        keys = scenario["keys"]
        writer.write(b"".join(_request(key, i + 1) for i, key in enumerate(keys)))
        answers_here = any(f.filter_class is AnswersApiVersions for f in scenario["factories"])
        expected = [i + 1 for i, key in enumerate(keys) if not (answers_here and key == API_VERSIONS)]
        # (The last request is one the broker gets: once it has, the proxy has read them all.)
        assert await broker.received(len(expected)) == expected
        conn = proxy.connection()
        before = _state(conn)
        interrupted = 0
        with capture_logs() as logs:
            if scenario["drain"]:
                conn.drain()
            for piece in scenario["pieces"]:
                if conn.closed:
                    break
                try:
                    conn.upstream_data(piece)
                except Interrupted:
                    interrupted += 1
            closed_by_pass = conn.closed
            after = _state(conn, before)
            proxy.close()
        received = await responses_until_closed(reader)
        writer.close()
        outcome = {"client got": received, "closed by a pass": closed_by_pass, "connection": after}
        outcome["interrupted"] = interrupted
        return outcome | _logged_and_counted(logs, proxy)
    finally:
        proxy.close()
        broker.close()


class ClosesOnMetadataRequest(Filter):
    request_api_keys = frozenset({METADATA})
    closing = 0

    def on_request(self, header: RequestHeader, frame: Frame) -> Frame | Close:
        return Close("not allowed") if header.correlation_id == self.closing else frame


class DefersMetadataOnce(Filter):
    """Defers the Metadata request whose correlation id is `deferring`, once, on a future already done: it
    goes on when the loop runs the wait's callback."""

    request_api_keys = frozenset({METADATA})
    deferring = 0
    deferred = False

    def on_request(self, header: RequestHeader, frame: Frame) -> Frame | Defer:
        if header.correlation_id != self.deferring or self.deferred:
            return frame
        self.deferred = True
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ready.set_result(None)
        return Defer(ready)


class RecordingBroker(Broker):
    """The broker double, which also says when the proxy's connection to it has ended."""

    def __init__(self) -> None:
        super().__init__()
        self.ended = asyncio.Event()

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await super()._accepted(reader, writer)
        finally:
            self.ended.set()


def _request_scenario(rng: random.Random) -> dict[str, Any]:
    """A client's requests (a large one now and then, which goes on as it arrives), with a fault or none, cut
    into reads anywhere."""
    count = rng.randint(1, 6)
    keys = [rng.choice((METADATA, PRODUCE, API_VERSIONS)) for _ in range(count)]
    factories: list[Factory] = []
    cpu = rng.random() < 0.5
    if rng.random() < 0.5:
        factories.append(Factory(AnswersApiVersions, cpu=cpu))
    if rng.random() < 0.3:
        factories.append(Factory(ClosesOnMetadataRequest, cpu=cpu, closing=rng.randint(1, count)))
    if rng.random() < 0.3:
        factories.append(Factory(DefersMetadataOnce, cpu=cpu, deferring=rng.randint(1, count)))
    if not factories or rng.random() < 0.3:
        factories.append(Factory(SeesAnswers, cpu=cpu))
    requests = []
    for i, key in enumerate(keys):
        if key == PRODUCE and rng.random() < 0.3:  # past STREAM_MIN_FRAME_BYTES: streamed when cut
            body = struct.pack(">hhii", -1, 1, 1000, 0) + bytes(rng.randint(70_000, 140_000))
            requests.append(encode_request(PRODUCE, 3, i + 1, "passes-test", body))
        else:
            requests.append(_request(key, i + 1))
    fault = rng.choice(("none", "none", "bad length", "unfinished", "short prefix"))
    if fault == "bad length":
        bad = struct.pack(">i", rng.choice((-1, 0, 1 << 30))) + bytes(8)
        requests.insert(rng.randint(0, len(requests)), bad)
    elif fault == "unfinished":
        requests[-1] = requests[-1][: rng.randint(5, len(requests[-1]) - 1)]
    elif fault == "short prefix":
        requests.append(bytes(rng.randint(1, 3)))
    stream = b"".join(requests)
    # Reads end between requests as often as inside one: a read of whole requests is the compiled pass's own.
    ends = [sum(len(r) for r in requests[: k + 1]) for k in range(len(requests))]
    cuts = {rng.randint(1, max(1, len(stream) - 1)) for _ in range(rng.randint(0, 3))}
    cuts |= {end for end in ends if rng.random() < 0.6} | {len(stream)}
    cuts = sorted(cuts)
    pieces, start = [], 0
    for end in cuts:
        pieces.append(stream[start:end])
        start = end
    return {"factories": factories, "pieces": [p for p in pieces if p]}


async def _scheduled_callbacks_ran() -> None:
    """Every callback the loop had scheduled has run: a future resolved by a callback scheduled after them
    (call_soon keeps their order)."""
    loop = asyncio.get_running_loop()
    ran: asyncio.Future[None] = loop.create_future()
    loop.call_soon(ran.set_result, None)
    await ran


async def _run_requests(scenario: dict[str, Any]) -> dict[str, Any]:
    """Each piece read into the connection's lent buffer (`get_buffer`, then `buffer_updated`), as uvloop
    reads: what the broker got, what the client got, what was logged and what was counted."""
    broker = RecordingBroker()
    proxy = Proxy(await broker.start(), *scenario["factories"])
    try:
        reader, writer = await proxy.connect()
        conn = await proxy.connection_up()
        before = _state(conn)
        with capture_logs() as logs:
            for piece in scenario["pieces"]:
                if conn.closed:
                    break
                lent = conn.get_buffer(-1)
                lent[: len(piece)] = piece
                del lent  # (as uvloop lets go of it before handing the read over)
                conn.buffer_updated(len(piece))
            await _scheduled_callbacks_ran()  # (a deferral's resume on its wait, done, is one)
            closed_by_pass = conn.closed
            after = _state(conn, before)
            proxy.close()
        received = await responses_until_closed(reader)
        await asyncio.wait_for(broker.ended.wait(), WAIT_S)
        forwarded = []
        while not broker.requests.empty():
            forwarded.append(broker.requests.get_nowait())
        writer.close()
        return {
            "client got": received,
            "broker got": forwarded,
            "closed by a pass": closed_by_pass,
            "connection": after,
            **_logged_and_counted(logs, proxy),
        }
    finally:
        proxy.close()
        broker.close()


async def _hold_the_twins_alike(
    seed: int,
    scenario_of: Callable[[random.Random], dict[str, Any]],
    run: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]],
) -> None:
    """SCENARIOS random scenarios, each run on both twins: the same outcomes; some closed by a pass, some
    not."""
    rng = random.Random(seed)
    compiled = {name: ClientSide.__dict__[name] for name in connection.PASSES_IN_PYTHON}
    closed = []
    for n in range(SCENARIOS):
        scenario = scenario_of(rng)
        compiled_outcome = await _outcome(scenario, compiled, run)
        python_outcome = await _outcome(scenario, connection.PASSES_IN_PYTHON, run)
        assert compiled_outcome == python_outcome, f"scenario {n}: {scenario}"
        closed.append(compiled_outcome["closed by a pass"])
    assert any(closed) and not all(closed)  # the scenarios reach both ends


async def test_the_compiled_pass_over_a_clients_read_does_what_its_python_does() -> None:
    await _hold_the_twins_alike(29112026, _request_scenario, _run_requests)


async def test_the_compiled_pass_over_a_brokers_read_does_what_its_python_does() -> None:
    await _hold_the_twins_alike(20261129, _answer_scenario, _run_answers)


async def test_the_compiled_sending_of_an_answer_appends_it_or_hands_it_to_its_python() -> None:
    """Not delayed and nothing held: appended to the pass's replies; delayed, or behind one held: the Python
    reference holds it (the gate keeps the order)."""
    broker = Broker()
    proxy = Proxy(await broker.start(), Factory(SeesAnswers))
    try:
        _reader, writer = await proxy.connect()  # (kept: a client socket collected would close)
        conn = await proxy.connection_up()
        gate = conn._gate
        assert gate is not None
        conn.send_response(b"first", 0)
        assert conn._replies == [b"first"] and not gate.held_responses
        conn.send_response(b"later", HELD_MS)  # delayed: the replies so far leave, this one is held
        assert conn._replies == [] and [frame for _, frame in gate.held_responses] == [b"later"]
        conn.send_response(b"behind", 0)  # not delayed, but behind one held: held too, in order
        assert [frame for _, frame in gate.held_responses] == [b"later", b"behind"]
        conn.send_response(frame=b"by name", delay_ms=0)  # keywords: the Python, which holds it behind them
        assert [frame for _, frame in gate.held_responses][-1] == b"by name"
        writer.close()
    finally:
        proxy.close()
        broker.close()


def test_an_install_without_the_module_runs_the_python_passes() -> None:
    check_without(
        "sluice.proxy.data_path._connection_passes",
        "from sluice.proxy.data_path import connection as c\n"
        "for name, method in c.PASSES_IN_PYTHON.items():\n"
        "    assert c.ClientSide.__dict__[name] is method, name\n",
    )


def test_the_passes_refuse_to_run_unbound() -> None:
    check_without(
        "sluice.proxy.data_path.connection",
        "from sluice.proxy.data_path import _connection_passes as p\n"
        "class C: pass\n"
        "methods = p.methods_of(C)\n"
        "for name in ('upstream_data', 'send_response', 'get_buffer', 'buffer_updated'):\n"
        "    try:\n"
        "        methods[name](C(), b'', 0) if name == 'send_response' else methods[name](C(), b'')\n"
        "    except RuntimeError as exc:\n"
        "        assert 'not bound' in str(exc), exc\n"
        "    else:\n"
        "        raise AssertionError(name)\n",
    )


async def test_the_read_buffer_is_lent_again_only_while_nothing_holds_a_view_of_it() -> None:
    compiled = {name: ClientSide.__dict__[name] for name in connection.PASSES_IN_PYTHON}
    for methods in (compiled, connection.PASSES_IN_PYTHON):
        outcome = await _outcome({}, methods, _lend_twice)
        assert outcome == {"again": True, "held, then": False, "kept for the others": True}, methods


async def _lend_twice(_scenario: dict[str, Any]) -> dict[str, Any]:
    """A buffer lent, let go, lent again: the same; a view of it kept (a request held, a write queued):
    another, which every connection is then lent."""
    broker = Broker()
    proxy = Proxy(await broker.start(), Factory(SeesAnswers))
    try:
        _reader, writer = await proxy.connect()
        conn = await proxy.connection_up()
        first = conn.get_buffer(-1)
        shared = first.obj
        first.release()
        again = conn.get_buffer(-1)
        lent_again = again.obj
        kept = memoryview(lent_again)  # what something still holds of it
        again.release()
        then = conn.get_buffer(-1)
        lent_then = then.obj
        then.release()
        kept.release()
        outcome = {
            "again": lent_again is shared,
            "held, then": lent_then is shared,
            "kept for the others": proxy.settings.read_buffer is lent_then,
        }
        writer.close()
        return outcome
    finally:
        proxy.close()
        broker.close()


async def test_a_request_deferred_in_a_read_of_whole_requests_goes_on_when_its_wait_is_over() -> None:
    scenario = {
        "factories": [Factory(DefersMetadataOnce, deferring=1)],
        "pieces": [_request(METADATA, 1) + _request(PRODUCE, 2)],  # one read of whole requests: the C's own
    }
    compiled = {name: ClientSide.__dict__[name] for name in connection.PASSES_IN_PYTHON}
    outcomes = [
        await _outcome(scenario, methods, _run_requests)
        for methods in (compiled, connection.PASSES_IN_PYTHON)
    ]
    assert outcomes[0] == outcomes[1]
    assert outcomes[0]["broker got"] == [1, 2]


async def test_requests_read_while_others_wait_are_held_behind_them_on_both_twins() -> None:
    compiled = {name: ClientSide.__dict__[name] for name in connection.PASSES_IN_PYTHON}
    twins = (compiled, connection.PASSES_IN_PYTHON)
    outcomes = [await _outcome({}, methods, _read_while_holding) for methods in twins]
    assert outcomes[0] == outcomes[1]
    assert outcomes[0] == {
        "held while muted": 2,
        "forwarded once unmuted": [1, 2],
        "held behind the held one": 2,
        "forwarded once released": [3, 4],
    }


async def _read_while_holding(_scenario: dict[str, Any]) -> dict[str, Any]:
    """Reads of whole requests (the compiled pass's own) while requests may not go on: into a muted
    connection (uvloop may hand over what arrived before its pause took effect), they are held until the
    mute ends; into a pipeline that already holds one (a state the proxy only passes through: held requests
    are released as soon as they may go), behind it."""

    def read(conn: ClientSide, data: bytes) -> None:
        lent = conn.get_buffer(-1)
        lent[: len(data)] = data
        del lent
        conn.buffer_updated(len(data))

    broker = Broker()
    proxy = Proxy(await broker.start(), Factory(SeesAnswers))
    try:
        _reader, writer = await proxy.connect()
        conn = await proxy.connection_up()
        pipeline = conn._pipeline
        assert pipeline is not None and conn._gate is not None
        outcome: dict[str, Any] = {}
        conn._gate.mute_for(1)  # (ends on the loop's timer, after this read)
        read(conn, _request(METADATA, 1) + _request(PRODUCE, 2))
        outcome["held while muted"] = len(pipeline._held)
        assert outcome["held while muted"] == 2  # (not lost: else the wait below would time out)
        outcome["forwarded once unmuted"] = await broker.received(2)
        pipeline._held = [memoryview(_request(METADATA, 3))]
        read(conn, _request(METADATA, 4))
        outcome["held behind the held one"] = len(pipeline._held)
        conn._release_held()
        outcome["forwarded once released"] = await broker.received(2)
        writer.close()
        return outcome
    finally:
        proxy.close()
        broker.close()
