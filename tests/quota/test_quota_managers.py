"""The quota managers (spec §2, §3): V13, V14, V17, V20, V23, enablement, expiry and routing."""

from __future__ import annotations

import pytest

from sluice.quota.entities import ANONYMOUS, DEFAULT, QuotaEntity
from sluice.quota.errors import QuotaConfigError
from sluice.quota.keys import QuotaKey, SensorKind
from sluice.quota.managers import (
    NANOS_TO_PERCENTAGE_PER_SECOND,
    ClientQuotaManager,
    ControllerMutationQuotaManager,
    QuotaManagers,
    RequestQuotaManager,
    kip219_throttle_ms,
    pre_kip219_throttle_ms,
)
from sluice.quota.quota_config import QuotaConfig, QuotaWindow
from sluice.quota.sensor import INACTIVE_SENSOR_EXPIRATION_MS
from sluice.quota.throttle import DOUBLE_MAX, to_int32

# The spec's vectors here run on both twins of the sampled-window rate the sensors are built on.
pytestmark = pytest.mark.usefixtures("sensor_rate")


def _v13_manager() -> ClientQuotaManager:
    manager = ClientQuotaManager(QuotaKey.PRODUCER_BYTE_RATE)
    manager.update_quota(QuotaEntity(client_id=DEFAULT), 500)
    return manager


def _v13_spike(manager: ClientQuotaManager) -> int:
    for t in range(0, 10_000, 1000):
        assert manager.record_and_get_throttle_ms(ANONYMOUS, "unknown", 400, t) == 0
    return manager.record_and_get_throttle_ms(ANONYMOUS, "unknown", 2300, 10_500)


# V13: ClientQuotaManagerTest.testQuotaViolation.
def test_v13_byte_rate_violation_and_recovery() -> None:
    manager = _v13_manager()
    assert _v13_spike(manager) == 2100
    for t in range(12_600, 21_601, 1000):
        manager.record_and_get_throttle_ms(ANONYMOUS, "unknown", 400, t)
    assert manager.record_and_get_throttle_ms(ANONYMOUS, "unknown", 0, 22_600) == 0


def _percent(ms: float) -> int:
    return int(ms * 1000 * 1000)  # thread time in ns


def _v14_manager() -> RequestQuotaManager:
    manager = RequestQuotaManager()
    manager.update_quota(QuotaEntity(ANONYMOUS, "test-client"), 1)
    return manager


def _v14_spike(manager: RequestQuotaManager) -> int:
    for t in range(0, 10_000, 1000):
        assert manager.record_request_time_ns(ANONYMOUS, "test-client", _percent(4), t) == 0
    return manager.record_request_time_ns(ANONYMOUS, "test-client", _percent(67.1), 10_500)


# V14: ClientRequestQuotaManagerTest.
def test_v14_request_percentage_is_bounded_by_one_window() -> None:
    manager = _v14_manager()
    assert manager.max_throttle_ms == 1000
    assert _v14_spike(manager) == 210
    for t in range(10_710, 20_711, 1000):
        manager.record_request_time_ns(ANONYMOUS, "test-client", _percent(4), t)
    assert manager.record_request_time_ns(ANONYMOUS, "test-client", 0, 21_710) == 0
    assert manager.record_request_time_ns(ANONYMOUS, "test-client", _percent(500), 21_710) == 1000
    for t in range(22_710, 31_711, 1000):
        assert manager.record_request_time_ns(ANONYMOUS, "test-client", 0, t) == 1000
    assert manager.record_request_time_ns(ANONYMOUS, "test-client", 0, 32_710) == 0


def test_request_time_units_are_percent_of_one_thread() -> None:
    assert NANOS_TO_PERCENTAGE_PER_SECOND == 1e-7
    manager = _v14_manager()
    # 10 ms of thread time per second is 1 %: 100 ms at once on a fresh sensor is exactly the quota.
    assert manager.record_request_time_ns(ANONYMOUS, "test-client", 100_000_000, 0) == 0
    assert manager.sensor_for(ANONYMOUS, "test-client", 0).measure(0) == pytest.approx(1.0)


# V17: getMaxValueInQuotaWindow.
def test_v17_fetch_size_cap() -> None:
    small = ClientQuotaManager(QuotaKey.CONSUMER_BYTE_RATE, QuotaWindow(num_samples=4, size_s=1))
    assert small.max_value_in_quota_window(ANONYMOUS, "c") == DOUBLE_MAX
    small.update_quota(QuotaEntity(DEFAULT), 10)
    assert small.max_value_in_quota_window(ANONYMOUS, "c") == 30
    default = ClientQuotaManager(QuotaKey.CONSUMER_BYTE_RATE)
    default.update_quota(QuotaEntity(client_id="c"), 1234.5)
    assert default.max_value_in_quota_window(ANONYMOUS, "c") == 12_345
    assert default.max_value_in_quota_window(ANONYMOUS, "other") == DOUBLE_MAX


