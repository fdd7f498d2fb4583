"""proxy/filters/_client_quotas.c: the compiled `ClientQuotas.on_response` does what the Python one does.

Two worlds, each with its own quota managers, throttle stats, usage records and connection, take the same
random answers, one through each twin: Produce, Fetch and ShareFetch answers of several versions (and an
ApiVersions answer, which is not charged), for several users and client-ids; requests that earned a throttle
as they were forwarded; a connection muted now and then; CPU time to charge or none; the clock moving by
milliseconds and now and then by more than a sensor's hour; quotas of each key set and removed (low enough
to throttle), window and token-bucket sensors, all four throttle modes. After every answer both worlds are the
same: what was answered (or raised), the connection's CPU time, the filter's memos and touched series, every
sensor's measure and last record, the stats' series and the usage records. The quota filter's own tests
(test_filter_chain, test_throttling, ...) run the compiled one, as the proxy does where the install has it.
"""

from __future__ import annotations

import gc
import random
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest
from kafka.protocol.consumer import FetchResponse
from kafka.protocol.producer import ProduceResponse

from sluice.config.quota_settings import FetchThrottle, ThrottleMode
from sluice.protocol.api_keys import ApiKey
from sluice.protocol.headers import RequestHeader, encode_response
from sluice.proxy.filter_api.contract import InFlight, Respond
from sluice.proxy.filters import client_quotas
from sluice.proxy.filters.client_quotas import ClientQuotas, ClientQuotasFactory
from sluice.proxy.observability.quota_metrics import ThrottleStats
from sluice.quota import ANONYMOUS, QuotaEntity, QuotaKey, QuotaManagers
from sluice.quota.keys import SensorKind
from sluice.quota.quota_config import QuotaConfig

SCENARIOS = 120
STEPS = 40
USERS = (ANONYMOUS, "alice")
CLIENT_IDS = ("a", "b", None)
HOUR_MS = 3_600_000


def test_this_install_runs_the_compiled_on_response() -> None:
    assert ClientQuotas.on_response is not client_quotas.on_response_in_python, (
        "built without _client_quotas.c"
    )
    assert type(ClientQuotas.on_response).__name__ == "method_descriptor"


class Connection:
    """The parts of ConnectionInfo the quota filter asks, on a clock moved by hand."""

    def __init__(self) -> None:
        self.now = 10_000_000
        self.peer, self.upstream_peer, self.listener = "127.0.0.1:1", "127.0.0.1:2", "bootstrap"
        self.user = ANONYMOUS
        self.cpu_ns = 0
        self.muted = 0
        self.asked: list[str] = []

    def now_ms(self) -> int:
        self.asked.append("now")
        return self.now

    def read_ms(self) -> int:
        return self.now

    def take_cpu_ns(self) -> int:
        self.asked.append("cpu")
        spent, self.cpu_ns = self.cpu_ns, 0
        return spent

    def mute_remaining_ms(self) -> int:
        # (not in `asked`: a query, which the compiled method asks once more when it hands a muted
        # connection's answer to the Python)
        return self.muted


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


class World:
    def __init__(self, config: QuotaConfig, factory_args: dict[str, Any], usage: bool) -> None:
        self.managers = QuotaManagers(config)
        self.stats = ThrottleStats()
        self.usage = Usage() if usage else None
        self.stats.usage = self.usage
        self.conn = Connection()
        factory = ClientQuotasFactory(self.managers, stats=self.stats, **factory_args)
        self.filter = factory.create(self.conn)  # type: ignore[arg-type]

    def state(self) -> dict[str, Any]:
        f = self.filter
        sensors = {}
        for key in ("produce", "fetch", "request"):
            manager = getattr(self.managers, key)
            for tags, sensor in manager.sensors():
                sensors[(key, tags)] = (sensor.measure(self.conn.now), sensor.last_record_ms)
        return {
            "cpu_ns": self.conn.cpu_ns,
            "asked": list(self.conn.asked),
            "checked": f._request_checked,
            "touched": (f._request_touched, f._fetch_touched, dict(f._touched)),
            "sensors": sensors,
            "by_quota": dict(self.stats.by_quota),
            "by_response": dict(self.stats.by_response),
            "usage": None if self.usage is None else dict(self.usage.entities),
        }


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


