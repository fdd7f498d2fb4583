"""quota.max_entities (issue 14 item 3): the sensors a manager tracks are capped; new entities beyond the cap
share one overflow sensor per quota rule (so a flood of client-ids shares a quota rather than escaping it),
each overflow is counted and reported, and expiry makes room again."""

from __future__ import annotations

from sluice.quota import OVERFLOW_USER, QuotaConfig, QuotaManagers
from sluice.quota.entities import ANONYMOUS, DEFAULT, QuotaEntity, QuotaTags
from sluice.quota.keys import QuotaKey
from sluice.quota.managers import ClientQuotaManager
from sluice.quota.sensor import INACTIVE_SENSOR_EXPIRATION_MS

DEFAULT_CLIENT = QuotaEntity(client_id=DEFAULT)


def capped(max_entities: int, reports: list | None = None) -> ClientQuotaManager:
    manager = ClientQuotaManager(
        QuotaKey.PRODUCER_BYTE_RATE,
        max_entities=max_entities,
        on_overflow=None if reports is None else lambda *args: reports.append(args),
    )
    manager.update_quota(DEFAULT_CLIENT, 1000)
    return manager


def test_entities_beyond_the_cap_share_one_overflow_sensor_per_rule() -> None:
    reports: list = []
    manager = capped(3, reports)
    for i in range(10):
        manager.record_and_get_throttle_ms(ANONYMOUS, f"client-{i}", 100, 0)
    tags = {tags for tags, _ in manager.sensors()}
    overflow = QuotaTags(OVERFLOW_USER, str(DEFAULT_CLIENT))
    assert tags == {QuotaTags("", f"client-{i}") for i in range(3)} | {overflow}
    assert manager.tracked == 4
    assert manager.overflows == 7
    assert reports == [(QuotaKey.PRODUCER_BYTE_RATE, ANONYMOUS, f"client-{i}") for i in range(3, 10)]
    # The seven overflowed clients share one rate: 700 bytes at t=0 against their rule's 1000 B/s.
    sensor = dict(manager.sensors())[overflow]
    assert sensor.bound == 1000
    # Tracked clients keep their own sensors: client-0's rate is its own 100 bytes.
    assert dict(manager.sensors())[QuotaTags("", "client-0")] is not sensor


def test_an_overflow_flood_is_throttled_together_not_let_through() -> None:
    manager = capped(1)
    manager.record_and_get_throttle_ms(ANONYMOUS, "legit", 10, 0)
    throttles = [manager.record_and_get_throttle_ms(ANONYMOUS, f"flood-{i}", 500, 0) for i in range(100)]
    assert max(throttles) > 0  # 50 kB at once against one shared 1000 B/s quota
    assert manager.record_and_get_throttle_ms(ANONYMOUS, "legit", 10, 0) == 0  # its own sensor, untouched


def test_expiry_makes_room_for_an_overflowed_entity_to_get_its_own_sensor() -> None:
    manager = capped(1)
    manager.record_and_get_throttle_ms(ANONYMOUS, "old", 10, 0)
    manager.record_and_get_throttle_ms(ANONYMOUS, "new", 10, 0)
    assert QuotaTags("", "new") not in dict(manager.sensors())
    later = INACTIVE_SENSOR_EXPIRATION_MS + 1
    assert manager.expire_idle_sensors(later) == 2  # "old" and the overflow sensor
    manager.record_and_get_throttle_ms(ANONYMOUS, "new", 10, later)
    assert set(dict(manager.sensors())) == {QuotaTags("", "new")}


def test_unlimited_entities_overflow_to_their_own_shared_sensor() -> None:
    manager = capped(1)
    manager.update_quota(QuotaEntity(user="alice"), 5000)  # now (user, client) tags: everyone is tracked
    manager.record_and_get_throttle_ms("alice", "a", 1, 0)
    manager.record_and_get_throttle_ms("bob", "b", 1, 0)
    overflow_tags = [tags for tags, _ in manager.sensors() if tags.user == OVERFLOW_USER]
    assert len(overflow_tags) == 1 and manager.tracked == 2


def test_the_cap_comes_from_the_quota_config_for_every_manager() -> None:
    reports: list = []
    managers = QuotaManagers(QuotaConfig(max_entities=2), on_overflow=lambda *args: reports.append(args))
    for key in QuotaKey:
        managers.set_quota(DEFAULT_CLIENT, key, 1000)
    for i in range(5):
        managers.produce.record_and_get_throttle_ms(ANONYMOUS, f"c{i}", 1, 0)
        managers.request.record_request_time_ns(ANONYMOUS, f"c{i}", 1, 0)
    assert managers.produce.tracked == managers.request.tracked == 3
    assert {key for key, _user, _client in reports} == {
        QuotaKey.PRODUCER_BYTE_RATE,
        QuotaKey.REQUEST_PERCENTAGE,
    }


def test_tags_for_names_the_sensor_a_client_is_charged_to() -> None:
    manager = capped(1)
    manager.record_and_get_throttle_ms(ANONYMOUS, "first", 1, 0)
    assert manager.tags_for(ANONYMOUS, "first") == QuotaTags("", "first")
    assert manager.tags_for(ANONYMOUS, "second") == QuotaTags(OVERFLOW_USER, str(DEFAULT_CLIENT))
