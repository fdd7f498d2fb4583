"""proxy/filters/_client_quotas.c: the compiled `ClientQuotas.on_request` and `on_response` do what the Python
ones do.

Two worlds, each with its own quota managers, entity gates, throttle stats, usage records and connection, take
the same random traffic, one through each twin. Requests: Produce of several sizes, whole or arriving as a
FrameHead, read in this ms or earlier, of entities whose gate is shut or not (entity and connection mute
scopes), past their timeout or not; Fetch whose cap binds or not, a ShareFetch, versions beyond the chain's.
Answers: Produce, Fetch and ShareFetch answers of several versions (and an ApiVersions answer, which is not
charged), of requests that earned a throttle as they were forwarded or not, on a connection muted now and
then, with CPU time to charge or none. Between them: several users and client-ids, the clock moving by
milliseconds and now and then by more than a sensor's hour, quotas of each key set and removed (low enough to
throttle), window and token-bucket sensors, all throttle modes. After every step both worlds are the same:
what was answered (or raised), the CPU time taken from the connection, the filter's memos and touched series,
the gates, every sensor's measure and last record, the stats' series and the usage records. The quota filter's
own tests (test_filter_chain, test_throttling, ...) run the compiled methods, as the proxy does where the
install has them.
"""

from __future__ import annotations

import asyncio
import gc
import random
import struct
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest
from kafka.protocol.consumer import FetchResponse
from kafka.protocol.producer import ProduceResponse
from without_module import check_without

from sluice.config.quota_settings import FetchThrottle, MuteScope, ThrottleMode
from sluice.protocol.api_keys import ApiKey
from sluice.protocol.client_requests import encode_fetch_request
from sluice.protocol.frames import FrameHead
from sluice.protocol.headers import RequestHeader, encode_request, encode_response, parse_request_header
from sluice.proxy.filter_api.contract import Defer, Forward, InFlight, Respond
from sluice.proxy.filters import client_quotas
from sluice.proxy.filters.client_quotas import ClientQuotas, ClientQuotasFactory
from sluice.proxy.observability.quota_metrics import ThrottleStats
from sluice.quota import ANONYMOUS, QuotaEntity, QuotaKey, QuotaManagers
from sluice.quota.keys import SensorKind
from sluice.quota.managers import ClientQuotaManager, RequestQuotaManager
from sluice.quota.quota_config import QuotaConfig

SCENARIOS = 150
STEPS = 50
USERS = (ANONYMOUS, "alice")
CLIENT_IDS = ("a", "b", None)
HOUR_MS = 3_600_000


def test_this_install_runs_the_compiled_methods() -> None:
    for method, python in (
        (ClientQuotas.on_request, client_quotas.on_request_in_python),
        (ClientQuotas.on_response, client_quotas.on_response_in_python),
    ):
        assert method is not python, "built without proxy/filters/_client_quotas.c"
        assert type(method).__name__ == "method_descriptor"


class Connection:
    """The parts of ConnectionInfo the quota filter asks, on a clock moved by hand."""

    def __init__(self) -> None:
        self.now = 10_000_000
        self.read = self.now
        self.peer, self.upstream_peer, self.listener = "127.0.0.1:1", "127.0.0.1:2", "bootstrap"
        self.user = ANONYMOUS
        self.cpu_ns = 0
        self.muted = 0
        self.asked: list[str] = []

    # (Not in `asked`: the clock and the mute, queries, which a compiled method asks again when it hands a
    # case to the Python; what they answer shows in the sensors' records.)
    def now_ms(self) -> int:
        return self.now

    def read_ms(self) -> int:
        return self.read

    def mute_remaining_ms(self) -> int:
        return self.muted

    def take_cpu_ns(self) -> int:
        self.asked.append("cpu")
        spent, self.cpu_ns = self.cpu_ns, 0
        return spent


@dataclass
class Entity:
    cpu_time_ns: int = 0
    throttles: list[tuple[str, int]] = field(default_factory=list)

    def add_throttle(self, kind: str, throttle_ms: int) -> None:
        self.throttles.append((kind, throttle_ms))


