"""The canned broker's Fetch answer, the load generator's Fetch request, and fetch_copies.py's arithmetic."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
from kafka.protocol.consumer import FetchResponse
from kafka.protocol.metadata import ApiVersionsResponse
from kafka.record.memory_records import MemoryRecords

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "experiments"))

from canned_broker import FETCH_PARTITIONS, FETCH_RECORD_BYTES, fetch_answer
from fetch_copies import RELAY, Sample, middles, perf_shares, summarize
from harness import CannedBrokerProcess
from wire_load import FETCH_VERSION, fetch_body

from sluice.protocol.headers import encode_request_header, frame


def _values(records: bytes) -> list[bytes]:
    batches = MemoryRecords(records)
    values = []
    while batches.has_next():
        batch = batches.next_batch()
        values += [record.value for record in batch]
    return values


@pytest.mark.parametrize("version", [4, 11])
@pytest.mark.parametrize("fetch_bytes", [365_000, 94_000])
def test_the_fetch_answer_is_six_partitions_of_record_batches_of_about_the_size_asked(
    version: int, fetch_bytes: int
) -> None:
    body = fetch_answer("fetched", version, fetch_bytes)
    assert abs(len(body) - fetch_bytes) <= FETCH_PARTITIONS * (FETCH_RECORD_BYTES + 20)
    response = FetchResponse[version].decode(body)
    (topic,) = response.responses
    assert topic.topic == "fetched"
    assert [p.partition_index for p in topic.partitions] == list(range(FETCH_PARTITIONS))
    counts = set()
    for partition in topic.partitions:
        assert partition.error_code == 0
        values = _values(partition.records)
        assert {len(v) for v in values} == {FETCH_RECORD_BYTES}
        counts.add(len(values))
    (count,) = counts
    assert count * FETCH_PARTITIONS * FETCH_RECORD_BYTES > 0.9 * fetch_bytes


def _answer(sock: socket.socket) -> bytes:
    size = int.from_bytes(sock.recv(4, socket.MSG_WAITALL), "big")
    return sock.recv(size, socket.MSG_WAITALL)


def test_the_canned_broker_answers_the_load_generators_fetch_with_its_correlation_id() -> None:
    with (
        CannedBrokerProcess("fetched", 94_000) as broker,
        socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock,
    ):
        sock.sendall(frame(encode_request_header(18, 0, 5, "test")))
        versions = ApiVersionsResponse[0].decode(_answer(sock)[4:])
        fetch = [(k.min_version, k.max_version) for k in versions.api_keys if k.api_key == 1]
        assert fetch == [(4, 11)]
        for correlation in (42, 43):
            sock.sendall(frame(encode_request_header(1, FETCH_VERSION, correlation, "t") + fetch_body("x")))
            answer = _answer(sock)
            assert int.from_bytes(answer[:4], "big") == correlation
            assert answer[4:] == fetch_answer("fetched", FETCH_VERSION, 94_000)


def _sample(round_no: int, middle: str, cpu_s: float, size: int = 1) -> Sample:
    return Sample(size, round_no, middle, gib=0.5, seconds=1.0, cpu_s=cpu_s, user_s=cpu_s / 4)


def test_each_middle_gets_the_median_and_range_of_its_rounds_and_the_ratio_to_the_relays_median() -> None:
    samples = [
        _sample(1, RELAY, 0.2),
        _sample(1, "a", 0.3),
        _sample(2, "a", 0.6),
        _sample(2, RELAY, 0.1),
        _sample(3, RELAY, 0.15),
        _sample(3, "a", 0.35),
        _sample(1, RELAY, 1.0, size=2),
        _sample(1, "a", 1.5, size=2),
    ]
    relay, a, relay_2, a_2 = summarize(samples)
    assert (relay.middle, relay.median, relay.ratio) == (RELAY, pytest.approx(0.3), pytest.approx(1.0))
    assert (a.middle, a.median) == ("a", pytest.approx(0.7))
    assert (a.low, a.high) == (pytest.approx(0.6), pytest.approx(1.2))
    assert a.ratio == pytest.approx(0.7 / 0.3)
    assert a.user_median == pytest.approx(0.7 / 4)
    assert (relay_2.fetch_bytes, a_2.fetch_bytes, a_2.ratio) == (2, 2, pytest.approx(1.5))
    assert a.paired == 1.0


def test_each_proxy_is_compared_round_by_round_with_its_baseline() -> None:
    # b costs 10 % more than a in every round, while the machine's load doubles the costs of round 2.
    samples = [_sample(1, "a", 0.4), _sample(1, "b", 0.44), _sample(2, "b", 0.88), _sample(2, "a", 0.8)]
    a, b = summarize(samples, {"a": "a", "b": "a"})
    assert (a.paired, b.paired) == (pytest.approx(1.0), pytest.approx(1.1))
    assert b.median / a.median == pytest.approx(1.1)  # (so here the medians agree)


def test_the_first_tree_is_every_tree_s_baseline_per_configuration() -> None:
    chosen, baselines = middles([Path("/x/main"), Path("/y/upread")], quota=True)
    assert [m.name for m in chosen] == [RELAY, "main", "upread", "main +quota", "upread +quota"]
    assert [m.config is not None for m in chosen] == [False, False, False, True, True]
    assert baselines == {
        "main": "main",
        "upread": "main",
        "main +quota": "main +quota",
        "upread +quota": "main +quota",
    }


def test_perf_samples_split_into_user_space_and_its_copies() -> None:
    script = """
     7f2d552b6a9a __memmove_avx512_unaligned_erms (/usr/lib/x86_64-linux-gnu/libc.so.6)
 ffffffff816bb456 _copy_to_iter ([kernel.kallsyms])
 ffffffff816bb457 finish_task_switch.isra.0 ([kernel.kallsyms])
     7f2d555a758b _PyEval_EvalFrameDefault (/usr/lib/libpython3.11.so.1.0)
"""
    assert perf_shares(script) == (0.5, 0.25)  # the kernel's _copy_to_iter is not a user-space copy
    with pytest.raises(RuntimeError):
        perf_shares("\n")