def _answer(rng: random.Random) -> tuple[RequestHeader, bytes | memoryview]:
    client_id = rng.choice(CLIENT_IDS)
    roll = rng.random()
    if roll < 0.45:
        version = rng.randint(3, 11)
        key, frame = ApiKey.PRODUCE, _produce_answer(version, rng.choice((0, 0, 5000)))
    elif roll < 0.85:
        version = rng.randint(4, 12)
        error = rng.choice((0, 0, 0, 1))
        key, frame = (
            ApiKey.FETCH,
            _fetch_answer(version, rng.choice((0, 0, 9000)), rng.randint(0, 3000), error),
        )
    elif roll < 0.93:
        # A ShareFetch answer's bytes as a Fetch's: charged alike; its throttle field read as it is
        version = rng.randint(1, 1)
        key, frame = ApiKey.SHARE_FETCH, _fetch_answer(12, 0, rng.randint(0, 500), 0)
    else:
        version, key, frame = 3, ApiKey.API_VERSIONS, encode_response(ApiKey.API_VERSIONS, 3, 1, b"\x00" * 8)
    header = RequestHeader(int(key), version, 1, client_id, 10)
    return header, (memoryview(frame) if rng.random() < 0.5 else frame)


def _outcome(method: Any, world: World, request: InFlight, frame: bytes | memoryview) -> Any:
    try:
        out = method(world.filter, request, frame)
    except Exception as exc:  # the same error from both, if any
        return ("raised", type(exc).__name__, str(exc))
    if isinstance(out, Respond):
        return ("respond", bytes(out.frame), out.delay_ms, out.mute_ms)
    return ("frame", bytes(out))


def _quota_change(rng: random.Random, worlds: tuple[World, World]) -> None:
    key = rng.choice((QuotaKey.PRODUCER_BYTE_RATE, QuotaKey.CONSUMER_BYTE_RATE, QuotaKey.REQUEST_PERCENTAGE))
    entity = rng.choice(
        (QuotaEntity(client_id="a"), QuotaEntity(user="alice"), QuotaEntity(client_id="b", user="alice"))
    )
    if key is QuotaKey.REQUEST_PERCENTAGE:
        value: float | None = rng.choice((0.01, 1.0, 1000.0, None))
    else:
        value = rng.choice((500.0, 20_000.0, 1e10, None))
    for world in worlds:
        world.managers.set_quota(entity, key, value)


@pytest.mark.parametrize("seed", range(SCENARIOS))
def test_the_compiled_on_response_does_what_the_python_one_does_on_random_answers(seed: int) -> None:
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
    factory_args = {"mode": rng.choice(list(ThrottleMode)), "fetch_throttle": rng.choice(list(FetchThrottle))}
    usage = rng.random() < 0.7
    compiled, python = worlds = (World(config, factory_args, usage), World(config, factory_args, usage))
    for _ in range(rng.randint(0, 3)):
        _quota_change(rng, worlds)
    for step in range(STEPS):
        if rng.random() < 0.15:
            _quota_change(rng, worlds)
        advance = rng.choice((0, 0, 0, 1, 2, 700, HOUR_MS + 1))
        user = rng.choice(USERS)
        cpu_ns = rng.choice((0, 0, 0, 50_000, 3_000_000))
        muted = rng.choice((0,) * 9 + (250,))
        header, frame = _answer(rng)
        earned = rng.choice((0,) * 9 + (120,))
        for world in worlds:
            world.conn.now += advance
            world.conn.user = user
            world.conn.cpu_ns += cpu_ns
            world.conn.muted = muted
        request = InFlight(header, throttle_ms=earned)
        got = _outcome(ClientQuotas.on_response, compiled, request, frame)
        want = _outcome(client_quotas.on_response_in_python, python, request, frame)
        assert got == want, (seed, step)
        assert compiled.state() == python.state(), (seed, step)