class Usage:
    def __init__(self) -> None:
        self.entities: dict[tuple[str, str | None], Entity] = {}

    def usage(self, user: str, client_id: str | None) -> Entity:
        return self.entities.setdefault((user, client_id), Entity())


class Fleet:
    """Fleet mode's hook (quota/fleet.py's FleetQuotas, as a manager asks it): other instances' usage, a fixed
    share of each local record, every call logged."""

    def __init__(self, log: list[object]) -> None:
        self.log = log

    def on_local(self, sensor: Any, value: float, now_ms: int) -> float:
        self.log.append(("fleet", value, now_ms))
        return value / 2


class LoggingProduceManager(ClientQuotaManager):
    """A manager of another type: the compiled methods ask it through its own method."""

    __slots__ = ("log",)

    def record_and_get_throttle_ms(self, user: str, client_id: str | None, value: float, now_ms: int) -> int:
        self.log.append(("produce record", user, client_id, value, now_ms))
        return super().record_and_get_throttle_ms(user, client_id, value, now_ms)


class LoggingRequestManager(RequestQuotaManager):
    __slots__ = ("log",)

    def record_request_time_ns(self, user: str, client_id: str | None, time_ns: int, now_ms: int) -> int:
        self.log.append(("request record", user, client_id, time_ns, now_ms))
        return super().record_request_time_ns(user, client_id, time_ns, now_ms)


class Lookup(dict):  # type: ignore[type-arg]
    """A manager's lookup that is not exactly a dict: asked through its `get`, each call logged."""

    log: list[object]

    def get(self, key: Any, default: Any = None) -> Any:
        self.log.append(("lookup", key))
        return super().get(key, default)


class World:
    def __init__(
        self,
        config: QuotaConfig,
        factory_args: dict[str, Any],
        usage: bool,
        variant: frozenset[str] = frozenset(),
    ) -> None:
        self.log: list[object] = []
        self.managers = QuotaManagers(config)
        if "logging managers" in variant:
            produce = LoggingProduceManager(QuotaKey.PRODUCER_BYTE_RATE, config.client_window)
            request = LoggingRequestManager(config.client_window)
            produce.log = request.log = self.log
            self.managers.produce, self.managers.request = produce, request
        if "fleet" in variant:
            for manager in (self.managers.produce, self.managers.fetch, self.managers.request):
                manager.fleet = Fleet(self.log)
        if "lookup" in variant:
            for manager in (self.managers.produce, self.managers.fetch, self.managers.request):
                manager._lookup = Lookup()
                manager._lookup.log = self.log
        self.stats = ThrottleStats()
        self.usage = Usage() if usage else None
        self.stats.usage = self.usage
        self.conn = Connection()
        self.factory = ClientQuotasFactory(self.managers, stats=self.stats, **factory_args)
        self.filter = self.factory.create(self.conn)  # type: ignore[arg-type]

    def state(self) -> dict[str, Any]:
        f = self.filter
        sensors = {}
        for key in ("produce", "fetch", "request"):
            manager = getattr(self.managers, key)
            for tags, sensor in manager.sensors():
                sensors[(key, tags)] = (sensor.measure(self.conn.now), sensor.last_record_ms)
        gates = self.factory.gates()
        return {
            "log": list(self.log),
            "cpu_ns": self.conn.cpu_ns,
            "asked": list(self.conn.asked),
            "memos": (f._request_checked, f._fetch_cap, f._turn_rank, f._turn is None),
            "touched": (f._produce_touched, f._request_touched, f._fetch_touched, dict(f._touched)),
            "gates": None if gates is None else sorted(map(repr, gates.shut)),
            "sensors": sensors,
            "by_quota": dict(self.stats.by_quota),
            "by_response": dict(self.stats.by_response),
            "timeouts": self.stats.gate_timeouts,
            "usage": None if self.usage is None else dict(self.usage.entities),
        }


def _produce(client_id: str | None, acks: int = 1, timeout_ms: int = 30_000, size: int = 5_000) -> bytes:
    body = struct.pack(">hhii", -1, acks, timeout_ms, 0) + bytes(size)
    return encode_request(ApiKey.PRODUCE, 3, 1, client_id, body)


