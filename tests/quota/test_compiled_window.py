"""quota/_compiled.c: the compiled SampledRate gives what quota/window.py's gives, after every step of random
histories (int and float values, zero, negative ones as an unrecord's, fractions, infinities and NaN; a
clock that stays, steps, lands on window and expiry boundaries, jumps past expiry and goes backwards), in
both window kinds and over many (N, W); the fused record_and_throttle likewise, and a window sensor on
either twin answers every call the same. Each observable is compared by type and repr, which tells -0.0
from 0.0, 1 from 1.0, and NaN from anything. The Python twin is the reference (its own tests:
test_quota_window, test_quota_properties' model of Kafka's code, test_quota_sensor, which also run on the
compiled one); what the sensors run is the compiled one, where the install has it.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.quota import broker_shield, compiled, window
from sluice.quota.broker_shield import ShieldLimits
from sluice.quota.entities import QuotaEntity
from sluice.quota.errors import QuotaConfigError, QuotaViolation
from sluice.quota.keys import QuotaKey
from sluice.quota.managers import QuotaManagers
from sluice.quota.quota_config import QuotaConfig
from sluice.quota.sensor import WindowQuotaSensor
from sluice.quota.throttle import java_round
from sluice.quota.window import WindowRate

EQUAL = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TIME_LIMIT = 1 << 60


def _compiled_type() -> type[WindowRate]:
    assert compiled.SampledRate is not None, "built without quota/_compiled.c"
    return compiled.SampledRate


def test_this_install_has_the_compiled_rate() -> None:
    # CI builds the wheel and the development install with a C compiler: a rate missing there means the
    # build skipped the extension (pyproject.toml's ext-modules is optional) and the sensors run the Python.
    assert compiled.SampledRate is not None, "built without quota/_compiled.c"
    assert compiled.SAMPLED_RATE is compiled.SampledRate
    # and it is what the window sensors and the broker shield's bytes-in rates are built on
    assert type(WindowQuotaSensor(1000, 0).rate) is compiled.SampledRate
    assert type(WindowQuotaSensor(1000, 0, legacy=True).rate) is compiled.SampledRate
    assert type(broker_shield._Broker(1, ShieldLimits(bytes_in_per_s=300_000)).rate) is compiled.SampledRate
    # as the managers the proxy charges build them, from the quota config
    managers = QuotaManagers(QuotaConfig())
    managers.set_quota(QuotaEntity("u"), QuotaKey.PRODUCER_BYTE_RATE, 100)
    sensor = managers.produce.sensor_for("u", "c", 0)
    assert isinstance(sensor, WindowQuotaSensor)
    assert type(sensor.rate) is compiled.SampledRate


def _same(a: object, b: object) -> bool:
    return type(a) is type(b) and repr(a) == repr(b)


def _outcome(call: object, *args: object) -> tuple[str, object]:
    try:
        return "value", call(*args)  # type: ignore[operator]
    except Exception as exc:
        return type(exc).__name__, str(exc)


_VALUES = st.one_of(
    st.integers(-(10**9), 10**12),
    st.sampled_from([0, 1, -1, 0.0, -0.0, 0.5, -0.5, True]),
    # sums whose rounding depends on their order: the slot-order sum after a reset must be Kafka's
    st.sampled_from([0.1, 1 / 3, 1e16, -1e16, 2.0**-30, 12_345.678]),
    st.integers(-(2**20), 2**20).map(lambda i: i / 8),  # fractions a double holds exactly
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e15, max_value=1e15),
)
_ODD_VALUES = st.one_of(_VALUES, st.floats(), st.sampled_from([math.inf, -math.inf, math.nan, 1e308]))
_BOUNDS = st.one_of(
    st.floats(min_value=1e-300, max_value=1e300),
    st.sampled_from([1.0, 1000.0, 1e-9, 5e-324, 1.7976931348623157e308, 9.223372036854776e18]),
)


@st.composite
def _histories(
    draw: st.DrawFn, values: st.SearchStrategy[float] = _VALUES
) -> tuple[int, int, bool, int, list]:
    n = draw(st.integers(1, 40) | st.sampled_from([1, 2, 11]))
    w = draw(st.sampled_from([1, 2, 7, 100, 1000, 30_000]) | st.integers(1, 5000))
    legacy = draw(st.booleans())
    start = draw(st.sampled_from([0, 1_000_000, -5_000, 1_700_000_000_000]) | st.integers(-(10**12), 10**12))
    windows = st.integers(0, n + 2)
    step = st.one_of(
        st.just(0),
        st.integers(1, 2 * w),
        st.builds(lambda k, d: k * w + d, windows, st.integers(-1, 1)),  # sample boundaries
        st.builds(lambda k, d: k * n * w + d, st.integers(1, 3), st.integers(-1, 1)),  # expiry, and past it
        st.integers(-3 * w, -1),  # the clock going backwards
    )
    op = st.one_of(
        st.tuples(st.just("record"), step, values),
        st.tuples(st.just("fused"), step, values, _BOUNDS),
        st.tuples(st.sampled_from(["total", "window_size_ms", "measure", "live_samples"]), step),
        st.tuples(st.just("clear")),
    )
    return n, w, legacy, start, draw(st.lists(op, max_size=120))


def _replay(case: tuple[int, int, bool, int, list]) -> None:
    n, w, legacy, now, ops = case
    twins = [window.SampledRate(n, w, legacy=legacy), _compiled_type()(n, w, legacy=legacy)]
    for step, (name, *args) in enumerate(ops):
        if args:
            now += args[0]
        call = {
            "record": lambda rate, a=args, t=now: rate.record(a[1], t),
            "fused": lambda rate, a=args, t=now: rate.record_and_throttle(a[1], t, a[2]),
            "clear": lambda rate: rate.clear(),
        }.get(name, lambda rate, name=name, t=now: getattr(rate, name)(t))
        python, built = (_outcome(call, rate) for rate in twins)
        assert python[0] == built[0] and _same(python[1], built[1]), (step, name, now, python, built)
        # repr reads the running total without purging: the state behind every later answer
        assert repr(twins[0]) == repr(twins[1]), (step, name, now)


@EQUAL
@given(case=_histories())
def test_random_histories_answer_the_same_after_every_step(case: tuple[int, int, bool, int, list]) -> None:
    _replay(case)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_histories(_ODD_VALUES))
def test_infinities_and_nan_answer_the_same(case: tuple[int, int, bool, int, list]) -> None:
    _replay(case)


@pytest.mark.parametrize("legacy", [False, True])
def test_a_long_history_fills_the_ring_and_reuses_it(legacy: bool) -> None:
    # 40 samples and 5,000 records: the ring grows past its first allocation, wraps, and is purged.
    ops: list = []
    awkward = [0.1, 1e16, 3.3, -1e16, 1 / 3, 7]  # sums that round differently in another order
    for i in range(5000):
        ops.append(("record", 37 + i % 5, awkward[i % 6] if i % 11 else i % 7 - 1))
        if i % 3 == 0:
            ops.append(("fused", 0, 0.25, 3.5))
        if i % 997 == 0:
            ops.append(("measure", 41 * 1000))  # past expiry
    _replay((40, 100, legacy, 0, ops))


def test_a_sample_is_summed_again_only_when_one_expired() -> None:
    # The sum is redone in slot order only when a sample expired (or the ring advanced): redoing it on
    # every read would round 1e16 + 1 + 1 otherwise than the sum kept by +=.
    rates = [window.SampledRate(2, 1000), _compiled_type()(2, 1000)]
    for rate in rates:
        for value, at in ((1e16, 0), (0, 999), (1, 1000), (1, 500), (1, 1001)):
            rate.record(value, at)
    assert _same(rates[0].total(2500), rates[1].total(2500))
    assert rates[0].total(2500) == 1e16


def test_memory_refused_while_the_ring_grows_leaves_the_rate_as_it_was() -> None:
    _testcapi = pytest.importorskip("_testcapi")  # CPython's test hooks: the allocators can be made to fail
    rate, twin = _compiled_type()(20, 1), window.SampledRate(20, 1)
    for at in range(8):  # the ring's first allocation is 8 samples: the next one grows it
        rate.record(1, at)
        twin.record(1, at)
    _testcapi.set_nomemory(0, 0)
    try:
        rate.record(1, 8)
    except MemoryError:
        pass
    else:
        raise AssertionError("the ring grew with every allocation refused")
    finally:
        _testcapi.remove_mem_hooks()
    for at in range(8, 40):  # the failed record left nothing behind: the rate goes on as its twin
        rate.record(1, at)
        twin.record(1, at)
        assert _same(rate.total(at), twin.total(at))
        assert rate.live_samples(at) == twin.live_samples(at)


def test_a_number_of_samples_or_window_below_one_is_refused_whatever_its_type_says() -> None:
    class Lax(int):
        # an int that passes the twin's `value < 1` check whatever it is
        def __lt__(self, other: object) -> bool:
            return False

    for args in ((2, Lax(0)), (Lax(0), 1000)):
        with pytest.raises(ValueError, match="at least 1"):
            _compiled_type()(*args, legacy=True)


def test_times_up_to_two_to_the_sixty_agree_and_beyond_are_refused() -> None:
    n, w = 4, 1 << 58  # N x W = 2^60, the compiled rate's longest window
    _replay(
        (n, w, False, -TIME_LIMIT, [("record", 0, 5), ("fused", TIME_LIMIT, 7, 1.0), ("measure", TIME_LIMIT)])
    )
    rate = _compiled_type()(n, w)
    for now in (TIME_LIMIT + 1, -TIME_LIMIT - 1, 1 << 63, 1 << 70):
        with pytest.raises(OverflowError):
            rate.record(1, now)
    with pytest.raises(OverflowError):
        _compiled_type()(n + 1, w)
    with pytest.raises(TypeError):
        rate.total(1.5)  # type: ignore[arg-type]


# Throttles just around Java's rounding edges: ties, a hair below one, odd integers from 2^52 (where x + 0.5
# in floating point rounds to the even one above), the long range's end and beyond; each with a window in
# which a recorded value gives exactly that throttle argument.
@pytest.mark.parametrize(
    ("target", "window_ms"),
    [
        (0.5, 1),
        (1.5, 1),
        (2.5, 1),
        (1.4999999999999998, 29),
        (2.0**52 + 1, 1),
        (2.0**53 - 1, 1),
        (2.0**62 + 2048, 1),
        (2.0**63 - 1024, 11),
        (2.0**63, 1),
        (1e300, 1),
    ],
)
def test_the_throttle_rounds_as_javas_math_round(target: float, window_ms: int) -> None:
    # N = 2 and everything at t = 0: a window of W ms, observed = value / (W / 1000.0), and the throttle
    # argument (observed - bound) / bound * W; step the value until that argument is the target.
    bound = 1.0
    value = bound * (1 + target / window_ms) * (window_ms / 1000.0)
    for _ in range(64):
        argument = (value / (window_ms / 1000.0) - bound) / bound * window_ms
        if argument == target:
            break
        value = math.nextafter(value, math.inf if argument < target else -math.inf)
    else:
        pytest.fail(f"no value gives a throttle argument of {target!r}")
    expected = java_round(target)
    twins = (window.SampledRate, _compiled_type())
    answers = [twin(2, window_ms).record_and_throttle(value, 0, bound) for twin in twins]
    assert answers == [expected, expected]
    assert all(type(answer) is int for answer in answers)


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((), {}),
        ((3, 250), {"legacy": True}),
        ((3,), {"legacy": 1}),
        ((3,), {"legacy": ""}),
        ((0, 1000), {}),
        ((11, 0), {}),
        ((True, 1000), {}),
        ((11, False), {}),
        ((2.5, 1000), {}),
        (("3", 1000), {}),
        ((None,), {}),
        ((-1, "x"), {}),  # both wrong: the first is named, as the twin checks in order
        ((3, 250, True), {}),  # legacy is keyword-only
        ((), {"window_ms": 5, "num_samples": 2}),
    ],
)
def test_construction_and_its_errors_are_the_same(args: tuple, kwargs: dict) -> None:
    python, built = (_outcome(lambda t=t: t(*args, **kwargs)) for t in (window.SampledRate, _compiled_type()))
    if python[0] == "value":
        assert built[0] == "value"
        assert repr(python[1]) == repr(built[1])
        for name in ("num_samples", "window_ms", "legacy"):
            assert _same(getattr(python[1], name), getattr(built[1], name)), name
    else:
        assert python[0] == built[0]
        assert python[0] in {"QuotaConfigError", "TypeError"}
        if python[0] == "QuotaConfigError":
            assert python[1] == built[1]


def test_a_config_error_is_the_quota_error_type() -> None:
    with pytest.raises(QuotaConfigError, match="window_ms=0"):
        _compiled_type()(11, 0)


@st.composite
def _sensor_histories(draw: st.DrawFn) -> tuple[float, int, int, bool, list]:
    bound = draw(_BOUNDS | st.integers(1, 10**9))
    n = draw(st.integers(1, 12))
    w = draw(st.sampled_from([1, 100, 1000]) | st.integers(1, 3000))
    step = st.one_of(
        st.just(0), st.integers(1, 2 * w), st.integers(-w, -1), st.integers(n * w - 1, 2 * n * w)
    )
    op = st.one_of(
        st.tuples(st.just("record"), step, _VALUES, st.booleans()),
        st.tuples(st.just("unrecord"), step, _VALUES),
        st.tuples(st.just("throttle_ms"), step, st.floats(-1e12, 1e12)),
        st.tuples(st.sampled_from(["measure", "violated", "check", "window_size_ms", "reset"]), step),
    )
    return bound, n, w, draw(st.booleans()), draw(st.lists(op, max_size=80))


@EQUAL
@given(case=_sensor_histories())
def test_a_window_sensor_answers_the_same_on_either_twin(case: tuple[float, int, int, bool, list]) -> None:
    bound, n, w, legacy, ops = case
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(compiled, "SAMPLED_RATE", window.SampledRate)
        python = WindowQuotaSensor(bound, 0, n, w, legacy=legacy)
    built = WindowQuotaSensor(bound, 0, n, w, legacy=legacy)
    assert type(python.rate) is window.SampledRate
    assert type(built.rate) is _compiled_type()
    now = 0
    for step, (name, dt, *args) in enumerate(ops):
        now += dt
        answers = []
        for sensor in (python, built):
            # (value, now[, check]) for record and unrecord, (now, pending) for throttle_ms, else (now)
            call_args = (now, *args) if name == "throttle_ms" else (*args[:1], now, *args[1:])
            try:
                answers.append(("value", getattr(sensor, name)(*call_args)))
            except QuotaViolation as exc:
                answers.append(("violation", (exc.value, exc.bound, exc.throttle_ms)))
        assert _same(answers[0], answers[1]), (step, name, now, answers)
        assert python.last_record_ms == built.last_record_ms
        assert repr(python) == repr(built)
