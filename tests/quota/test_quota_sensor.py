"""Quota sensors (spec §1.5): record first, then check; vectors V9 (rate), V20, V21, V22. Each test runs with
the window sensors on either twin of SampledRate (the `sensor_rate` fixture)."""

from __future__ import annotations

import pytest

from sluice.quota.errors import QuotaConfigError, QuotaViolation
from sluice.quota.keys import SensorKind
from sluice.quota.sensor import (
    INACTIVE_SENSOR_EXPIRATION_MS,
    TokenBucketQuotaSensor,
    WindowQuotaSensor,
    new_quota_sensor,
)

pytestmark = pytest.mark.usefixtures("sensor_rate")


# V21: thresholds on a fresh sensor, quota 1000 B/s, defaults (window 10 s).
@pytest.mark.parametrize(
    ("recorded", "expected"), [(10_000, 0), (10_001, 1), (15_000, 5000), (110_000, 100_000)]
)
def test_v21_thresholds_on_a_fresh_sensor(recorded: int, expected: int) -> None:
    assert WindowQuotaSensor(1000, 0).record(recorded, 0) == expected


def test_a_value_equal_to_the_bound_is_not_a_violation() -> None:
    sensor = WindowQuotaSensor(1000, 0)
    sensor.record(10_000, 0)
    assert not sensor.violated(0)
    sensor.check(0)  # does not raise
    sensor.record(1, 0)
    assert sensor.violated(0)


def test_a_violating_value_stays_recorded() -> None:
    sensor = WindowQuotaSensor(1000, 0)
    assert sensor.record(15_000, 0) == 5000
    assert sensor.measure(0) == 1500
    assert sensor.record(0, 0) == 5000


def test_record_without_check_returns_zero_but_counts() -> None:
    sensor = WindowQuotaSensor(1000, 0)
    assert sensor.record(15_000, 0, check=False) == 0
    assert sensor.throttle_ms(0) == 5000


# V20: fetch unrecord, quota 1000 B/s.
def test_v20_unrecord_returns_the_window_sum_to_zero() -> None:
    sensor = WindowQuotaSensor(1000, 0)
    assert sensor.record(15_000, 0) == 5000
    assert sensor.measure(0) == 1500
    sensor.unrecord(15_000, 0)
    assert sensor.rate.total(0) == 0
    assert sensor.record(10_000, 0) == 0  # measured as if nothing had been fetched


def test_check_raises_with_kafkas_value_bound_and_throttle() -> None:
    sensor = WindowQuotaSensor(1000, 0)
    sensor.record(15_000, 0, check=False)
    with pytest.raises(QuotaViolation) as caught:
        sensor.check(0)
    assert (caught.value.value, caught.value.bound, caught.value.throttle_ms) == (1500, 1000, 5000)


# V22: <= 3.7 vs >= 3.8 in the quota path, quota 800 B/s.
@pytest.mark.parametrize(("legacy", "expected"), [(False, [0, 1501, 1500, 0]), (True, [0, 1501, 0, 0])])
def test_v22_legacy_and_current_windows_diverge(legacy: bool, expected: list[int]) -> None:
    sensor = WindowQuotaSensor(800, 0, legacy=legacy)
    steps = [(0, 5000), (999, 5000), (11_000, 0), (11_999, 0)]
    assert [sensor.record(value, t) for t, value in steps] == expected


def test_v22_current_window_keeps_the_sample_by_its_last_event() -> None:
    sensor = WindowQuotaSensor(800, 0)
    sensor.record(5000, 0)
    sensor.record(5000, 999)
    assert sensor.window_size_ms(11_000) == 11_000
    assert sensor.measure(11_000) == pytest.approx(909.09, abs=0.005)


# V9, rate row: the KIP-599 example on Kafka's actual Rate (N = 100, W = 1 s, Q = 5).
def test_v9_sampled_rate_gives_13000_ms() -> None:
    sensor = WindowQuotaSensor(5, 0, num_samples=100, window_ms=1000)
    assert sensor.record(560, 0) == 13_000
    assert sensor.window_size_ms(0) == 99_000
    assert sensor.measure(0) == pytest.approx(5.6566, abs=5e-5)


def test_a_live_bound_update_keeps_the_samples() -> None:
    sensor = WindowQuotaSensor(2000, 0)
    assert sensor.record(27_500, 0) > 0
    sensor.bound = 3000
    assert sensor.record(0, 0) == 0
    sensor.bound = 500
    assert sensor.record(0, 0) > 0
    assert sensor.measure(0) == 2750


def test_token_bucket_sensor_throttles_until_the_bucket_is_back_at_zero() -> None:
    sensor = TokenBucketQuotaSensor(1000, 0)  # B = 11,000
    assert sensor.record(11_000, 0) == 0  # exactly empty is not a violation
    assert sensor.record(500, 0) == 500  # -500 tokens at 1000/s
    assert sensor.throttle_ms(400) == 100
    assert sensor.throttle_ms(500) == 0


def test_token_bucket_sensor_bound_update_changes_the_refill_rate() -> None:
    sensor = TokenBucketQuotaSensor(1000, 0)
    sensor.record(12_000, 0)  # -1000
    sensor.bound = 100
    assert sensor.throttle_ms(0) == 10_000
    assert sensor.measure(0) == -1000


def test_expiry_after_one_hour_without_a_record() -> None:
    sensor = WindowQuotaSensor(1000, 5)
    assert not sensor.is_expired(5 + INACTIVE_SENSOR_EXPIRATION_MS)
    assert sensor.is_expired(6 + INACTIVE_SENSOR_EXPIRATION_MS)
    sensor.record(1, 100)
    assert not sensor.is_expired(6 + INACTIVE_SENSOR_EXPIRATION_MS)


def test_check_alone_does_not_count_as_activity() -> None:
    sensor = WindowQuotaSensor(1000, 0)
    sensor.check(3_000_000)
    assert sensor.last_record_ms == 0


def test_reset_forgets_the_history_but_keeps_the_bound() -> None:
    bucket = TokenBucketQuotaSensor(10, 0)
    bucket.record(1e6, 0)
    bucket.reset(50)
    assert (bucket.measure(50), bucket.bound, bucket.last_record_ms) == (110, 10, 50)
    window = WindowQuotaSensor(10, 0)
    window.record(1e6, 0)
    window.reset(50)
    assert window.measure(50) == 0


def test_factory_builds_each_kind() -> None:
    assert isinstance(new_quota_sensor(SensorKind.WINDOW, 1, 0), WindowQuotaSensor)
    assert isinstance(new_quota_sensor("token_bucket", 1, 0), TokenBucketQuotaSensor)  # type: ignore[arg-type]
    legacy = new_quota_sensor(SensorKind.WINDOW, 1, 0, legacy=True)
    assert isinstance(legacy, WindowQuotaSensor)
    assert legacy.rate.legacy


@pytest.mark.parametrize("bound", [0, -5, float("nan"), None])
def test_invalid_bound_is_one_typed_error(bound: object) -> None:
    with pytest.raises(QuotaConfigError):
        WindowQuotaSensor(bound, 0)  # type: ignore[arg-type]
    sensor = TokenBucketQuotaSensor(1, 0)
    with pytest.raises(QuotaConfigError):
        sensor.bound = bound  # type: ignore[assignment]


def test_unknown_sensor_kind_is_one_typed_error() -> None:
    with pytest.raises(QuotaConfigError):
        new_quota_sensor("leaky", 1, 0)  # type: ignore[arg-type]