def _produce_request(rng: random.Random, client_id: str | None) -> tuple[RequestHeader, Any]:
    version = rng.choice((3, 3, 3, 99))  # 99: beyond the chain's
    size = rng.choice((100, 5_000, 40_000))
    frame = _produce(client_id, rng.choice((1, -1, 0)), rng.choice((1, 30_000)), size)
    header = parse_request_header(frame)._replace(api_version=version)
    if rng.random() < 0.2:
        return header, FrameHead(memoryview(frame)[:64], len(frame))
    return header, (memoryview(frame) if rng.random() < 0.5 else frame)


def _fetch_request(rng: random.Random, client_id: str | None) -> tuple[RequestHeader, Any]:
    body = encode_fetch_request(12, "t", 0, 0, max_bytes=rng.choice((1 << 20, 500)), max_wait_ms=500)
    frame = encode_request(ApiKey.FETCH, 12, 1, client_id, body)
    header = parse_request_header(frame)
    roll = rng.random()
    if roll < 0.1:
        header = header._replace(api_key=int(ApiKey.SHARE_FETCH), api_version=1)
    elif roll < 0.15:
        header = header._replace(api_version=99)  # beyond the chain's
    elif roll < 0.2:
        return header, FrameHead(memoryview(frame)[:64], len(frame))  # (a filter reading bodies refuses it)
    return header, frame


def _produce_answer(version: int, throttle_ms: int) -> bytes:
    partition = ProduceResponse.TopicProduceResponse.PartitionProduceResponse
    topic = ProduceResponse.TopicProduceResponse(
        name="t", partition_responses=[partition(index=0, error_code=0, base_offset=1)]
    )
    body = ProduceResponse(version=version, responses=[topic], throttle_time_ms=throttle_ms).encode(
        version=version
    )
    return encode_response(ApiKey.PRODUCE, version, 1, bytes(body))


def _fetch_answer(version: int, throttle_ms: int, record_bytes: int, error: int) -> bytes:
    topic_cls = FetchResponse.FetchableTopicResponse
    partition = topic_cls.PartitionData(
        partition_index=0, error_code=0, high_watermark=1, records=b"\x01" * record_bytes
    )
    body = FetchResponse(
        version=version,
        throttle_time_ms=throttle_ms,
        error_code=error,
        session_id=7,
        responses=[topic_cls(topic="t", partitions=[partition])],
    ).encode(version=version)
    return encode_response(ApiKey.FETCH, version, 1, bytes(body))


def _answer(rng: random.Random, client_id: str | None) -> tuple[RequestHeader, bytes | memoryview]:
    roll = rng.random()
    if roll < 0.45:
        version = rng.randint(3, 11)
        key, frame = ApiKey.PRODUCE, _produce_answer(version, rng.choice((0, 0, 5000)))
    elif roll < 0.85:
        version = rng.randint(4, 12)
        error = rng.choice((0, 0, 0, 1))
        throttle = rng.choice((0, 0, 9000))
        key, frame = ApiKey.FETCH, _fetch_answer(version, throttle, rng.randint(0, 3000), error)
    elif roll < 0.93:
        # a ShareFetch answer with a Fetch's bytes: charged alike, its throttle field read as it is
        version, key, frame = 1, ApiKey.SHARE_FETCH, _fetch_answer(12, 0, rng.randint(0, 500), 0)
    else:
        version, key, frame = 3, ApiKey.API_VERSIONS, encode_response(ApiKey.API_VERSIONS, 3, 1, b"\x00" * 8)
    header = RequestHeader(int(key), version, 1, client_id, 10)
    return header, (memoryview(frame) if rng.random() < 0.5 else frame)


def _outcome(method: Any, world: World, *args: Any) -> Any:
    try:
        out = method(world.filter, *args)
    except Exception as exc:  # the same error from both, if any
        return ("raised", type(exc).__name__, str(exc))
    if isinstance(out, Respond):
        return ("respond", bytes(out.frame), out.delay_ms, out.mute_ms)
    if isinstance(out, Forward):
        return ("forward", out.frame is args[-1], out.throttle_ms)
    if isinstance(out, Defer):
        return ("defer",)
    if isinstance(out, FrameHead):
        return ("head", out is args[-1])
    if isinstance(out, bytes | memoryview):
        return ("frame", out is args[-1], bytes(out))
    return (type(out).__name__, bytes(out.frame))  # an Answer