def test_an_answer_in_the_common_case_never_reaches_the_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Produce and a Fetch answer, quotas configured and none binding: the compiled method answers them
    itself; a muted connection, an earned throttle and an uncharged API are the Python's."""
    calls: list[int] = []
    world = World(QuotaConfig(), {}, usage=True)
    world.managers.set_quota(QuotaEntity(client_id="a"), QuotaKey.PRODUCER_BYTE_RATE, 1e10)
    world.managers.set_quota(QuotaEntity(client_id="a"), QuotaKey.CONSUMER_BYTE_RATE, 1e10)
    world.managers.set_quota(QuotaEntity(client_id="a"), QuotaKey.REQUEST_PERCENTAGE, 1000.0)
    reference = client_quotas.on_response_in_python

    def counting(self: ClientQuotas, request: InFlight, frame: Any) -> Any:
        calls.append(request.header.api_key)
        return reference(self, request, frame)

    monkeypatch.setattr(client_quotas, "on_response_in_python", counting)
    method = _rebound(counting)
    produce = RequestHeader(int(ApiKey.PRODUCE), 9, 1, "a", 10)
    fetch = RequestHeader(int(ApiKey.FETCH), 12, 1, "a", 10)
    for header, frame in ((produce, _produce_answer(9, 0)), (fetch, _fetch_answer(12, 0, 100, 0))):
        world.conn.cpu_ns = 10_000
        assert method(world.filter, InFlight(header), frame) is frame
    assert calls == []
    world.conn.muted = 5
    method(world.filter, InFlight(produce), _produce_answer(9, 0))
    world.conn.muted = 0
    method(world.filter, InFlight(produce, throttle_ms=3), _produce_answer(9, 0))
    versions = RequestHeader(int(ApiKey.API_VERSIONS), 3, 1, "a", 10)
    method(world.filter, InFlight(versions), encode_response(ApiKey.API_VERSIONS, 3, 1, b"\x00" * 8))
    method(world.filter, InFlight(produce), frame=_produce_answer(9, 0))  # keywords
    assert calls == [ApiKey.PRODUCE, ApiKey.PRODUCE, ApiKey.API_VERSIONS, ApiKey.PRODUCE]


def _rebound(reference: Any) -> Any:
    """The compiled method bound again with `reference` as its Python (restored by the caller's bind)."""
    from sluice.protocol.headers import response_header_size
    from sluice.proxy.filters import _client_quotas
    from sluice.quota.entities import QuotaRules
    from sluice.quota.managers import NANOS_TO_PERCENTAGE_PER_SECOND, ClientQuotaManager, RequestQuotaManager
    from sluice.quota.sensor import INACTIVE_SENSOR_EXPIRATION_MS, WindowQuotaSensor
    from sluice.quota.throttle import to_int32

    def bind(python: Any) -> Any:
        return _client_quotas.bind(
            ClientQuotas,
            python,
            InFlight,
            RequestHeader,
            client_quotas._UNCHARGED_KEYS,
            client_quotas._FETCHES,
            response_header_size,
            ClientQuotaManager,
            RequestQuotaManager,
            WindowQuotaSensor,
            QuotaRules,
            NANOS_TO_PERCENTAGE_PER_SECOND,
            INACTIVE_SENSOR_EXPIRATION_MS,
            to_int32,
        )

    method = bind(reference)
    _rebinds.append(lambda: bind(client_quotas.on_response_in_python))
    return method


_rebinds: list[Any] = []


@pytest.fixture(autouse=True)
def _bound_back() -> Any:
    yield
    while _rebinds:
        _rebinds.pop()()


def test_the_compiled_on_response_leaks_nothing() -> None:
    world = World(QuotaConfig(), {}, usage=True)
    world.managers.set_quota(QuotaEntity(client_id="a"), QuotaKey.CONSUMER_BYTE_RATE, 1e10)
    world.managers.set_quota(QuotaEntity(client_id="a"), QuotaKey.REQUEST_PERCENTAGE, 1000.0)
    header = RequestHeader(int(ApiKey.FETCH), 12, 1, "a", 10)
    frame = _fetch_answer(12, 0, 100, 0)
    request = InFlight(header)

    def run(times: int) -> None:
        for i in range(times):
            world.conn.now += i % 2
            world.conn.cpu_ns = 1000 * (i % 3)
            ClientQuotas.on_response(world.filter, request, frame)

    run(1000)
    gc.collect()
    before_blocks, before_refs = sys.getallocatedblocks(), sys.getrefcount(0) + sys.getrefcount(-1)
    run(5000)
    gc.collect()
    assert sys.getallocatedblocks() - before_blocks < 50
    assert sys.getrefcount(0) + sys.getrefcount(-1) - before_refs < 50


def test_an_install_without_the_compiled_on_response_runs_the_python() -> None:
    code = (
        "import sys; sys.modules['sluice.proxy.filters._client_quotas'] = None\n"
        "from sluice.proxy.filters import client_quotas as c\n"
        "assert c.ClientQuotas.on_response is c.on_response_in_python\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_bind_naming_what_is_not_a_slot_is_refused() -> None:
    from sluice.proxy.filters import _client_quotas

    class NotSlotted(ClientQuotas):
        pass

    args: list[Any] = [NotSlotted] + [None] * 13
    with pytest.raises(TypeError):
        _client_quotas.bind(*args)
