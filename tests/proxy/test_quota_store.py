"""The quota store: its topic's record format, file + store combination, and live application (V16)."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.config import load_config
from sluice.config.quota_settings import TopicQuotaSettings
from sluice.proxy.control_plane.client_quota_entity import ClientQuotaEntity
from sluice.proxy.control_plane.live_quotas import LiveQuotas, QuotaChange
from sluice.proxy.control_plane.quota_records import (
    QuotaRecordError,
    decode_record,
    encode_key,
    encode_value,
)
from sluice.proxy.control_plane.quota_store import QuotaStore, effective_quotas, file_quotas
from sluice.quota import DEFAULT, UNLIMITED, QuotaKey

E = ClientQuotaEntity
BASE = {"listen": "127.0.0.1:9092", "upstream.bootstrap": ["kafka:19092"]}


# -- records -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "entity",
    [
        E(user="alice"),
        E(user=DEFAULT),
        E(client_id="pump"),
        E(user="a b", client_id=DEFAULT),
        E(ip="10.0.0.1"),
        E(ip=DEFAULT),
    ],
)
def test_records_round_trip(entity: ClientQuotaEntity) -> None:
    quotas = (
        {"connection_creation_rate": 7.0}
        if entity.is_ip
        else {"producer_byte_rate": 1048576.0, "request_percentage": 12.34}
    )
    value = encode_value(quotas)
    assert decode_record(encode_key(entity), value) == (entity, quotas)


def test_key_bytes_are_canonical_and_readable() -> None:
    assert (
        encode_key(E(user="alice", client_id=DEFAULT))
        == b'{"entity":{"client-id":null,"user":"alice"},"v":1}'
    )
    assert encode_value({"producer_byte_rate": 1024}) == b'{"quotas":{"producer_byte_rate":1024.0},"v":1}'


def test_no_quotas_left_is_a_tombstone() -> None:
    assert encode_value({}) is None
    assert decode_record(encode_key(E(user="a")), None) == (E(user="a"), {})


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        (None, b"{}", "no key"),
        (b"not json", None, "not JSON"),
        (b"[1]", None, "not a JSON object"),
        (b'{"entity":{"user":"a"},"v":2}', None, "format version 2"),
        (b'{"entity":{"user":"a"}}', None, "format version None"),
        (b'{"entity":{"group":"a"},"v":1}', None, "unknown entity types"),
        (b'{"entity":{},"v":1}', None, "invalid entity"),
        (b'{"entity":{"user":""},"v":1}', None, "invalid entity"),
        (b'{"entity":{"user":"a","ip":"1.2.3.4"},"v":1}', None, "invalid entity"),
        (b'{"entity":{"user":5},"v":1}', None, "no entity mapping"),
        (b'{"entity":{"user":"a"},"v":1}', b'{"v":1}', "no quotas"),
        (b'{"entity":{"user":"a"},"v":1}', b'{"quotas":{"producer_byte_rate":NaN},"v":1}', "not a finite"),
        (b'{"entity":{"user":"a"},"v":1}', b'{"quotas":{"producer_byte_rate":1.5},"v":1}', "fractional"),
        (b'{"entity":{"user":"a"},"v":1}', b'{"quotas":{"bogus":1},"v":1}', "Invalid configuration key"),
        (
            b'{"entity":{"ip":"1.2.3.4"},"v":1}',
            b'{"quotas":{"producer_byte_rate":1},"v":1}',
            "Invalid configuration",
        ),
    ],
)
def test_invalid_records_raise_a_record_error(key: bytes | None, value: bytes | None, why: str) -> None:
    with pytest.raises(QuotaRecordError, match=why):
        decode_record(key, value)


@given(st.binary(max_size=60), st.one_of(st.none(), st.binary(max_size=60)))
def test_any_bytes_decode_or_raise_a_record_error(key: bytes, value: bytes | None) -> None:
    with contextlib.suppress(QuotaRecordError):
        decode_record(key, value)


# -- the store and how it combines with the file ---------------------------------------------------------


def test_store_follows_records_and_tombstones() -> None:
    store = QuotaStore()
    alice = E(user="alice")
    assert store.apply_record(encode_key(alice), encode_value({"producer_byte_rate": 10})) == (alice, True)
    assert store.apply_record(encode_key(alice), encode_value({"producer_byte_rate": 10})) == (alice, False)
    assert store.get(alice) == {"producer_byte_rate": 10.0}
    assert store.apply_record(encode_key(alice), None) == (alice, True)
    assert len(store) == 0 and store.get(alice) == {}


def test_a_bad_record_changes_nothing() -> None:
    store = QuotaStore()
    store.put(E(user="a"), {"producer_byte_rate": 5.0})
    with pytest.raises(QuotaRecordError):
        store.apply_record(encode_key(E(user="a")), b'{"quotas":{"producer_byte_rate":-1},"v":1}')
    assert store.get(E(user="a")) == {"producer_byte_rate": 5.0}


FILE = {
    "quota": {
        "entities": [
            {"client_id": "pump", "producer_byte_rate": 1000, "consumer_byte_rate": 2000},
            {"user": "<default>", "request_percentage": 50},
            {"ip": "<default>", "connection_creation_rate": 20},
        ]
    }
}


def test_file_quotas_and_where_they_come_from() -> None:
    quotas, sources = file_quotas(load_config(overrides={**BASE, **FILE}).quota)
    assert quotas == {
        E(client_id="pump"): {"producer_byte_rate": 1000.0, "consumer_byte_rate": 2000.0},
        E(user=DEFAULT): {"request_percentage": 50.0},
        E(ip=DEFAULT): {"connection_creation_rate": 20.0},
    }
    assert sources[E(client_id="pump")]["producer_byte_rate"] == (
        "the quota.entities entry for client-id 'pump'"
    )


def test_stored_values_win_key_by_key() -> None:
    quotas, _ = file_quotas(load_config(overrides={**BASE, **FILE}).quota)
    store = QuotaStore()
    store.put(E(client_id="pump"), {"producer_byte_rate": 5000.0})
    store.put(E(user="bob"), {"consumer_byte_rate": 100.0})
    combined = effective_quotas(quotas, store)
    assert combined[E(client_id="pump")] == {"producer_byte_rate": 5000.0, "consumer_byte_rate": 2000.0}
    assert combined[E(user="bob")] == {"consumer_byte_rate": 100.0}
    assert combined[E(user=DEFAULT)] == {"request_percentage": 50.0}
    store.put(E(client_id="pump"), {})
    assert effective_quotas(quotas, store)[E(client_id="pump")]["producer_byte_rate"] == 1000.0


# -- live application ----------------------------------------------------------------------------------


def test_v16_live_update_keeps_the_samples_and_changes_the_bound() -> None:
    live = LiveQuotas()
    produce = live.managers.produce
    p1 = E(client_id="p1")
    assert produce.quota("ANONYMOUS", "random") == UNLIMITED
    live.apply({p1: {"producer_byte_rate": 2000.0}, E(client_id="p2"): {"producer_byte_rate": 4000.0}})
    # Step 2: 2500 x 11 at one instant: rate 2750 > 2000, throttled.
    assert produce.record_and_get_throttle_ms("ANONYMOUS", "p1", 27_500, 0) > 0
    # Step 3: p1 -> 3000, nothing recorded: 2750 <= 3000 on the same sensor.
    live.apply({p1: {"producer_byte_rate": 3000.0}, E(client_id="p2"): {"producer_byte_rate": 4000.0}})
    assert produce.record_and_get_throttle_ms("ANONYMOUS", "p1", 0, 0) == 0
    # Step 4: p1 -> 500: throttled again.
    live.apply({p1: {"producer_byte_rate": 500.0}, E(client_id="p2"): {"producer_byte_rate": 4000.0}})
    assert produce.record_and_get_throttle_ms("ANONYMOUS", "p1", 0, 0) > 0
    # Step 5: remove p1, default client-id -> 4000: (27500 + 11000) / 10 = 3850 <= 4000.
    live.apply(
        {
            E(client_id=DEFAULT): {"producer_byte_rate": 4000.0},
            E(client_id="p2"): {"producer_byte_rate": 4000.0},
        }
    )
    assert produce.record_and_get_throttle_ms("ANONYMOUS", "p1", 11_000, 0) == 0


def test_apply_changes_only_what_differs_and_reports_it() -> None:
    live = LiveQuotas()
    first = {
        E(user="a"): {"producer_byte_rate": 10.0, "consumer_byte_rate": 20.0},
        E(ip="10.0.0.1"): {"connection_creation_rate": 3.0},
    }
    assert len(live.apply(first)) == 3
    assert live.apply(first) == []
    changes = live.apply(
        {E(user="a"): {"producer_byte_rate": 15.0}, E(ip=DEFAULT): {"connection_creation_rate": 9.0}}
    )
    assert changes == [
        QuotaChange(E(ip=DEFAULT), "connection_creation_rate", None, 9.0),
        QuotaChange(E(ip="10.0.0.1"), "connection_creation_rate", 3.0, None),
        QuotaChange(E(user="a"), "consumer_byte_rate", 20.0, None),
        QuotaChange(E(user="a"), "producer_byte_rate", 10.0, 15.0),
    ]
    assert live.managers.produce.quota("a", "x") == 15.0
    assert live.managers.fetch.quota("a", "x") == UNLIMITED
    assert live.connections.quota("10.0.0.1") == 9.0


def test_quotas_appear_and_disappear() -> None:
    live = LiveQuotas()
    assert not live.managers.produce.quotas_enabled
    live.apply({E(user="a", client_id="c"): {"producer_byte_rate": 100.0}})
    assert live.managers.produce.quotas_enabled
    assert live.managers.produce.resolve("a", "c").tags == ("a", "c")
    live.apply({})
    assert not live.managers.produce.quotas_enabled
    assert live.managers.produce.record_and_get_throttle_ms("a", "c", 10**9, 0) == 0
    assert live.apply({}) == []  # nothing left in force to remove


def test_topic_quotas_appear_change_and_go() -> None:
    live = LiveQuotas()
    assert not live.apply_topics(None) and live.topics is None
    assert live.apply_topics(TopicQuotaSettings(1000.0, {"a": 600.0, "b": 300.0}))
    topics = live.topics
    assert topics is not None and topics.threshold("a") == 600.0
    topics.record("a", 5000, 0)
    # Shrink the total below the old explicit sum: thresholds must move first, in the right order.
    assert live.apply_topics(TopicQuotaSettings(500.0, {"a": 200.0, "c": 250.0}))
    assert live.topics is topics  # the same engine object: its sensors keep their samples
    assert (topics.total_bytes_per_s, topics.threshold("a"), topics.threshold("c")) == (500.0, 200.0, 250.0)
    assert topics.rate("a", 0) > 0
    assert live.apply_topics(TopicQuotaSettings(5000.0, {"a": 4000.0}))
    assert topics.threshold("a") == 4000.0
    assert live.apply_topics(None) and live.topics is None


def test_client_windows_follow_the_engine_config() -> None:
    settings = load_config(overrides={**BASE, "quota": {"window": {"samples": 5, "size_seconds": 2}}}).quota
    live = LiveQuotas(settings.new_managers())
    assert live.connections.max_throttle_ms == 2000
    assert live.managers.produce.window.num_samples == 5
    assert QuotaKey.PRODUCER_BYTE_RATE in live.managers.config.sensor_kinds
