"""Property tests (hypothesis) for the quota engine.

* SampledRate against a line-by-line model of Kafka's SampledStat/Rate (object per sample, no caches).
* Window-size bounds, token-bucket cap, throttles never negative, Java rounding.
* A flat-out producer on the simulated clock converges to the quota, for both sensor kinds and record
  sizes from 100 B to 1 MB.
"""

from __future__ import annotations

import math
from fractions import Fraction

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from quota_simulation import Enforcement, FlatOutProducer, SimulationResult, simulate_produce_quota

from sluice.quota.entities import QuotaEntity
from sluice.quota.keys import QuotaKey, SensorKind
from sluice.quota.managers import ClientQuotaManager, RequestQuotaManager, kip219_throttle_ms
from sluice.quota.sensor import TokenBucketQuotaSensor, WindowQuotaSensor
from sluice.quota.throttle import LONG_MAX, java_round, to_int32
from sluice.quota.token_bucket import TokenBucket
from sluice.quota.window import WindowRate

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# On both twins of SampledRate (the rate_type and sensor_rate fixtures: a type, which no example changes).
TWINS = settings(FAST, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


class _KafkaSample:
    def __init__(self, now: int) -> None:
        self.start = now
        self.last = now
        self.value = 0
        self.count = 0

    def reset(self, now: int) -> None:
        self.__init__(now)  # type: ignore[misc]


class _KafkaRate:
    """Kafka's SampledStat + WindowedSum + Rate, transcribed from spec §1.2-§1.3 without shortcuts."""

    def __init__(self, n: int, w: int, legacy: bool) -> None:
        self.n, self.w, self.legacy = n, w, legacy
        self.samples: list[_KafkaSample] = []
        self.cur = 0

    def _current(self, now: int) -> _KafkaSample:
        if not self.samples:
            self.samples.append(_KafkaSample(now))
        return self.samples[self.cur]

    def record(self, value: int, now: int) -> None:
        sample = self._current(now)
        if now - sample.start >= self.w:
            self.cur = (self.cur + 1) % (self.n if self.legacy else self.n + 1)
            if self.cur >= len(self.samples):
                self.samples.append(_KafkaSample(now))
            else:
                self.samples[self.cur].reset(now)
            sample = self.samples[self.cur]
        sample.value += value
        sample.count += 1
        sample.last = now

    def _purge(self, now: int) -> None:
        for sample in self.samples:
            stamp = sample.start if self.legacy else sample.last
            if now - stamp >= self.n * self.w:
                sample.reset(now)

    def total(self, now: int) -> int:
        self._purge(now)
        return sum(s.value for s in self.samples)

    def window_size(self, now: int) -> int:
        self._purge(now)
        if not self.samples:
            self.samples.append(_KafkaSample(now))
        oldest = min(self.samples, key=lambda s: s.start)
        elapsed = now - oldest.start
        full = int(elapsed / self.w)  # Java truncation
        if full < self.n - 1:
            elapsed += (self.n - 1 - full) * self.w
        return max(elapsed, 1)


@st.composite
def _rate_ops(draw: st.DrawFn) -> tuple[int, int, bool, list[tuple[int, int, str]]]:
    n = draw(st.integers(min_value=1, max_value=12))
    w = draw(st.integers(min_value=1, max_value=3000))
    legacy = draw(st.booleans())
    # Clock steps land on window and expiry boundaries (k x W, off by at most 1 ms) as often as not,
    # and sometimes go backwards.
    windows = st.integers(min_value=0, max_value=n + 1)
    boundary = st.builds(lambda k, d: k * w + d, windows, st.integers(min_value=-1, max_value=1))
    step = st.one_of(boundary, st.integers(min_value=-200, max_value=4000))
    value = st.integers(min_value=-5000, max_value=100_000)
    op = st.tuples(step, value, st.sampled_from(["record", "measure"]))
    return n, w, legacy, draw(st.lists(op, max_size=80))


# On both twins of SampledRate (rate_type: a type, which no example can change).
@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=_rate_ops())
def test_sampled_rate_matches_a_plain_model_of_kafkas_code(
    rate_type: type[WindowRate], case: tuple[int, int, bool, list]
) -> None:
    n, w, legacy, ops = case
    rate = rate_type(n, w, legacy=legacy)
    model = _KafkaRate(n, w, legacy)
    now = 1_000_000
    for step, value, op in ops:
        now += step
        if op == "record":
            rate.record(value, now)
            model.record(value, now)
        else:
            assert rate.total(now) == model.total(now)
            assert rate.window_size_ms(now) == model.window_size(now)
            assert rate.measure(now) == model.total(now) / (model.window_size(now) / 1000.0)


@TWINS
@given(
    n=st.integers(min_value=1, max_value=12),
    w=st.integers(min_value=1, max_value=3000),
    legacy=st.booleans(),
    steps=st.lists(st.integers(min_value=0, max_value=5000), min_size=1, max_size=60),
)
def test_window_size_stays_within_its_bounds(
    rate_type: type[WindowRate], n: int, w: int, legacy: bool, steps: list[int]
) -> None:
    rate = rate_type(n, w, legacy=legacy)
    now = 0
    # Spec §1.3. The 1 ms floor can only reach the upper bound when N x W is itself 1 ms.
    upper = max(n * w if legacy else (n + 1) * w, 2)
    for step in steps:
        now += step
        rate.record(1, now)
        assert max((n - 1) * w, 1) <= rate.window_size_ms(now) < upper