# V20: a throttled fetch is unrecorded.
def test_v20_fetch_unrecord() -> None:
    manager = ClientQuotaManager(QuotaKey.CONSUMER_BYTE_RATE)
    manager.update_quota(QuotaEntity(client_id=DEFAULT), 1000)
    assert manager.record_and_get_throttle_ms("u", "c", 15_000, 0) == 5000
    assert manager.sensor_for("u", "c", 0).measure(0) == 1500
    manager.unrecord("u", "c", 15_000, 0)
    assert manager.sensor_for("u", "c", 0).measure(0) == 0
    assert manager.record_and_get_throttle_ms("u", "c", 10_000, 0) == 0


# V23: pre-KIP-219 produce sums the throttles; KIP-219 takes the largest.
def test_v23_throttle_composition() -> None:
    bandwidth = _v13_spike(_v13_manager())
    request = _v14_spike(_v14_manager())
    assert (bandwidth, request) == (2100, 210)
    assert pre_kip219_throttle_ms(bandwidth, request) == 2310
    assert kip219_throttle_ms(bandwidth, request) == 2100


def test_composition_ignores_non_positive_throttles() -> None:
    assert kip219_throttle_ms(0, 0) == 0
    assert kip219_throttle_ms(-5) == 0
    assert pre_kip219_throttle_ms(0, -7, 30) == 30


def test_nothing_is_recorded_and_no_sensor_exists_without_quotas() -> None:
    manager = ClientQuotaManager(QuotaKey.PRODUCER_BYTE_RATE)
    assert not manager.quotas_enabled
    assert manager.record_and_get_throttle_ms("u", "c", 10**12, 0) == 0
    manager.unrecord("u", "c", 10**12, 0)
    assert list(manager.sensors()) == []


def test_removing_the_last_quota_disables_the_manager_again() -> None:
    manager = ClientQuotaManager(QuotaKey.PRODUCER_BYTE_RATE)
    manager.update_quota(QuotaEntity("u"), 100)
    assert manager.record_and_get_throttle_ms("u", "c", 10_000, 0) == 90_000
    manager.update_quota(QuotaEntity("u"), None)
    assert not manager.quotas_enabled
    assert manager.record_and_get_throttle_ms("u", "c", 10_000, 0) == 0


def test_a_quota_removed_while_others_remain_leaves_its_sensor_unlimited() -> None:
    manager = ClientQuotaManager(QuotaKey.PRODUCER_BYTE_RATE)
    manager.update_quota(QuotaEntity("u"), 100)
    manager.update_quota(QuotaEntity("other"), 100)
    manager.record_and_get_throttle_ms("u", "c", 10_000, 0)
    manager.update_quota(QuotaEntity("u"), None)
    assert manager.record_and_get_throttle_ms("u", "c", 10_000, 0) == 0
    assert manager.sensor_for("u", "c", 0).measure(0) == 2000  # same sensor, samples kept


def test_byte_rate_throttles_are_unbounded_and_wrap_to_int32() -> None:
    manager = ClientQuotaManager(QuotaKey.PRODUCER_BYTE_RATE)
    manager.update_quota(QuotaEntity("u"), 1)
    # Fresh window 10 s: X = 1000 * S / Q - 10_000 ms, far beyond 2**31 - 1.
    expected_long = 1000 * 2_200_000 - 10_000
    throttle = manager.record_and_get_throttle_ms("u", "c", 2_200_000, 0)
    assert throttle == to_int32(expected_long) == expected_long - 2**32 < 0


def test_a_sensor_idle_for_over_an_hour_starts_afresh() -> None:
    manager = ClientQuotaManager(QuotaKey.PRODUCER_BYTE_RATE, sensor_kind=SensorKind.TOKEN_BUCKET)
    manager.update_quota(QuotaEntity("u"), 10)  # B = 110
    assert manager.record_and_get_throttle_ms("u", "c", 1_000_000, 0) > 0  # deep in debt
    # Still the same sensor after exactly one hour: the debt is not repaid, so still throttled.
    assert manager.record_and_get_throttle_ms("u", "c", 0, INACTIVE_SENSOR_EXPIRATION_MS) > 0
    last = INACTIVE_SENSOR_EXPIRATION_MS
    # More than an hour after that record: a fresh, full bucket.
    assert manager.record_and_get_throttle_ms("u", "c", 100, last + INACTIVE_SENSOR_EXPIRATION_MS + 1) == 0


