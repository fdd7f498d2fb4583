"""proxy/filters/_broker_rewrite.c: the compiled `BrokerAddressRewrite.on_response` does what the Python one
does (`broker_rewrite.on_response_in_python`, its reference).

Two worlds, one on each twin, take the same random answers: Produce and Fetch of versions before, at and
after those that may carry NodeEndpoints (KIP-951), with and without endpoints, whole, cut short, with a
response header carrying tagged fields, beyond the newest version the filter reads, as bytes, read-only and
writable views, views of other formats, reversed and released, and a bytearray; Metadata and FindCoordinator
answers; keys and versions as enums, out of every table or beyond a C long; filters whose usage records read
a Fetch answer's topics, filters whose do not, and one whose flag refuses to say; directories that answer,
and ones that raise. After every answer both worlds hold the same: what the filter returned (the very frame
when nothing changed) or raised, the addresses asked of the directory, the counts, and the walk each left
for the filters after it (protocol/response_walks.py). The filter's own tests
(test_unvetted_apis, test_filter_chain, the end-to-end rewrite) run the compiled one, as the proxy does.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from kafka_schemas import SHARED_MISSING
from node_endpoint_answers import REAL, answer
from without_module import check_without

from sluice.protocol import response_walks
from sluice.protocol.api_keys import ApiKey
from sluice.protocol.errors import ProtocolError
from sluice.protocol.headers import encode_request_header, encode_response, frame, parse_request_header
from sluice.protocol.node_endpoints import NODE_ENDPOINTS_FROM, NODE_ENDPOINTS_MAX_VERSIONS
from sluice.proxy.filter_api.contract import TABLE_SIZE, InFlight
from sluice.proxy.filters import broker_rewrite
from sluice.proxy.filters.broker_rewrite import BrokerAddressRewrite, BrokerAddressRewriteFactory

SCENARIOS = 120
STEPS = 30
PRODUCE, FETCH, METADATA = ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.METADATA
ENDPOINT_KEYS = [PRODUCE, FETCH] + (
    [ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE] if SHARED_MISSING is None else []
)


def _compiled() -> Any:
    method = BrokerAddressRewrite.on_response
    assert method is not broker_rewrite.on_response_in_python, "built without proxy/filters/_broker_rewrite.c"
    return method


def test_this_install_runs_the_compiled_answer_rewrite() -> None:
    assert type(_compiled()).__name__ == "method_descriptor"
    assert _compiled().__objclass__ is BrokerAddressRewrite


class _Directory:
    """The broker directory as the filter uses it: `advertise` answers a proxy address, or None (no listener)
    for node 3, or raises `fails` for node 2 (when given), and keeps what it was asked."""

    def __init__(self, fails: Exception | None = None) -> None:
        self.asked: list[tuple[int, str, int]] = []
        self.fails = fails

    def advertise(self, node_id: int, host: str, port: int) -> tuple[str, int] | None:
        self.asked.append((node_id, host, port))
        if node_id == 2 and self.fails is not None:
            raise self.fails
        return None if node_id == 3 else ("sluice.example", 9000 + node_id)


class _Refusing:
    """A flag that refuses to say whether it is set."""

    def __bool__(self) -> bool:
        raise RuntimeError("no truth")


class _World:
    def __init__(self, fetch_topics_read: object, fails: Exception | None = None) -> None:
        self.directory = _Directory(fails)
        self.factory = BrokerAddressRewriteFactory(self.directory, fetch_topics_read=True)  # type: ignore[arg-type]
        self.filter = self.factory.create(object())  # type: ignore[arg-type]
        self.filter._fetch_topics_read = fetch_topics_read  # type: ignore[assignment]


def _with_tagged_header(data: bytes) -> bytes:
    """`data` (a whole answer with an empty response header tag block) with one tagged field in its header."""
    body = data[9:]
    return frame(data[4:8] + b"\x01\x00\x02ab" + body)


def _answer(rng: random.Random) -> tuple[Any, Any]:
    """(the InFlight entry, the answer's frame in one of the shapes a filter may be handed)."""
    kind = rng.random()
    if kind < 0.1:  # the APIs whose brokers are rewritten by the Python only
        key, version = rng.choice(
            [(METADATA, rng.randint(1, 12)), (ApiKey.FIND_COORDINATOR, rng.randint(0, 4))]
        )
        data = encode_response(key, version, 7, b"\x00" * rng.randint(0, 12))
    else:
        key = rng.choice(ENDPOINT_KEYS)
        first, newest = NODE_ENDPOINTS_FROM[key], NODE_ENDPOINTS_MAX_VERSIONS[key]
        version = rng.choice([*range(max(first - 3, 0), first), *range(first, newest + 1), newest + 1])
        if version < first or version > newest:
            data = encode_response(key, version, 7, b"\x00" * rng.randint(0, 40))
        else:
            _schema, body = answer(key, version, rng.choice([REAL, REAL, [], [(2, "k", 1)]]))
            data = encode_response(key, version, 7, body)
    shape = rng.random()
    if shape < 0.1:
        data = data[: rng.randint(0, len(data) - 1)]  # cut short (or too short for a header)
    elif shape < 0.2 and len(data) > 9:
        data = _with_tagged_header(data)
    header = parse_request_header(frame(encode_request_header(key, version, 7, "pump") + b"\x00" * 4))
    if rng.random() < 0.1:  # keys and versions of other kinds: enums, beyond the tables, beyond a C long
        odd = rng.choice(["enum", "key", "version"])
        if odd == "enum":
            header = header._replace(api_key=ApiKey(key))
        elif odd == "key":
            header = header._replace(api_key=rng.choice([-1, TABLE_SIZE, 10**30]))
        else:
            header = header._replace(api_version=rng.choice([-(10**30), 10**30, -1]))
    holder = rng.choice(
        ["bytes", "view", "view", "readonly", "writable", "bytearray", "words", "chars", "back"]
    )
    framed: Any = {
        "bytes": data,
        "view": memoryview(data),
        "readonly": memoryview(bytearray(data)).toreadonly(),
        "writable": memoryview(bytearray(data)),
        "bytearray": bytearray(data),
        "words": memoryview(data[: len(data) // 4 * 4]).cast("i"),
        "chars": memoryview(data).cast("c"),
        "back": memoryview(data)[::-1],
    }[holder]
    if rng.random() < 0.03 and isinstance(framed, memoryview):
        framed.release()
    return InFlight(header), framed


def _outcome(world: _World, method: Any, request: Any, framed: Any) -> tuple[object, ...]:
    response_walks._last = (None, -1, -1, -1)
    response_walks._last_fetch = (None, -1, -1, [])
    try:
        result: object = method(world.filter, request, framed)
        same = result is framed
        returned: object = "the frame" if same else bytes(result)  # type: ignore[arg-type]
    except Exception as exc:  # whatever either raises, the other must raise alike
        returned = (type(exc).__name__, getattr(exc, "reason", None), str(exc))
    last, last_fetch = response_walks._last, response_walks._last_fetch
    walks = tuple(
        (walk[0] is framed, *walk[1:]) if walk[0] is not None else walk for walk in (last, last_fetch)
    )
    asked = list(world.directory.asked)
    world.directory.asked.clear()
    return returned, walks, asked, list(world.factory.counts)


def test_the_compiled_answer_rewrite_does_what_the_python_one_does_on_random_answers() -> None:
    compiled, python = _compiled(), broker_rewrite.on_response_in_python
    for seed in range(SCENARIOS):
        rng = random.Random(seed)
        read = rng.choice([True, False, 1, _Refusing()])
        fails = rng.choice([None, None, RuntimeError("down")])
        worlds = {"compiled": _World(read, fails), "python": _World(read, fails)}
        for _ in range(STEPS):
            request, framed = _answer(rng)
            seen = {
                name: _outcome(world, method, request, framed)
                for (name, world), method in zip(worlds.items(), (compiled, python), strict=True)
            }
            assert seen["compiled"] == seen["python"], (seed, request.header, type(framed))


def _calls_to_the_python() -> tuple[Any, list[str]]:
    calls: list[str] = []

    def python(f: Any, request: InFlight, framed: Any, *more: Any, **keywords: Any) -> Any:
        calls.append(f"{request.header.api_key}")
        return broker_rewrite.on_response_in_python(f, request, framed, *more, **keywords)

    return broker_rewrite.compiled_on_response_of(python), calls


def test_the_compiled_answer_rewrite_hands_the_rest_to_the_python() -> None:
    """Produce and Fetch answers with an empty header tag block are the compiled method's own, rewritten or
    not; the other APIs, a header with tagged fields, a refused walk, keywords and a subclass are the
    Python's."""
    method, calls = _calls_to_the_python()
    try:
        world = _World(True)
        header = parse_request_header(frame(encode_request_header(FETCH, 16, 7, "pump") + b"\x00" * 4))
        _schema, body = answer(FETCH, 16, REAL)
        rewritten = encode_response(FETCH, 16, 7, body)
        assert method(world.filter, InFlight(header), rewritten) != rewritten  # rewritten, in C
        assert world.factory.counts[FETCH] == 2 and len(world.directory.asked) == 2
        plain = encode_response(FETCH, 16, 7, answer(FETCH, 16, [])[1])
        assert method(world.filter, InFlight(header), plain) is plain
        old = parse_request_header(frame(encode_request_header(PRODUCE, 9, 7, "pump") + b"\x00" * 4))
        assert method(world.filter, InFlight(old), b"anything") == b"anything"
        assert calls == []
        method(world.filter, InFlight(header), _with_tagged_header(plain))
        assert calls == [str(FETCH)]
        with pytest.raises(ProtocolError):
            method(world.filter, InFlight(header), plain[:20])  # refused by the walk, then by the Python's
        assert calls == [str(FETCH)] * 2
        metadata = parse_request_header(frame(encode_request_header(METADATA, 12, 7, "pump") + b"\x00" * 4))
        with pytest.raises(ProtocolError):
            method(world.filter, InFlight(metadata), encode_response(METADATA, 12, 7, b""))
        assert calls[-1] == str(METADATA)
        with pytest.raises(TypeError):  # the Python method's refusal of a keyword it does not take
            method(world.filter, InFlight(header), plain, extra=1)
        with pytest.raises(TypeError):  # and of an argument too many
            method(world.filter, InFlight(header), plain, 1)
        assert len(calls) == 5
        # A Produce answer whose header carries tagged fields that, read as a body from where an untagged
        # header would end, walk too: the Python's, walked from where its body begins.
        produce = parse_request_header(frame(encode_request_header(PRODUCE, 10, 7, "pump") + b"\x00" * 4))
        tagged = bytes.fromhex("0000001300000007010106000000010506010000000000")
        assert method(world.filter, InFlight(produce), tagged) is tagged
        assert calls[-1] == str(PRODUCE) and response_walks._last[1:] == (17, 10, 18)
        assert len(calls) == 6

        class OwnRewrite(BrokerAddressRewrite):
            __slots__ = ()

            def _endpoints_rewritten(self, *args: Any) -> bytes:
                return b"its own"

        own = OwnRewrite(object(), world.directory, world.factory.counts, True)  # type: ignore[arg-type]
        assert method(own, InFlight(header), rewritten) == b"its own"  # its helper, through the Python
        assert len(calls) == 7
    finally:
        # the proxy's own binding again (bind replaced what the module's twin hands over)
        BrokerAddressRewrite.on_response = broker_rewrite.compiled_on_response_of(
            broker_rewrite.on_response_in_python
        )


def test_a_directory_refusing_with_a_protocol_error_is_asked_again_by_the_python() -> None:
    """A ProtocolError out of the walk goes to the Python, which walks the answer again: a directory raising
    one is asked twice for the address it refused (docs/architecture.md), and the answer is refused alike."""
    header = parse_request_header(frame(encode_request_header(FETCH, 16, 7, "pump") + b"\x00" * 4))
    data = encode_response(FETCH, 16, 7, answer(FETCH, 16, REAL)[1])
    seen = {}
    for name, method in (("compiled", _compiled()), ("python", broker_rewrite.on_response_in_python)):
        world = _World(True, ProtocolError("odd", "a directory's own"))
        returned, walks, asked, counts = _outcome(world, method, InFlight(header), data)
        seen[name] = (returned, walks, counts, asked[-1:])
        assert asked == [REAL[0]] * (2 if name == "compiled" else 1)
    assert seen["compiled"] == seen["python"]


def test_a_version_the_filter_cannot_read_is_refused_as_the_clients_doing() -> None:
    world = _World(False)
    newest = NODE_ENDPOINTS_MAX_VERSIONS[PRODUCE]
    header = parse_request_header(frame(encode_request_header(PRODUCE, newest + 1, 7, "pump") + b"\x00" * 4))
    data = encode_response(PRODUCE, newest + 1, 7, b"\x00" * 16)
    for method in (_compiled(), broker_rewrite.on_response_in_python):
        with pytest.raises(ProtocolError) as refused:
            method(world.filter, InFlight(header), data)
        assert refused.value.reason == "unadvertised_api_version"


def test_bind_refuses_what_it_cannot_read() -> None:
    """A bind handed what it cannot read is refused, and leaves the bind before it whole: the compiled
    method still writes out its common case and hands the rest to the reference it was bound with."""
    from sluice.proxy.filters import _broker_rewrite  # type: ignore[attr-defined]

    method, calls = _calls_to_the_python()  # bound with a reference that records its calls
    refused_reference_calls: list[object] = []
    good = {
        "on_response": lambda *args: refused_reference_calls.append(args),
        "InFlight": InFlight,
        "RequestHeader": type(
            parse_request_header(frame(encode_request_header(0, 9, 7, None) + b"\x00" * 4))
        ),
        "rewrite_node_endpoints": broker_rewrite.rewrite_node_endpoints,
        "ProtocolError": ProtocolError,
        "PRODUCE": 0,
        "endpoints_from": [NODE_ENDPOINTS_FROM.get(key, -1) for key in range(TABLE_SIZE)],
    }

    class Unslotted:  # its attributes are no slots to read at an offset
        _directory = _fetch_topics_read = None

    try:
        wrongs = [("endpoints_from", ["x"]), ("endpoints_from", (1,)), ("PRODUCE", "0"), ("InFlight", 1)]
        for name, wrong in wrongs:
            with pytest.raises(TypeError):
                _broker_rewrite.bind(BrokerAddressRewrite, {**good, name: wrong})
        with pytest.raises(TypeError, match="not a slot"):
            _broker_rewrite.bind(Unslotted, good)
        world = _World(True)
        header = parse_request_header(frame(encode_request_header(FETCH, 16, 7, "pump") + b"\x00" * 4))
        data = encode_response(FETCH, 16, 7, answer(FETCH, 16, REAL)[1])
        assert _outcome(world, method, InFlight(header), data) == _outcome(
            _World(True), broker_rewrite.on_response_in_python, InFlight(header), data
        )
        assert world.factory.counts[FETCH] == 2 and calls == []  # rewritten in C, by the bind before
        metadata = parse_request_header(frame(encode_request_header(METADATA, 12, 7, "pump") + b"\x00" * 4))
        with pytest.raises(ProtocolError):
            method(world.filter, InFlight(metadata), encode_response(METADATA, 12, 7, b""))
        assert calls == [str(METADATA)] and refused_reference_calls == []
    finally:
        BrokerAddressRewrite.on_response = broker_rewrite.compiled_on_response_of(
            broker_rewrite.on_response_in_python
        )


def test_an_install_without_the_compiled_method_runs_the_python_one() -> None:
    check_without(
        "sluice.proxy.filters._broker_rewrite",
        "from sluice.proxy.filters import broker_rewrite as b\n"
        "assert b.BrokerAddressRewrite.on_response is b.on_response_in_python\n",
    )
