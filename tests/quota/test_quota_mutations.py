"""Controller mutation quotas (spec §4, KIP-599): V9 (bucket), V10, V11, V12, V19."""

from __future__ import annotations

import pytest

from sluice.quota.entities import ANONYMOUS, QuotaEntity
from sluice.quota.errors import ThrottlingQuotaExceeded
from sluice.quota.managers import ControllerMutationQuotaManager
from sluice.quota.mutations import (
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    UNBOUNDED_CONTROLLER_MUTATION_QUOTA,
    PermissiveControllerMutationQuota,
    StrictControllerMutationQuota,
    charge_topics,
    is_strict,
)
from sluice.quota.quota_config import QuotaWindow
from sluice.quota.sensor import TokenBucketQuotaSensor


def _bucket(rate: float, num_samples: int) -> TokenBucketQuotaSensor:
    return TokenBucketQuotaSensor(rate, 0, num_samples=num_samples, window_ms=1000)


# V9: the KIP-599 worked example, Q = 5, 100 samples of 1 s.
def test_v9_fresh_bucket_holds_500() -> None:
    assert _bucket(5, 100).bucket.burst == 500
    assert _bucket(5, 100).measure(0) == 500


def test_v9_permissive_burst_of_560_gives_minus_60_and_12_s() -> None:
    sensor = _bucket(5, 100)
    quota = PermissiveControllerMutationQuota(sensor)
    quota.record(560, 0)
    assert sensor.measure(0) == -60
    assert quota.throttle_time_ms(0) == 12_000
    assert not quota.is_exceeded


def test_v9_strict_accepts_the_burst_and_refuses_the_next_charge() -> None:
    sensor = _bucket(5, 100)
    quota = StrictControllerMutationQuota(sensor)
    quota.record(560, 0)  # the bucket was >= 0: accepted
    assert quota.throttle_time_ms(0) == 0
    with pytest.raises(ThrottlingQuotaExceeded) as refused:
        quota.record(1, 0)
    assert refused.value.throttle_ms == 12_000
    assert refused.value.error_code == 89
    assert str(refused.value) == "The throttling quota has been exceeded."
    assert sensor.measure(0) == -60  # the refused charge was not recorded


# V10: StrictControllerMutationQuotaTest. Q = 10, N = 10, W = 1 s, B = 100.
def test_v10_strict_quota() -> None:
    sensor = _bucket(10, 10)
    quota = StrictControllerMutationQuota(sensor)
    quota.record(90, 0)
    assert (sensor.measure(0), quota.throttle_time_ms(0), quota.is_exceeded) == (10, 0, False)
    quota.record(90, 0)
    assert (sensor.measure(0), quota.throttle_time_ms(0), quota.is_exceeded) == (-80, 0, False)
    with pytest.raises(ThrottlingQuotaExceeded) as refused:
        quota.record(90, 0)
    assert refused.value.throttle_ms == 8000
    assert (sensor.measure(0), quota.throttle_time_ms(0), quota.is_exceeded) == (-80, 8000, True)
    assert quota.throttle_time_ms(5000) == 3000


# V11: PermissiveControllerMutationQuotaTest, same configuration.
def test_v11_permissive_quota() -> None:
    sensor = _bucket(10, 10)
    quota = PermissiveControllerMutationQuota(sensor)
    expected = [(10, 0), (-80, 8000), (-170, 17_000)]
    for tokens, throttle in expected:
        quota.record(90, 0)  # never raises
        assert (sensor.measure(0), quota.throttle_time_ms(0)) == (tokens, throttle)
        assert not quota.is_exceeded
    assert quota.throttle_time_ms(5000) == 12_000


def test_throttle_time_never_goes_negative() -> None:
    quota = PermissiveControllerMutationQuota(_bucket(10, 10))
    quota.record(180, 0)
    assert quota.throttle_time_ms(60_000) == 0


# V12: ControllerMutationQuotaManagerTest.testControllerMutationQuotaViolation (strict recording).
def test_v12_manager_strict_recording() -> None:
    manager = ControllerMutationQuotaManager(QuotaWindow(num_samples=10, size_s=1))
    manager.update_quota(QuotaEntity(ANONYMOUS, "test-client"), 10)
    for second in range(10):
        assert manager.record_and_get_throttle_ms(ANONYMOUS, "test-client", 10, second * 1000) == 0
    assert manager.record_and_get_throttle_ms(ANONYMOUS, "test-client", 110, 10_000) == 0  # -> -10
    assert manager.record_and_get_throttle_ms(ANONYMOUS, "test-client", 110, 10_000) == 1000  # refused
    assert manager.record_and_get_throttle_ms(ANONYMOUS, "test-client", 110, 11_000) == 0  # 0 is not < 0