def test_expire_idle_sensors_drops_only_idle_ones() -> None:
    manager = ClientQuotaManager(QuotaKey.PRODUCER_BYTE_RATE)
    manager.update_quota(QuotaEntity(client_id=DEFAULT), 10)
    manager.record_and_get_throttle_ms("u", "old", 1, 0)
    manager.record_and_get_throttle_ms("u", "new", 1, 1_000_000)
    assert manager.expire_idle_sensors(INACTIVE_SENSOR_EXPIRATION_MS + 1) == 1
    assert [tags.client_id for tags, _ in manager.sensors()] == ["new"]
    assert manager.record_and_get_throttle_ms("u", "old", 1, INACTIVE_SENSOR_EXPIRATION_MS + 2) == 0
    assert len(list(manager.sensors())) == 2


def test_token_bucket_byte_quota_has_the_same_contract() -> None:
    manager = ClientQuotaManager(QuotaKey.PRODUCER_BYTE_RATE, sensor_kind=SensorKind.TOKEN_BUCKET)
    manager.update_quota(QuotaEntity("u", "c"), 1000)  # B = 11,000 bytes
    assert manager.record_and_get_throttle_ms("u", "c", 11_000, 0) == 0
    assert manager.record_and_get_throttle_ms("u", "c", 1_000, 0) == 1000
    assert manager.record_and_get_throttle_ms("u", "c", 0, 1000) == 0


def test_token_bucket_request_quota_is_bounded_too() -> None:
    manager = RequestQuotaManager(sensor_kind=SensorKind.TOKEN_BUCKET)
    manager.update_quota(QuotaEntity("u"), 1)  # B = 11 %
    assert manager.record_and_get_throttle_ms("u", "c", 50, 0) == 1000


def test_lookup_cache_is_bounded() -> None:
    manager = ClientQuotaManager(QuotaKey.PRODUCER_BYTE_RATE, lookup_limit=3)
    manager.update_quota(QuotaEntity(DEFAULT), 1000)
    for i in range(10):
        manager.record_and_get_throttle_ms("u", f"c{i}", 1000, 0)
    assert manager.sensor_for("u", "c0", 0).measure(0) == 1000  # all share the (u, "") sensor


def test_managers_route_each_key_to_its_own_manager() -> None:
    managers = QuotaManagers()
    managers.set_quota(QuotaEntity("u"), QuotaKey.PRODUCER_BYTE_RATE, 100)
    managers.set_quota(QuotaEntity("u"), "controller_mutation_rate", 2)  # type: ignore[arg-type]
    assert managers.produce.quotas_enabled
    assert not managers.fetch.quotas_enabled
    assert not managers.request.quotas_enabled
    assert managers.controller_mutation.quota("u", "c") == 2
    assert managers.manager(QuotaKey.CONSUMER_BYTE_RATE) is managers.fetch
    assert managers.manager(QuotaKey.REQUEST_PERCENTAGE) is managers.request
    assert isinstance(managers.controller_mutation, ControllerMutationQuotaManager)
    managers.produce.record_and_get_throttle_ms("u", "c", 1, 0)
    assert managers.expire_idle_sensors(INACTIVE_SENSOR_EXPIRATION_MS + 1) == 1


def test_managers_follow_the_config() -> None:
    config = QuotaConfig(
        client_window=QuotaWindow(5, 2),
        controller_window=QuotaWindow(3, 1),
        legacy_windows=True,
        sensor_kinds={"producer_byte_rate": "token_bucket"},  # type: ignore[dict-item]
    )
    managers = QuotaManagers(config)
    assert managers.produce.sensor_kind is SensorKind.TOKEN_BUCKET
    assert managers.fetch.sensor_kind is SensorKind.WINDOW
    assert managers.fetch.window == QuotaWindow(5, 2)
    assert managers.controller_mutation.window == QuotaWindow(3, 1)
    managers.set_quota(QuotaEntity("u"), QuotaKey.CONSUMER_BYTE_RATE, 100)
    assert managers.fetch.sensor_for("u", "c", 0).rate.legacy  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"sensor_kinds": {"controller_mutation_rate": "window"}},
        {"sensor_kinds": {"producer_byte_rate": "leaky"}},
        {"sensor_kinds": {"bytes": "window"}},
        {"legacy_windows": "yes"},
        {"client_window": (11, 1)},
    ],
)
def test_bad_config_is_one_typed_error(kwargs: dict[str, object]) -> None:
    with pytest.raises(QuotaConfigError):
        QuotaConfig(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("num_samples", "size_s"), [(0, 1), (11, 0), (11, 0.5)])
def test_bad_window_is_one_typed_error(num_samples: object, size_s: object) -> None:
    with pytest.raises(QuotaConfigError):
        QuotaWindow(num_samples, size_s)  # type: ignore[arg-type]