def _quota_change(rng: random.Random, worlds: tuple[World, World]) -> None:
    key = rng.choice((QuotaKey.PRODUCER_BYTE_RATE, QuotaKey.CONSUMER_BYTE_RATE, QuotaKey.REQUEST_PERCENTAGE))
    entity = rng.choice(
        (QuotaEntity(client_id="a"), QuotaEntity(user="alice"), QuotaEntity(client_id="b", user="alice"))
    )
    if key is QuotaKey.REQUEST_PERCENTAGE:
        value: float | None = rng.choice((0.01, 1.0, 1000.0, None))
    else:
        value = rng.choice((0.001, 500.0, 20_000.0, 1e10, None))  # 0.001: throttles beyond an int32's ms
    for world in worlds:
        world.managers.set_quota(entity, key, value)


async def _scenario(seed: int) -> None:
    rng = random.Random(seed)
    kind = rng.choice((SensorKind.WINDOW, SensorKind.WINDOW, SensorKind.TOKEN_BUCKET))
    config = QuotaConfig(
        sensor_kinds={
            QuotaKey.PRODUCER_BYTE_RATE: kind,
            QuotaKey.CONSUMER_BYTE_RATE: kind,
            QuotaKey.REQUEST_PERCENTAGE: SensorKind.WINDOW,
            QuotaKey.CONTROLLER_MUTATION_RATE: SensorKind.TOKEN_BUCKET,
        }
    )
    factory_args = {
        "mode": rng.choice(list(ThrottleMode)),
        "fetch_throttle": rng.choice(list(FetchThrottle)),
        "mute_scope": rng.choice(list(MuteScope)),
    }
    usage = rng.random() < 0.7
    variant = frozenset(v for v in ("logging managers", "fleet", "lookup") if rng.random() < 0.15)
    compiled, python = worlds = (
        World(config, factory_args, usage, variant),
        World(config, factory_args, usage, variant),
    )
    for _ in range(rng.randint(0, 5)):
        _quota_change(rng, worlds)
    for step in range(STEPS):
        if rng.random() < 0.15:
            _quota_change(rng, worlds)
        advance = rng.choice(
            (0, 0, 0, 1, 2, 700, HOUR_MS, HOUR_MS + 1)
        )  # a sensor expires after more than HOUR_MS
        read_before = rng.choice((0, 0, 0, 1, 40_000))
        user = rng.choice(USERS)
        cpu_ns = rng.choice((0, 0, 0, 50_000, 3_000_000))
        muted = rng.choice((0,) * 9 + (250,))
        client_id = rng.choice(CLIENT_IDS)
        for world in worlds:
            world.conn.now += advance
            world.conn.read = world.conn.now - read_before
            world.conn.user = user
            world.conn.cpu_ns += cpu_ns
            world.conn.muted = muted
        if rng.random() < 0.5:
            header, frame = (_produce_request if rng.random() < 0.6 else _fetch_request)(rng, client_id)
            got = _outcome(ClientQuotas.on_request, compiled, header, frame)
            want = _outcome(client_quotas.on_request_in_python, python, header, frame)
        else:
            header, frame = _answer(rng, client_id)
            request = InFlight(header, throttle_ms=rng.choice((0,) * 9 + (120,)))
            got = _outcome(ClientQuotas.on_response, compiled, request, frame)
            want = _outcome(client_quotas.on_response_in_python, python, request, frame)
        assert got == want, (seed, step)
        assert compiled.state() == python.state(), (seed, step)


@pytest.mark.parametrize("seed", range(SCENARIOS))
def test_the_compiled_methods_do_what_the_python_ones_do_on_random_traffic(seed: int) -> None:
    asyncio.run(_scenario(seed))  # (the entity gates' timers need a loop; none fires: nothing is awaited)


