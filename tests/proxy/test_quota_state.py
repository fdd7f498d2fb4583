"""proxy/control_plane/quota_state.py: file + store kept in the engine through records, own writes and
reloads."""

from __future__ import annotations

import pytest

from sluice.config import load_config
from sluice.proxy.control_plane.client_quota_entity import ClientQuotaEntity
from sluice.proxy.control_plane.quota_records import QuotaRecordError, encode_key, encode_value
from sluice.proxy.control_plane.quota_state import QuotaState

E = ClientQuotaEntity
BASE = {"listen": "127.0.0.1:9092", "upstream.bootstrap": ["kafka:19092"]}


def settings(quota: dict):
    return load_config(overrides={**BASE, "quota": quota}).quota


FILE = {
    "entities": [{"client_id": "pump", "producer_byte_rate": 1000}],
    "topics": {"total_bytes_per_s": 9000},
}


def test_start_up_puts_the_file_in_force() -> None:
    state = QuotaState(settings(FILE))
    assert state.live.managers.produce.quota("ANONYMOUS", "pump") == 1000.0
    assert state.live.topics is not None and state.live.topics.total_bytes_per_s == 9000.0


def test_records_from_any_instance_change_the_engine() -> None:
    state = QuotaState(settings(FILE))
    changes = state.apply_record(encode_key(E(client_id="pump")), encode_value({"producer_byte_rate": 3000}))
    assert [(c.key, c.old, c.new) for c in changes] == [("producer_byte_rate", 1000.0, 3000.0)]
    assert state.live.managers.produce.quota("ANONYMOUS", "pump") == 3000.0
    assert (
        state.apply_record(encode_key(E(client_id="pump")), encode_value({"producer_byte_rate": 3000})) == []
    )
    # The tombstone brings the file's value back.
    state.apply_record(encode_key(E(client_id="pump")), None)
    assert state.live.managers.produce.quota("ANONYMOUS", "pump") == 1000.0


def test_an_invalid_record_keeps_the_quotas_in_force() -> None:
    state = QuotaState(settings(FILE))
    with pytest.raises(QuotaRecordError):
        state.apply_record(b"junk", b"junk")
    assert state.live.managers.produce.quota("ANONYMOUS", "pump") == 1000.0


def test_own_writes_apply_at_once_and_the_follower_copy_changes_nothing() -> None:
    state = QuotaState(settings({}))
    changes = state.store_written({E(user="alice"): {"consumer_byte_rate": 10.0}})
    assert len(changes) == 1 and state.live.managers.fetch.quota("alice", "x") == 10.0
    assert state.apply_record(encode_key(E(user="alice")), encode_value({"consumer_byte_rate": 10.0})) == []


def test_reload_changes_file_quotas_but_stored_ones_still_win() -> None:
    state = QuotaState(settings(FILE))
    state.store_written({E(user="alice"): {"consumer_byte_rate": 10.0}})
    changes = state.reload(
        settings(
            {
                "entities": [
                    {"client_id": "pump", "producer_byte_rate": 2000},
                    {"user": "alice", "consumer_byte_rate": 99},
                    {"ip": "10.0.0.1", "connection_creation_rate": 3},
                ]
            }
        )
    )
    assert {(c.entity, c.key, c.new) for c in changes} == {
        (E(client_id="pump"), "producer_byte_rate", 2000.0),
        (E(ip="10.0.0.1"), "connection_creation_rate", 3.0),
    }
    assert state.live.managers.fetch.quota("alice", "x") == 10.0  # the store's value wins
    assert state.live.connections.quota("10.0.0.1") == 3.0
    assert state.live.topics is None  # quota.topics went away with the reload
    assert state.file_sources()[E(user="alice")]["consumer_byte_rate"].startswith("the quota.entities entry")


def test_an_older_record_never_undoes_a_newer_own_write() -> None:
    state = QuotaState(settings({}))
    pump = E(client_id="pump")
    state.store_written({pump: {"producer_byte_rate": 300.0}}, offset=7)
    # The follower, still behind, reads an older record of the same entity (offset 5) and then our own.
    assert state.apply_record(encode_key(pump), encode_value({"producer_byte_rate": 100}), offset=5) == []
    assert state.apply_record(encode_key(pump), encode_value({"producer_byte_rate": 300}), offset=7) == []
    assert state.live.managers.produce.quota("ANONYMOUS", "pump") == 300.0
    state.apply_record(encode_key(pump), None, offset=9)
    assert state.store.snapshot() == {}
