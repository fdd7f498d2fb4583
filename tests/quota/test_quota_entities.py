"""Entities, precedence and sharing (spec §2.1-§2.4): V15, V16 and the book's two precedence tables."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from sluice.quota.entities import (
    ANONYMOUS,
    CLIENT_ID_QUOTA_ENABLED,
    DEFAULT,
    NO_QUOTAS,
    USER_CLIENT_ID_QUOTA_ENABLED,
    USER_QUOTA_ENABLED,
    QuotaEntity,
    QuotaRules,
    QuotaTags,
    sanitize_user,
)
from sluice.quota.errors import QuotaConfigError
from sluice.quota.keys import QuotaKey
from sluice.quota.managers import ClientQuotaManager
from sluice.quota.throttle import UNLIMITED

# The spec's vectors here run on both twins of the sampled-window rate the sensors are built on.
pytestmark = pytest.mark.usefixtures("sensor_rate")

E = QuotaEntity


@pytest.mark.parametrize(
    ("raw", "sanitized"),
    [
        ("alice", "alice"),
        ("A-z_0.9", "A-z_0.9"),
        ("alice smith", "alice%20smith"),
        ("a*b", "a%2Ab"),
        ("a+b", "a%2Bb"),
        ("a~b", "a%7Eb"),
        ("CN=x,O=y", "CN%3Dx%2CO%3Dy"),
        ("jürgen", "j%C3%BCrgen"),
        ("a/b@REALM", "a%2Fb%40REALM"),
        ("\ud800", "%3F"),  # unpaired surrogate: Java's encoder substitutes '?'
    ],
)
def test_sanitize_user_is_kafkas_sanitizer(raw: str, sanitized: str) -> None:
    assert sanitize_user(raw) == sanitized


@pytest.mark.parametrize(
    ("entity", "level"),
    [
        (E("u", "c"), 1),
        (E("u", DEFAULT), 2),
        (E("u"), 3),
        (E(DEFAULT, "c"), 4),
        (E(DEFAULT, DEFAULT), 5),
        (E(DEFAULT), 6),
        (E(client_id="c"), 7),
        (E(client_id=DEFAULT), 8),
    ],
)
def test_entity_precedence_levels(entity: QuotaEntity, level: int) -> None:
    assert entity.level == level


@pytest.mark.parametrize("bad", [{}, {"user": ""}, {"client_id": ""}, {"user": 5}])
def test_invalid_entities_are_one_typed_error(bad: dict[str, object]) -> None:
    with pytest.raises(QuotaConfigError):
        QuotaEntity(**bad)  # type: ignore[arg-type]


def test_a_client_id_named_default_is_an_ordinary_entity() -> None:
    rules = QuotaRules()
    rules.set(E(client_id="<default>"), 100)
    assert rules.resolve(ANONYMOUS, "other").rule is None
    assert rules.resolve(ANONYMOUS, "<default>").bound == 100


def test_invalid_bound_is_one_typed_error() -> None:
    with pytest.raises(QuotaConfigError):
        QuotaRules().set(E("u"), 0)


def test_enablement_bits_are_reference_counted() -> None:
    rules = QuotaRules()
    assert rules.enabled_bits == NO_QUOTAS
    rules.set(E("u1"), 10)
    rules.set(E(DEFAULT), 10)
    rules.set(E(client_id="c"), 10)
    assert rules.enabled_bits == USER_QUOTA_ENABLED | CLIENT_ID_QUOTA_ENABLED
    rules.set(E("u1"), 20)  # an update does not count twice
    rules.remove(E("u1"))
    assert rules.enabled_bits == USER_QUOTA_ENABLED | CLIENT_ID_QUOTA_ENABLED  # <default> user remains
    rules.remove(E(DEFAULT))
    assert rules.enabled_bits == CLIENT_ID_QUOTA_ENABLED  # Kafka 3.x would keep the user bit until restart
    assert not rules.remove(E(DEFAULT))  # removing what is not there changes nothing
    rules.set(E(DEFAULT, "c"), 10)
    assert rules.enabled_bits == CLIENT_ID_QUOTA_ENABLED | USER_CLIENT_ID_QUOTA_ENABLED


def test_tags_follow_the_enabled_levels() -> None:
    rules = QuotaRules()
    assert rules.resolve("u", "c").tags == ("", "c")  # no quotas: client-id tags, unlimited
    rules.set(E("u"), 10)
    assert rules.resolve("u", "c").tags == ("u", "")
    rules.remove(E("u"))
    rules.set(E("u", "c"), 10)
    assert rules.resolve("u", "other").tags == ("u", "other")
    assert rules.resolve("u", "other").bound == UNLIMITED


def test_client_ids_are_raw_and_users_are_sanitised_in_tags() -> None:
    rules = QuotaRules()
    rules.set(E("alice smith", "my client"), 10)
    resolution = rules.resolve("alice smith", "my client")
    assert resolution.tags == QuotaTags("alice%20smith", "my client")
    assert resolution.tags.sensor_suffix == "alice%20smith:my client"
    assert resolution.bound == 10


def test_resolution_is_cached_and_invalidated_by_a_change() -> None:
    rules = QuotaRules()
    rules.set(E(client_id=DEFAULT), 10)
    first = rules.resolve("u", "c")
    assert rules.resolve("u", "c") is first
    version = rules.version
    rules.set(E(client_id="c"), 20)
    assert rules.version == version + 1
    assert rules.resolve("u", "c").bound == 20


def test_null_client_id_is_unlimited_when_its_tags_carry_the_client_id() -> None:
    rules = QuotaRules()
    rules.set(E(client_id=DEFAULT), 10)
    assert rules.resolve("u", None).bound == UNLIMITED
    assert rules.resolve("u", None).tags.sensor_suffix == ":null"
    rules.set(E(DEFAULT), 5)  # user tags only: the null client-id is not part of the key
    rules.remove(E(client_id=DEFAULT))
    assert rules.resolve("u", None).bound == 5


def test_empty_client_id_is_unlimited_under_client_id_quotas() -> None:
    # Tags ("", ""): quotaLimit finds nothing when both tags are empty.
    rules = QuotaRules()
    rules.set(E(client_id=DEFAULT), 10)
    assert rules.resolve("u", "").bound == UNLIMITED


# V15: ClientQuotaManagerTest.testQuotaConfigPrecedence, all at one instant.
@dataclass(frozen=True)
class Check:
    row: int
    user: str
    client: str
    tags: tuple[str, str]
    bound: float
    recorded: int
    rate_after: float
    throttle_ms: int
    sensor: str = "any"  # "new" (fresh history) or "shared:<row>" (same sensor as that row)


@dataclass(frozen=True)
class Change:
    entity: QuotaEntity
    bound: float | None


V15_CONFIG = [
    (E(DEFAULT), 1000),
    (E(client_id=DEFAULT), 2000),
    (E(DEFAULT, DEFAULT), 3000),
    (E("userA"), 4000),
    (E("userA", "client1"), 5000),
    (E("userB"), 6000),
    (E("userB", "client1"), 7000),
    (E("userB", DEFAULT), 8000),
    (E("userC"), 10000),
    (E(client_id="client1"), 9000),
]

V15_STEPS: list[Check | Change] = [
    Check(1, "userA", "client1", ("userA", "client1"), 5000, 49_500, 4950, 0),
    Check(2, "userA", "client2", ("userA", ""), 4000, 49_500, 4950, 2375),
    Check(3, "userA", "client3", ("userA", ""), 4000, 0, 4950, 2375, "shared:2"),
    Check(4, "userA", "client1", ("userA", "client1"), 5000, 0, 4950, 0, "shared:1"),
    Check(5, "userB", "client1", ("userB", "client1"), 7000, 88_000, 8800, 2571),
    Check(6, "userB", "client2", ("userB", "client2"), 8000, 77_000, 7700, 0),
    Check(7, "userB", "client3", ("userB", "client3"), 8000, 77_000, 7700, 0),
    Check(8, "userD", "client1", ("userD", "client1"), 3000, 38_500, 3850, 2833),
    Check(9, "userD", "client2", ("userD", "client2"), 3000, 27_500, 2750, 0),
    Check(10, "userE", "client1", ("userE", "client1"), 3000, 27_500, 2750, 0),
    Change(E(DEFAULT, DEFAULT), None),
    Check(11, "userD", "client1", ("userD", ""), 1000, 0, 0, 0, "new"),
    Check(12, "userE", "client4", ("userE", ""), 1000, 16_500, 1650, 6500),
    Check(13, "userF", "client4", ("userF", ""), 1000, 8_800, 880, 0),
    Check(14, "userF", "client5", ("userF", ""), 1000, 8_800, 1760, 7600, "shared:13"),
    Change(E(DEFAULT), None),
    Check(15, "userF", "client4", ("", "client4"), 2000, 0, 0, 0, "new"),
    Check(16, "userF", "client5", ("", "client5"), 2000, 0, 0, 0, "new"),
    Check(17, "userF", "client5", ("", "client5"), 2000, 27_500, 2750, 3750, "shared:16"),
    Check(18, "userG", "client5", ("", "client5"), 2000, 0, 2750, 3750, "shared:16"),
    Change(E("userA"), 8000),
    Change(E("userA", "client1"), 10000),
    Check(19, "userA", "client2", ("userA", ""), 8000, 0, 4950, 0, "shared:2"),
    Check(20, "userA", "client2", ("userA", ""), 8000, 49_500, 9900, 2375, "shared:2"),
    Check(21, "userA", "client1", ("userA", "client1"), 10000, 0, 4950, 0, "shared:1"),
    Check(22, "userA", "client1", ("userA", "client1"), 10000, 66_000, 11_550, 1550, "shared:1"),
    Change(E("userA", "client1"), None),
    Check(23, "userA", "client6", ("userA", ""), 8000, 0, 9900, 2375, "shared:2"),
    Change(E("userA", "client6"), 11000),
    Check(24, "userA", "client6", ("userA", "client6"), 11000, 93_500, 9350, 0, "new"),
    Change(E("userA", DEFAULT), 12000),
    Change(E("userA", "client6"), None),
    Check(25, "userA", "client6", ("userA", "client6"), 12000, 44_000, 13_750, 1458, "shared:24"),
]


def test_v15_precedence_and_sharing() -> None:
    manager = ClientQuotaManager(QuotaKey.PRODUCER_BYTE_RATE)
    for entity, bound in V15_CONFIG:
        manager.update_quota(entity, bound)
    now = 1_000
    sensors = {}
    checked = []
    for step in V15_STEPS:
        if isinstance(step, Change):
            manager.update_quota(step.entity, step.bound)
            continue
        resolution = manager.resolve(step.user, step.client)
        assert resolution.tags == step.tags, step
        assert resolution.bound == step.bound, step
        before = manager.sensor_for(step.user, step.client, now)
        if step.sensor == "new":
            assert before not in sensors.values(), step
            assert before.measure(now) == 0, step
        elif step.sensor.startswith("shared:"):
            assert before is sensors[int(step.sensor.split(":")[1])], step
        throttle = manager.record_and_get_throttle_ms(step.user, step.client, step.recorded, now)
        sensor = manager.sensor_for(step.user, step.client, now)
        sensors[step.row] = sensor
        assert sensor.measure(now) == pytest.approx(step.rate_after, abs=1e-9), step
        assert throttle == step.throttle_ms, step
        assert (throttle > 0) == (step.rate_after > step.bound), step  # Kafka's "throttled?" column
        checked.append(step.row)
    assert checked == list(range(1, 26))


# V16: ClientQuotaManagerTest.testQuotaParsing, for client-id, user and (user, client-id) entities.
V16_VARIANTS = {
    "client-id": (
        lambda name: E(client_id=name),
        E(client_id=DEFAULT),
        ("ANONYMOUS", "p1"),
        ("ANONYMOUS", "random-client"),
    ),
    "user": (lambda name: E(name), E(DEFAULT), ("p1", "client"), ("random-user", "client")),
    "user+client-id": (
        lambda name: E("u", name),
        E(DEFAULT, DEFAULT),
        ("u", "p1"),
        ("random-user", "random-client"),
    ),
}


@pytest.mark.parametrize("variant", sorted(V16_VARIANTS))
def test_v16_quota_update_on_a_live_sensor(variant: str) -> None:
    make, default, (user, client), (other_user, other_client) = V16_VARIANTS[variant]
    manager = ClientQuotaManager(QuotaKey.PRODUCER_BYTE_RATE)
    manager.update_quota(make("p1"), 2000)
    manager.update_quota(make("p2"), 4000)
    assert manager.quota(other_user, other_client) == 9.223372036854776e18
    assert manager.quota(user, client) == 2000
    assert manager.record_and_get_throttle_ms(user, client, 2500 * 11, 0) > 0
    manager.update_quota(make("p1"), 3000)
    assert manager.record_and_get_throttle_ms(user, client, 0, 0) == 0
    manager.update_quota(make("p1"), 500)
    assert manager.record_and_get_throttle_ms(user, client, 0, 0) > 0
    manager.update_quota(make("p1"), None)
    manager.update_quota(default, 4000)
    assert manager.record_and_get_throttle_ms(user, client, 1000 * 11, 0) == 0
    assert manager.sensor_for(user, client, 0).measure(0) == 3850


# The Effective Kafka book, chapter 17, "Subject affinity and precedence order" (consumer_byte_rate).
BOOK_RULES = [(E("alice", "pump"), 400_000), (E("alice", DEFAULT), 300_000), (E("alice"), 200_000)]
BOOK_CLIENTS = {
    "C0": ("alice", "pump"),
    "C1": ("alice", "pump"),
    "C2": ("alice", "sink"),
    "C3": ("alice", "drain"),
    "C4": ("alice", "drain"),
    "C5": ("alice", ""),  # "having omitted the optional client ID"
    "C6": ("alice", ""),
    "C7": ("bob", ""),
}
UNMATCHED = None

# client -> (matching rule, bound in bytes/s, clients sharing its allowance). C5 and C6 differ from the
# book's first table, which says (alice, <default>) and 300 kB/s: an empty client-id gives the user-only
# tags (alice, ""), whose limit Kafka takes from (alice) or (<default>), never from (alice, <default>).
BOOK_TABLE_WITH_ALICE_DEFAULT = {
    "C0": (E("alice", "pump"), 400_000, {"C0", "C1"}),
    "C1": (E("alice", "pump"), 400_000, {"C0", "C1"}),
    "C2": (E("alice", DEFAULT), 300_000, {"C2"}),
    "C3": (E("alice", DEFAULT), 300_000, {"C3", "C4"}),
    "C4": (E("alice", DEFAULT), 300_000, {"C3", "C4"}),
    "C5": (E("alice"), 200_000, {"C5", "C6"}),
    "C6": (E("alice"), 200_000, {"C5", "C6"}),
    "C7": (UNMATCHED, UNLIMITED, {"C7"}),
}
# The book's second table (the (alice, <default>) rule deleted); Kafka agrees with every row.
BOOK_TABLE_WITHOUT_ALICE_DEFAULT = {
    "C0": (E("alice", "pump"), 400_000, {"C0", "C1"}),
    "C1": (E("alice", "pump"), 400_000, {"C0", "C1"}),
    **{c: (E("alice"), 200_000, {"C2", "C3", "C4", "C5", "C6"}) for c in ("C2", "C3", "C4", "C5", "C6")},
    "C7": (UNMATCHED, UNLIMITED, {"C7"}),
}


def _book_manager(with_alice_default: bool) -> ClientQuotaManager:
    manager = ClientQuotaManager(QuotaKey.CONSUMER_BYTE_RATE)
    for entity, bound in BOOK_RULES:
        if with_alice_default or entity != E("alice", DEFAULT):
            manager.update_quota(entity, bound)
    return manager


@pytest.mark.parametrize(
    ("with_alice_default", "table"),
    [(True, BOOK_TABLE_WITH_ALICE_DEFAULT), (False, BOOK_TABLE_WITHOUT_ALICE_DEFAULT)],
)
def test_book_precedence_tables(
    with_alice_default: bool, table: dict[str, tuple[QuotaEntity | None, float, set[str]]]
) -> None:
    manager = _book_manager(with_alice_default)
    sensors = {name: manager.sensor_for(user, client, 0) for name, (user, client) in BOOK_CLIENTS.items()}
    for name, (user, client) in BOOK_CLIENTS.items():
        rule, bound, shared = table[name]
        resolution = manager.resolve(user, client)
        assert resolution.rule == rule, name
        assert resolution.bound == bound, name
        assert {other for other, s in sensors.items() if s is sensors[name]} == shared, name


def test_book_clients_sharing_an_allowance_throttle_each_other() -> None:
    manager = _book_manager(with_alice_default=True)
    # C0 fetches 10 s worth of its 400 kB/s at once; C1 (same pair) is throttled, C2 (own pair) is not.
    assert manager.record_and_get_throttle_ms("alice", "pump", 4_000_000, 0) == 0
    assert manager.record_and_get_throttle_ms("alice", "pump", 400_000, 0) == 1000
    assert manager.record_and_get_throttle_ms("alice", "sink", 3_000_000, 0) == 0


def test_book_c5_with_a_null_client_id_is_unlimited() -> None:
    manager = _book_manager(with_alice_default=True)
    assert manager.resolve("alice", None).bound == UNLIMITED