def _never_binding() -> World:
    """A world with quotas of the three keys configured for client-id "a", none of which binds."""
    world = World(QuotaConfig(), {}, usage=True)
    for key, bound in (
        (QuotaKey.PRODUCER_BYTE_RATE, 1e10),
        (QuotaKey.CONSUMER_BYTE_RATE, 1e10),
        (QuotaKey.REQUEST_PERCENTAGE, 1000.0),
    ):
        world.managers.set_quota(QuotaEntity(client_id="a"), key, bound)
    return world


class _Counted:
    """The compiled methods bound again over counting Python references; bound back as they were after."""

    def __init__(self) -> None:
        self.calls: list[str] = []

        def request(f: ClientQuotas, header: RequestHeader, frame: Any) -> Any:
            self.calls.append(f"request {header.api_key}")
            return client_quotas.on_request_in_python(f, header, frame)

        def response(f: ClientQuotas, request: InFlight, frame: Any) -> Any:
            self.calls.append(f"response {request.header.api_key}")
            return client_quotas.on_response_in_python(f, request, frame)

        self.on_request, self.on_response = client_quotas.compiled_twins_of(request, response)

    def __enter__(self) -> _Counted:
        return self

    def __exit__(self, *_exc: object) -> None:
        client_quotas.compiled_twins_of(
            client_quotas.on_request_in_python, client_quotas.on_response_in_python
        )


def test_the_common_cases_never_reach_the_python() -> None:
    """Quotas configured and none binding: a Produce read in this ms, a Fetch whose cap was remembered, and
    their answers are answered by the compiled methods themselves; the rest is the Python's."""

    async def run() -> list[str]:
        world = _never_binding()
        with _Counted() as counted:
            produce_frame = _produce("a")
            produce = parse_request_header(produce_frame)
            fetch, fetch_frame = _fetch_request(random.Random(4), "a")
            assert fetch.api_key == ApiKey.FETCH
            assert counted.on_request(world.filter, fetch, fetch_frame) is fetch_frame  # the cap, remembered
            counted.calls.clear()
            for _ in range(3):
                world.conn.cpu_ns = 10_000
                assert counted.on_request(world.filter, produce, produce_frame) is produce_frame
                assert counted.on_request(world.filter, fetch, fetch_frame) is fetch_frame
                for header, frame in (
                    (produce, _produce_answer(3, 0)),
                    (fetch, _fetch_answer(12, 0, 100, 0)),
                ):
                    assert counted.on_response(world.filter, InFlight(header), frame) is frame
            assert counted.calls == []
            world.conn.read -= 1  # read in an earlier ms: its deadline is read
            counted.on_request(world.filter, produce, produce_frame)
            world.conn.read += 1
            counted.on_request(world.filter, produce, frame=produce_frame)  # keywords
            world.conn.muted = 5
            counted.on_response(world.filter, InFlight(produce), _produce_answer(3, 0))
            world.conn.muted = 0
            counted.on_response(world.filter, InFlight(produce, throttle_ms=3), _produce_answer(3, 0))
            versions = RequestHeader(int(ApiKey.API_VERSIONS), 3, 1, "a", 10)
            counted.on_response(
                world.filter, InFlight(versions), encode_response(ApiKey.API_VERSIONS, 3, 1, b"\x00" * 8)
            )
            counted.on_response(world.filter, InFlight(produce), frame=_produce_answer(3, 0))  # keywords
            return counted.calls

    produce, versions = int(ApiKey.PRODUCE), int(ApiKey.API_VERSIONS)
    assert asyncio.run(run()) == [
        f"request {produce}",
        f"request {produce}",
        f"response {produce}",
        f"response {produce}",
        f"response {versions}",
        f"response {produce}",
    ]