@pytest.mark.parametrize(
    ("api_key", "strict_version", "permissive_version"),
    [(CREATE_TOPICS, 6, 5), (DELETE_TOPICS, 5, 4), (CREATE_PARTITIONS, 3, 2)],
)
def test_strictness_is_chosen_by_request_version(
    api_key: int, strict_version: int, permissive_version: int
) -> None:
    assert is_strict(api_key, strict_version)
    assert is_strict(api_key, strict_version + 1)
    assert not is_strict(api_key, permissive_version)
    assert not is_strict(0, 12)  # Produce mutates nothing


def _v19_manager() -> ControllerMutationQuotaManager:
    # ControllerMutationQuotaTest: rate 2/s over 10 samples of 1 s, B = 20.
    manager = ControllerMutationQuotaManager(QuotaWindow(num_samples=10, size_s=1))
    manager.update_quota(QuotaEntity("quota-user"), 2)
    return manager


# V19, at the quota level: 2 topics x 30 partitions, strict and permissive, for each mutating API.
@pytest.mark.parametrize(
    ("api_key", "strict_version", "permissive_version"),
    [(CREATE_TOPICS, 7, 5), (DELETE_TOPICS, 6, 4), (CREATE_PARTITIONS, 3, 2)],
)
def test_v19_strict_and_permissive_requests(
    api_key: int, strict_version: int, permissive_version: int
) -> None:
    strict_manager = _v19_manager()
    strict = strict_manager.new_quota_for_request("quota-user", "c", api_key, strict_version, 0)
    assert charge_topics(strict, [30, 30], 0) == [True, False]  # one NONE, one 89
    assert 0 <= strict.throttle_time_ms(0) <= 5000
    assert strict.throttle_time_ms(0) == 5000  # 20 - 30 = -10 -> 10 / 2 s

    permissive_manager = _v19_manager()
    permissive = permissive_manager.new_quota_for_request("quota-user", "c", api_key, permissive_version, 0)
    assert charge_topics(permissive, [30, 30], 0) == [True, True]
    assert permissive.throttle_time_ms(0) == 20_000  # 20 - 60 = -40 -> 40 / 2 s


def test_v19_a_principal_without_a_quota_is_never_throttled() -> None:
    manager = _v19_manager()
    quota = manager.new_quota_for_request("free-user", "c", CREATE_TOPICS, 7, 0)
    assert charge_topics(quota, [30, 30], 0) == [True, True]
    assert quota.throttle_time_ms(0) == 0


def test_v19_retrying_the_rejected_topic_eventually_succeeds_without_throttle() -> None:
    manager = _v19_manager()
    first = manager.new_quota("quota-user", "c", True, 0)
    assert charge_topics(first, [30, 30], 0) == [True, False]
    retry = manager.new_quota("quota-user", "c", True, first.throttle_time_ms(0))
    assert charge_topics(retry, [30], 5000) == [True]  # the bucket is back at 0, not below
    assert retry.throttle_time_ms(5000) == 0


def test_no_mutation_quota_configured_gives_the_unbounded_quota() -> None:
    manager = ControllerMutationQuotaManager()
    quota = manager.new_quota("u", "c", True, 0)
    assert quota is UNBOUNDED_CONTROLLER_MUTATION_QUOTA
    assert charge_topics(quota, [10**9], 0) == [True]
    assert quota.throttle_time_ms(0) == 0
    assert not quota.is_exceeded
    assert manager.record_and_get_throttle_ms("u", "c", 10**9, 0) == 0
    assert list(manager.sensors()) == []


def test_mutation_sensors_share_by_the_usual_precedence() -> None:
    manager = _v19_manager()
    a = manager.new_quota("quota-user", "client-a", False, 0)
    b = manager.new_quota("quota-user", "client-b", False, 0)
    a.record(20, 0)
    b.record(2, 0)  # same user-only sensor: the bucket is now below zero
    assert b.throttle_time_ms(0) == 1000
