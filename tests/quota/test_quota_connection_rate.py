"""quota/connection_rate.py: KIP-612 connection_creation_rate per client IP, on an injected clock."""

from __future__ import annotations

import pytest

from sluice.quota import DEFAULT, QuotaConfigError, QuotaWindow
from sluice.quota.connection_rate import ConnectionRateQuotas, canonical_ip


def accepted_at(quotas: ConnectionRateQuotas, ip: str, count: int, now_ms: int) -> list[int]:
    return [quotas.record_connection(ip, now_ms) for _ in range(count)]


def test_no_quota_records_nothing() -> None:
    quotas = ConnectionRateQuotas()
    assert not quotas.enabled
    assert accepted_at(quotas, "10.0.0.1", 1000, 0) == [0] * 1000
    assert quotas.rate("10.0.0.1", 0) == 0.0


def test_burst_of_n_minus_one_windows_then_a_throttle_bounded_by_one_window() -> None:
    quotas = ConnectionRateQuotas(QuotaWindow(num_samples=11, size_s=1))
    quotas.set_quota("10.0.0.1", 5)
    # The elapsed window is never under (N-1) x W = 10 s, so 50 connections at t=0 measure 5/s: not over.
    assert accepted_at(quotas, "10.0.0.1", 50, 0) == [0] * 50
    # The 51st measures 5.1/s: throttle round((5.1 - 5) / 5 x 10000) = 200 ms, and it is taken back.
    assert quotas.record_connection("10.0.0.1", 0) == 200
    assert quotas.rate("10.0.0.1", 0) == pytest.approx(5.0)
    # Refused connections never count, so every retry gets the same answer until time passes.
    assert accepted_at(quotas, "10.0.0.1", 3, 0) == [200, 200, 200]
    # Another address is not limited by this quota.
    assert quotas.record_connection("10.0.0.2", 0) == 0


def test_throttle_is_bounded_by_the_window_size() -> None:
    quotas = ConnectionRateQuotas(QuotaWindow(num_samples=11, size_s=2))
    quotas.set_quota("10.0.0.1", 1)
    # (N-1) x W = 20 s: 20 connections fit; the 21st: round((1.05 - 1) / 1 x 20000) = 1000 ms (< 2000).
    assert accepted_at(quotas, "10.0.0.1", 20, 0) == [0] * 20
    assert quotas.record_connection("10.0.0.1", 0) == 1000
    quotas.set_quota("10.0.0.1", 0.5)
    # Now (1.05 - 0.5) / 0.5 x 20000 = 22000 ms, bounded by one window: 2000 ms.
    assert quotas.record_connection("10.0.0.1", 0) == 2000


def test_default_ip_quota_applies_to_every_address_without_its_own() -> None:
    quotas = ConnectionRateQuotas()
    quotas.set_quota(DEFAULT, 1)
    quotas.set_quota("10.0.0.9", 100)
    assert quotas.quota("10.0.0.1") == 1.0
    assert quotas.quota("10.0.0.9") == 100.0
    assert accepted_at(quotas, "10.0.0.1", 10, 0) == [0] * 10
    assert quotas.record_connection("10.0.0.1", 0) > 0
    # Each address has its own sensor under the default, as Kafka's per-IP sensors.
    assert accepted_at(quotas, "10.0.0.2", 10, 0) == [0] * 10
    assert accepted_at(quotas, "10.0.0.9", 11, 0) == [0] * 11


def test_live_update_keeps_the_samples_and_changes_the_bound() -> None:
    quotas = ConnectionRateQuotas()
    quotas.set_quota("10.0.0.1", 5)
    assert accepted_at(quotas, "10.0.0.1", 50, 0) == [0] * 50
    assert quotas.record_connection("10.0.0.1", 0) > 0
    quotas.set_quota("10.0.0.1", 10)  # same sensor, 50 connections recorded: 50 more fit
    assert accepted_at(quotas, "10.0.0.1", 50, 0) == [0] * 50
    assert quotas.record_connection("10.0.0.1", 0) > 0
    assert quotas.rate("10.0.0.1", 0) == pytest.approx(10.0)


def test_quota_disappears_and_reappears_without_a_restart() -> None:
    quotas = ConnectionRateQuotas()
    quotas.set_quota("10.0.0.1", 1)
    assert accepted_at(quotas, "10.0.0.1", 10, 0) == [0] * 10
    assert quotas.record_connection("10.0.0.1", 0) > 0
    quotas.set_quota("10.0.0.1", None)
    assert not quotas.enabled
    assert accepted_at(quotas, "10.0.0.1", 100, 0) == [0] * 100
    quotas.set_quota(DEFAULT, 1)
    assert quotas.record_connection("10.0.0.1", 0) > 0  # the old samples are still in the window
    # Once the window has moved on, the address may connect again.
    assert quotas.record_connection("10.0.0.1", 12_000) == 0


def test_rate_recovers_as_time_passes() -> None:
    quotas = ConnectionRateQuotas()
    quotas.set_quota("10.0.0.1", 5)
    accepted_at(quotas, "10.0.0.1", 50, 0)
    assert quotas.record_connection("10.0.0.1", 0) == 200
    # 51 connections over an elapsed window of 10.2 s measure exactly 5/s: allowed again at 200 ms.
    assert quotas.record_connection("10.0.0.1", 200) == 0


def test_addresses_compare_in_canonical_form() -> None:
    quotas = ConnectionRateQuotas()
    quotas.set_quota("2001:db8::1", 1)
    assert quotas.quota("2001:0db8:0000::0001") == 1.0
    quotas.set_quota("192.0.2.7", 2)
    assert quotas.quota("::ffff:192.0.2.7") == 2.0
    assert canonical_ip(" 192.0.2.7 ") == "192.0.2.7"


@pytest.mark.parametrize("bad", ["host.example", "", "300.1.1.1", "10.0.0.0/8"])
def test_only_ip_literals_are_entities(bad: str) -> None:
    with pytest.raises(QuotaConfigError):
        ConnectionRateQuotas().set_quota(bad, 1)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), True])
def test_rates_must_be_positive(bad: object) -> None:
    with pytest.raises(QuotaConfigError):
        ConnectionRateQuotas().set_quota("10.0.0.1", bad)  # type: ignore[arg-type]


def test_idle_sensors_expire_after_an_hour() -> None:
    quotas = ConnectionRateQuotas()
    quotas.set_quota(DEFAULT, 1)
    quotas.record_connection("10.0.0.1", 0)
    assert quotas.expire_idle_sensors(3_600_000) == 0
    assert quotas.expire_idle_sensors(3_600_001) == 1