def test_a_produce_with_no_producer_quota_is_the_compiled_methods_own_unless_it_holds_a_turn() -> None:
    """No quota configured at all (a proxy before its first quota): every Produce is handed on by the compiled
    method itself, as the Python hands it on; one that still holds a turn at a gate (its quota went while it
    waited) is the Python's, which lets the turn go."""

    async def run() -> tuple[list[str], list[Any]]:
        world = World(QuotaConfig(), {}, usage=True)
        produce_frame = _produce("a")
        produce = parse_request_header(produce_frame)
        with _Counted() as counted:
            for _ in range(3):
                assert counted.on_request(world.filter, produce, produce_frame) is produce_frame
            assert counted.calls == []
            turn = asyncio.get_running_loop().create_future()
            turn.set_result(None)
            world.filter._turn = turn
            assert counted.on_request(world.filter, produce, produce_frame) is produce_frame
            calls = list(counted.calls)
        left = []
        for method in (ClientQuotas.on_request, client_quotas.on_request_in_python):
            world = World(QuotaConfig(), {}, usage=True)
            turn = asyncio.get_running_loop().create_future()
            turn.set_result(None)
            world.filter._turn = turn
            out = method(world.filter, produce, produce_frame)
            left.append((out is produce_frame, world.filter._turn, world.state()))
        return calls, left

    calls, (compiled, python) = asyncio.run(run())
    assert calls == [f"request {int(ApiKey.PRODUCE)}"]
    assert compiled == python
    assert compiled[1] is None  # the turn let go


def test_malformed_calls_are_answered_as_the_python_answers_them() -> None:
    """Short NamedTuples (read by index in C, by name in Python), extra keywords and arguments: the same
    answer or error from both, with nothing charged by the compiled method before it hands them over."""

    async def run() -> None:
        worlds = [_never_binding(), _never_binding()]
        produce_frame = _produce("a")
        produce = parse_request_header(produce_frame)
        short_header = tuple.__new__(RequestHeader, tuple(produce)[:4])
        shorter_header = tuple.__new__(RequestHeader, tuple(produce)[:3])
        long_header = tuple.__new__(RequestHeader, (*produce, 1))
        answer = _produce_answer(3, 0)
        calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
            ("request", (short_header, produce_frame), {}),
            ("request", (long_header, produce_frame), {}),
            ("request", (produce, produce_frame), {"extra": 1}),
            ("request", (produce,), {"frame": produce_frame}),
            ("request", (produce, produce_frame, None), {}),
            ("response", (tuple.__new__(InFlight, (produce,)), answer), {}),
            ("response", (tuple.__new__(InFlight, (produce, None)), answer), {}),
            ("response", (InFlight(short_header), answer), {}),
            ("response", (InFlight(shorter_header), answer), {}),
            ("request", (shorter_header, produce_frame), {}),
            ("response", (InFlight(produce), answer), {"extra": 1}),
            ("response", (InFlight(produce),), {"frame": answer}),
            ("response", (InFlight(produce), answer, None), {}),
        ]
        for side, args, kwargs in calls:
            outcomes = []
            for world, method in zip(
                worlds,
                (
                    ClientQuotas.on_request if side == "request" else ClientQuotas.on_response,
                    client_quotas.on_request_in_python
                    if side == "request"
                    else client_quotas.on_response_in_python,
                ),
                strict=True,
            ):
                world.conn.cpu_ns = 5_000
                try:
                    out = method(world.filter, *args, **kwargs)
                    outcomes.append(("answered", bytes(out) if isinstance(out, bytes | memoryview) else out))
                except Exception as exc:
                    outcomes.append(("raised", type(exc).__name__))
            assert outcomes[0] == outcomes[1], (side, args, kwargs)
            assert worlds[0].state() == worlds[1].state(), (side, args, kwargs)

    asyncio.run(run())


class _OwnCharge(ClientQuotas):
    """A subclass with its own charge of a Produce: the compiled methods hand its calls to the Python."""

    __slots__ = ()

    def _charge_produce(self, header: RequestHeader, frame: Any) -> Any:
        return Forward(frame, 7)


def test_a_subclass_of_the_filter_runs_its_own_helpers() -> None:
    async def run() -> Any:
        world = _never_binding()
        own = _OwnCharge(world.conn, world.factory)  # type: ignore[arg-type]
        produce_frame = _produce("a")
        return ClientQuotas.on_request(own, parse_request_header(produce_frame), produce_frame)

    out = asyncio.run(run())
    assert isinstance(out, Forward) and out.throttle_ms == 7