@FAST
@given(
    rate=st.floats(min_value=0.001, max_value=1e9),
    n=st.integers(min_value=1, max_value=100),
    w=st.integers(min_value=1, max_value=60_000),
    ops=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=100_000),
            st.floats(min_value=-1e12, max_value=1e12),
            st.one_of(st.none(), st.floats(min_value=0.001, max_value=1e9)),
        ),
        max_size=40,
    ),
)
def test_token_bucket_never_exceeds_its_burst(rate: float, n: int, w: int, ops: list) -> None:
    bucket = TokenBucket(rate, n, w)
    now = 0
    for step, value, new_rate in ops:
        now += step
        if new_rate is not None:
            bucket.rate = new_rate
        bucket.record(value, now)
        assert bucket.measure(now) <= bucket.burst


_sizes = st.lists(
    st.tuples(st.integers(min_value=0, max_value=3000), st.integers(min_value=-50_000, max_value=2_000_000)),
    max_size=60,
)


@TWINS
@given(bound=st.floats(min_value=1, max_value=1e7), kind=st.sampled_from(SensorKind), records=_sizes)
def test_throttles_are_never_negative(
    sensor_rate: type[WindowRate], bound: float, kind: SensorKind, records: list
) -> None:
    producer = ClientQuotaManager(QuotaKey.PRODUCER_BYTE_RATE, sensor_kind=kind)
    producer.update_quota(QuotaEntity("u"), bound)
    request = RequestQuotaManager(sensor_kind=kind)
    request.update_quota(QuotaEntity("u"), bound / 1e5)
    # A twin of the producer's sensor: same kind, bound, N and W, fed the same records.
    sensor = WindowQuotaSensor(bound, 0) if kind is SensorKind.WINDOW else TokenBucketQuotaSensor(bound, 0)
    now = 0
    for step, value in records:
        now += step
        produce_ms = producer.record_and_get_throttle_ms("u", "c", value, now)
        request_ms = request.record_and_get_throttle_ms("u", "c", value / 1e4, now)
        unbounded_ms = sensor.record(value, now)
        assert unbounded_ms >= 0
        assert sensor.throttle_ms(now) >= 0
        # The only way the manager's int32 can be negative is Kafka's wrap beyond 2**31 - 1 ms.
        assert produce_ms == to_int32(unbounded_ms)
        assert 0 <= request_ms <= request.max_throttle_ms
        assert kip219_throttle_ms(produce_ms, request_ms, -value) >= 0


@settings(max_examples=300, deadline=None)
@given(x=st.floats(allow_nan=False, allow_infinity=False, min_value=-9e18, max_value=9e18))
def test_java_round_is_exactly_floor_of_x_plus_a_half(x: float) -> None:
    assert java_round(x) == min(math.floor(Fraction(x) + Fraction(1, 2)), LONG_MAX)


# --- convergence of a flat-out producer --------------------------------------------------------------

WARMUP_MS = 11_000  # N x W: every enforcement grants about this much quota up front
SPAN_MS = 600_000
CONVERGENCE = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
_record_sizes = st.integers(min_value=100, max_value=1_000_000)
# The quota as requests per second of the drawn size, so every run handles a bounded number of requests.
_requests_per_s = st.floats(min_value=1, max_value=50)


def _burst_starts(result: SimulationResult) -> list[int]:
    throttles = result.throttles_ms
    return [t for i, t in enumerate(result.sends_ms) if i and throttles[i] == 0 and throttles[i - 1] > 0]


@CONVERGENCE
@given(record_bytes=_record_sizes, requests_per_s=_requests_per_s)
def test_flat_out_producer_converges_on_a_token_bucket(
    sensor_rate: type[WindowRate], record_bytes: int, requests_per_s: float
) -> None:
    quota = record_bytes * requests_per_s
    producer = FlatOutProducer(record_bytes, send_interval_ms=0.11)
    result = simulate_produce_quota(Enforcement.TOKEN_BUCKET, WARMUP_MS + SPAN_MS, quota, producer)
    average = result.bytes_between(WARMUP_MS, WARMUP_MS + SPAN_MS) * 1000 / SPAN_MS
    assert abs(average - quota) <= 0.01 * quota


@CONVERGENCE
@given(record_bytes=_record_sizes, requests_per_s=_requests_per_s)
def test_flat_out_producer_converges_on_sampled_windows(
    sensor_rate: type[WindowRate], record_bytes: int, requests_per_s: float
) -> None:
    # Sampled windows let a flat-out client through in bursts (the comb), so an arbitrary 600 s span can
    # be off by up to one window of quota; over whole cycles (burst start to burst start) the average is
    # the quota.
    quota = record_bytes * requests_per_s
    producer = FlatOutProducer(record_bytes, send_interval_ms=0.11)
    result = simulate_produce_quota(Enforcement.WINDOW, WARMUP_MS + SPAN_MS + 40_000, quota, producer)
    starts = _burst_starts(result)
    first = next(t for t in starts if t >= WARMUP_MS)
    last = next(t for t in starts if t >= first + SPAN_MS)
    average = result.bytes_between(first, last) * 1000 / (last - first)
    assert abs(average - quota) <= 0.01 * quota
    span_bytes = result.bytes_between(WARMUP_MS, WARMUP_MS + SPAN_MS)
    assert abs(span_bytes - quota * SPAN_MS / 1000) <= 12 * quota + record_bytes  # (N + 1) x W x Q + R
