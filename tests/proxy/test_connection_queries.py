"""proxy/data_path/_connection_queries.c: ClientSide's compiled queries (`now_ms`, `read_ms`, `take_cpu_ns`,
`mute_remaining_ms`) answer what its Python methods (connection.QUERIES_IN_PYTHON, the references) answer.

Two real ClientSides, one asked through each twin, in the states a connection goes through and some it never
should: loop times and reads as floats (negative, huge, infinite, NaN, beyond the ms), as ints and other
numbers, or missing; CPU time as any int or none set; no gate, a gate not muted, muted, with a mute flag
that is any truthy object or raises. Both must answer alike (or raise alike) and leave the connection alike.
The filters' own tests run the compiled queries through real connections (the end-to-end quota tests).
"""

from __future__ import annotations

import asyncio
import math
import random
from decimal import Decimal
from fractions import Fraction
from types import SimpleNamespace
from typing import Any

from without_module import check_without

from sluice.proxy.data_path import connection
from sluice.proxy.data_path.connection import ClientSide

NAMES = ("now_ms", "read_ms", "take_cpu_ns", "mute_remaining_ms")
SCENARIOS = 3000


def test_this_install_runs_the_compiled_queries() -> None:
    for name in NAMES:
        query = getattr(ClientSide, name)
        assert query is not connection.QUERIES_IN_PYTHON[name], f"built without _connection_queries.c: {name}"
        assert type(query).__name__ == "method_descriptor" and query.__objclass__ is ClientSide


class _Loop:
    def __init__(self, now: object) -> None:
        self.now = now

    def time(self) -> object:
        if isinstance(self.now, BaseException):
            raise self.now
        return self.now


class _Flag:
    """A mute flag that is any object: truthy, falsy, or refusing to say."""

    def __init__(self, truth: bool | None) -> None:
        self.truth = truth

    def __bool__(self) -> bool:
        if self.truth is None:
            raise RuntimeError("no truth")
        return self.truth


class _Gate:
    def __init__(self, muted: object, remaining: object) -> None:
        self.muted = muted
        self.remaining = remaining

    def remaining_ms(self) -> object:
        return self.remaining


class _Seconds(float):
    """A float of its own arithmetic: only an exact float may be multiplied as a C double."""

    def __mul__(self, other: object) -> float:
        return float(self) * 1000 + 0.5 if other == 1000 else NotImplemented


def _number(rng: random.Random) -> object:
    return rng.choice(
        [
            rng.uniform(-1e6, 1e9),
            rng.uniform(0, 1e5),
            float(rng.randint(0, 10**9)) / 1000,
            rng.randint(0, 10**6) / 1000,  # whole ms in float: where x * 1000 lands on or just off an integer
            rng.choice([1.001, 0.001, 2.675, 4.35, 0.1 + 0.2]),
            0.0005,
            -0.0005,
            1e300,
            -1e300,
            math.inf,
            -math.inf,
            math.nan,
            rng.randint(-(10**20), 10**20),
            True,
            Fraction(rng.randint(1, 10**6), 7),
            Decimal("12.3456"),
            _Seconds(rng.uniform(0, 1e5)),
            "12",
            None,
        ]
    )


def _state(rng: random.Random) -> dict[str, Any]:
    state: dict[str, Any] = {}
    if rng.random() < 0.95:
        state["_loop"] = _Loop(ZeroDivisionError("clock") if rng.random() < 0.03 else _number(rng))
    if rng.random() < 0.95:
        state["_last_read"] = _number(rng)
    if rng.random() < 0.95:
        state["cpu_ns"] = rng.choice([0, rng.randint(0, 10**12), 10**30, -5, "x"])
    gate = rng.random()
    if gate < 0.9:
        muted = rng.choice([False, True, 0, 1, _Flag(True), _Flag(False), _Flag(None), [], [0]])
        remaining = rng.choice([0, rng.randint(1, 30_000), -3, "r"])
        state["_gate"] = None if gate < 0.3 else _Gate(muted, remaining)
    return state


class _SubclassedSide(ClientSide):
    """A subclass, with a __dict__ of its own: the compiled queries read its slots by name, not at their
    offsets (which they read in ClientSide's own objects only)."""


def _connection(state: dict[str, Any], cls: type[ClientSide] = ClientSide) -> ClientSide:
    conn = cls.__new__(cls)  # its queries read these attributes only
    for name, value in state.items():
        setattr(conn, name, value)
    return conn


def _answer(query: Any, conn: ClientSide) -> tuple[object, ...]:
    try:
        result = query(conn)
        shown: object = (
            ("nan",) if isinstance(result, float) and math.isnan(result) else (type(result), result)
        )
    except Exception as exc:  # whatever one raises, the other must raise alike
        shown = (type(exc), str(exc))
    return shown, {name: getattr(conn, name, "<unset>") for name in ("cpu_ns",)}


def test_the_compiled_queries_answer_what_the_python_ones_answer() -> None:
    rng = random.Random(2026)
    for scenario in range(SCENARIOS):
        state = _state(rng)
        for name in NAMES:
            compiled, python = getattr(ClientSide, name), connection.QUERIES_IN_PYTHON[name]
            for cls in (ClientSide, _SubclassedSide):
                seen = [_answer(query, _connection(state, cls)) for query in (compiled, python)]
                assert seen[0] == seen[1], (scenario, name, state, cls)


def test_a_live_connection_answers_through_its_loop_and_gate() -> None:
    """On a real connection of a running loop: the loop's clock in ms, the last read's, the CPU time taken
    once, and no mute until its gate is muted."""

    async def ask() -> None:
        settings = SimpleNamespace(
            metrics=None, cpu_time_needed=lambda: True, max_request_bytes=1 << 20, max_frame_bytes=1 << 20
        )
        conn = ClientSide(settings, "test", lambda: [])  # type: ignore[arg-type]
        loop = asyncio.get_running_loop()
        before = int(loop.time() * 1000)
        assert before <= conn.now_ms() <= int(loop.time() * 1000)
        conn._last_read = 12.3456
        assert conn.read_ms() == 12345
        conn.cpu_ns = 777
        assert (conn.take_cpu_ns(), conn.take_cpu_ns()) == (777, 0)
        assert conn.mute_remaining_ms() == 0  # no gate yet
        conn._gate = _Gate(True, 250)  # type: ignore[assignment]
        assert conn.mute_remaining_ms() == 250
        conn._gate.muted = False  # type: ignore[attr-defined]
        assert conn.mute_remaining_ms() == 0

    asyncio.run(ask())


def test_an_install_without_the_compiled_queries_runs_the_python_ones() -> None:
    check_without(
        "sluice.proxy.data_path._connection_queries",
        "from sluice.proxy.data_path import connection as c\n"
        "for name, query in c.QUERIES_IN_PYTHON.items():\n"
        "    assert getattr(c.ClientSide, name) is query, name\n",
    )