def test_a_produce_let_in_by_its_turn_at_the_gate_is_the_pythons() -> None:
    """A Produce that waited at its entity's gate and was let in comes back to on_request with its turn
    done: the Python charges it and forgets the turn; the compiled method hands it over."""

    async def run() -> list[Any]:
        seen = []
        for method in (ClientQuotas.on_request, client_quotas.on_request_in_python):
            world = _never_binding()
            produce_frame = _produce("a")
            produce = parse_request_header(produce_frame)
            turn = asyncio.get_running_loop().create_future()
            turn.set_result(None)  # let in
            world.filter._turn = turn
            out = method(world.filter, produce, produce_frame)
            seen.append((out is produce_frame, world.filter._turn, world.state()))
        return seen

    compiled, python = asyncio.run(run())
    assert compiled == python
    assert compiled[1] is None  # the turn forgotten


def test_the_compiled_methods_leak_nothing() -> None:
    """Neither on the common path nor on a throttled one: a Fetch answer of a size beyond the small ints',
    whose header size and charged size the compiled method makes and must give up, and throttles told."""

    async def run(throttled: bool) -> tuple[int, int]:
        world = World(QuotaConfig(), {"mute_scope": MuteScope.CONNECTION}, usage=False)
        bounds = ((1e10, 1e10, 1000.0), (500.0, 500.0, 0.01))[throttled]
        for key, bound in zip(
            (QuotaKey.PRODUCER_BYTE_RATE, QuotaKey.CONSUMER_BYTE_RATE, QuotaKey.REQUEST_PERCENTAGE),
            bounds,
            strict=True,
        ):
            world.managers.set_quota(QuotaEntity(client_id="a"), key, bound)
        produce_frame = _produce("a")
        produce = parse_request_header(produce_frame)
        fetch, fetch_frame = _fetch_request(random.Random(4), "a")
        answers = (
            (InFlight(produce), _produce_answer(3, 0)),
            (InFlight(fetch), _fetch_answer(12, 0, 3000, 0)),
        )

        def traffic(times: int) -> None:
            for i in range(times):
                world.conn.now += i % 2
                world.conn.read = world.conn.now
                world.conn.cpu_ns = 1000 * (i % 3)
                ClientQuotas.on_request(world.filter, produce, produce_frame)
                ClientQuotas.on_request(world.filter, fetch, fetch_frame)
                for request, frame in answers:
                    ClientQuotas.on_response(world.filter, request, frame)

        traffic(1000)
        gc.collect()
        blocks, refs = sys.getallocatedblocks(), sum(map(sys.getrefcount, (0, -1, 1, 4)))
        traffic(5000)
        gc.collect()
        return sys.getallocatedblocks() - blocks, sum(map(sys.getrefcount, (0, -1, 1, 4))) - refs

    for throttled in (False, True):
        blocks, refs = asyncio.run(run(throttled))
        assert blocks < 50, throttled
        assert refs < 50, throttled


def test_an_install_without_the_compiled_methods_runs_the_python_ones() -> None:
    check_without(
        "sluice.proxy.filters._client_quotas",
        "from sluice.proxy.filters import client_quotas as c\n"
        "assert c.ClientQuotas.on_request is c.on_request_in_python\n"
        "assert c.ClientQuotas.on_response is c.on_response_in_python\n",
    )


class _Slotted:
    __slots__ = ("enabled_bits", "version")


class _Unslotted:
    enabled_bits = version = 0


class _ForeignSlots:
    """Another class's slot descriptors set as attributes: their offsets mean nothing in this class."""

    enabled_bits = _Slotted.enabled_bits
    version = _Slotted.version


@pytest.mark.parametrize("rules", [_Unslotted, _ForeignSlots])
def test_a_bind_naming_what_is_not_a_slot_is_refused(monkeypatch: pytest.MonkeyPatch, rules: type) -> None:
    """The compiled methods read the slots of the classes bound, at their offsets: a class whose attribute
    is not a slot of its own layout is refused, and the methods bound before go on as they were."""
    monkeypatch.setattr(client_quotas, "QuotaRules", rules)
    with pytest.raises(TypeError, match="is not a slot"):
        client_quotas.compiled_twins_of(
            client_quotas.on_request_in_python, client_quotas.on_response_in_python
        )
    monkeypatch.undo()
    test_the_compiled_methods_do_what_the_python_ones_do_on_random_traffic(0)
