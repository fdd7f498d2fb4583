"""`sluice perf-test`: Kafka's ProducerPerformance behaviour and output, on confluent-kafka."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator

import pytest
from mock_cluster_process import MockCluster

from sluice.proxy.tools.perf_test import (
    PerfResult,
    PerfStats,
    PerfTestError,
    ThroughputThrottler,
    java_fixed,
    main,
    make_payload,
    run_perf_test,
    translate_producer_props,
)

SUMMARY = re.compile(
    r"^(?P<records>\d+) records sent, \d+\.\d{6} records/sec \(\d+\.\d{2} MB/sec\), "
    r"\d+\.\d{2} ms avg latency, \d+\.\d{2} ms max latency, "
    r"\d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99\.9th\.$"
)
TOPIC = "perf"


@pytest.fixture(scope="module")
def cluster() -> Iterator[MockCluster]:
    with MockCluster(brokers=3, topics={TOPIC: 6}) as running:
        yield running


def test_cli_against_the_mock_cluster_prints_kafkas_summary_line(cluster: MockCluster) -> None:
    arguments = ["--topic", TOPIC, "--num-records", "3000", "--record-size", "200", "--throughput", "-1"]
    props = ["--producer-props", f"bootstrap.servers={cluster.bootstrap}", "acks=1"]
    completed = subprocess.run(
        [sys.executable, "-m", "sluice.proxy.tools.perf_test", *arguments, *props],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    last_line = completed.stdout.splitlines()[-1]
    match = SUMMARY.match(last_line)
    assert match, last_line
    assert match["records"] == "3000"


def test_throttled_run_stays_at_the_target_rate(cluster: MockCluster) -> None:
    result = run_perf_test(TOPIC, 1500, 100, 1500.0, {}, bootstrap_servers=cluster.bootstrap)
    assert result.records == 1500
    assert result.failed == 0
    # Like Kafka's throttler, ours lets through whatever is sent in the first millisecond, then paces; that
    # burst is a few hundred records at most, far below the 1500 that would double the rate.
    assert result.records_per_sec < 1500 * 2
    assert result.mb_per_sec == pytest.approx(result.records_per_sec * 100 / 1024 / 1024)
    assert (
        0 <= result.p50_latency_ms <= result.p95_latency_ms <= result.p99_latency_ms <= result.p999_latency_ms
    )
    assert result.p999_latency_ms <= result.max_latency_ms


@pytest.mark.slow
def test_failed_deliveries_are_reported_and_not_counted() -> None:
    failures: list[str] = []
    with MockCluster(brokers=1, topics={TOPIC: 1}) as lonely:
        lonely.broker_down(1)
        result = run_perf_test(
            TOPIC,
            5,
            10,
            -1,
            {"message.timeout.ms": "300"},
            bootstrap_servers=lonely.bootstrap,
            errors=failures.append,
        )
    assert (result.records, result.failed) == (0, 5)
    assert len(failures) == 5
    assert all(line.startswith("delivery failed: ") for line in failures)
    assert result.summary_line().startswith(
        "0 records sent, 0.000000 records/sec (0.00 MB/sec), NaN ms avg latency"
    )


def test_a_record_refused_before_sending_counts_as_failed_not_as_a_crash() -> None:
    failures: list[str] = []
    config = {"bootstrap.servers": "127.0.0.1:1", "message.max.bytes": "1000"}
    result = run_perf_test(TOPIC, 2, 2000, -1, config, errors=failures.append)
    assert (result.records, result.failed) == (0, 2)
    assert all("too large" in line for line in failures)


def test_summary_line_uses_javas_number_formats() -> None:
    result = PerfResult(
        records=5000,
        records_per_sec=999.8000399920016,
        mb_per_sec=0.09534836,
        avg_latency_ms=1.325,
        max_latency_ms=12,
        p50_latency_ms=1,
        p95_latency_ms=3,
        p99_latency_ms=7,
        p999_latency_ms=12,
        elapsed_s=5.001,
    )
    assert result.summary_line() == (
        "5000 records sent, 999.800040 records/sec (0.10 MB/sec), 1.33 ms avg latency, "
        "12.00 ms max latency, 1 ms 50th, 3 ms 95th, 7 ms 99th, 12 ms 99.9th."
    )


@pytest.mark.parametrize(
    ("value", "places", "text"),
    [
        (0.125, 2, "0.13"),  # half-up on the decimal digits, where Python's format() gives 0.12
        (0.15, 1, "0.2"),
        (2.5, 0, "3"),
        (1e-05, 2, "0.00"),
        (1e20, 1, "100000000000000000000.0"),
        (float("inf"), 6, "Infinity"),
        (float("nan"), 2, "NaN"),
    ],
)
def test_java_fixed_matches_java_string_format(value: float, places: int, text: str) -> None:
    assert java_fixed(value, places) == text


def test_stats_print_a_window_line_once_five_seconds_have_passed() -> None:
    lines: list[str] = []
    stats = PerfStats(num_records=10, start_ms=1_000, report=lines.append)
    stats.record(latency_ms=2, size=1024 * 1024, now_ms=3_000)
    stats.record(latency_ms=4, size=1024 * 1024, now_ms=5_999)
    assert lines == []
    stats.record(latency_ms=9, size=1024 * 1024, now_ms=6_000)
    assert lines == ["3 records sent, 0.6 records/sec (0.60 MB/sec), 5.0 ms avg latency, 9.0 ms max latency."]
    stats.record(latency_ms=1, size=1024 * 1024, now_ms=11_000)
    assert (
        lines[1] == "1 records sent, 0.2 records/sec (0.20 MB/sec), 1.0 ms avg latency, 1.0 ms max latency."
    )


def test_stats_totals_and_percentiles_follow_kafkas_sample_indexing() -> None:
    stats = PerfStats(num_records=1000, start_ms=0)
    for latency in range(1000):  # delivered in order: latencies 0..999 ms
        stats.record(latency_ms=latency, size=100, now_ms=latency)
    result = stats.result(now_ms=2_000)
    assert result.records == 1000
    assert result.records_per_sec == 500.0
    assert result.mb_per_sec == 1000.0 * 100_000 / 2_000 / (1024 * 1024)
    assert result.avg_latency_ms == 499.5
    assert result.max_latency_ms == 999
    # index = int(q * 1000) into the sorted sample
    assert (result.p50_latency_ms, result.p95_latency_ms, result.p99_latency_ms, result.p999_latency_ms) == (
        500,
        950,
        990,
        999,
    )
    assert result.elapsed_s == 2.0


def test_stats_sample_every_nth_latency_above_half_a_million_records() -> None:
    stats = PerfStats(num_records=1_500_000, start_ms=0)  # sampling = 1_500_000 // 500_000 = 3
    for latency in (10, 99, 99, 20, 99, 99, 30):
        stats.record(latency_ms=latency, size=1, now_ms=0)
    result = stats.result(now_ms=1)
    assert result.max_latency_ms == 99
    assert result.p50_latency_ms == 20  # sample is [10, 20, 30]
    assert result.p999_latency_ms == 30


def test_throttler_never_throttles_a_negative_target() -> None:
    throttler = ThroughputThrottler(-1, start_ms=0)
    assert not throttler.should_throttle(10**9, send_start_ms=1)


def test_throttler_throttles_only_when_ahead_of_the_target_rate() -> None:
    throttler = ThroughputThrottler(100, start_ms=0)
    assert not throttler.should_throttle(50, send_start_ms=0)  # no time has passed yet
    assert not throttler.should_throttle(100, send_start_ms=1_000)
    assert throttler.should_throttle(101, send_start_ms=1_000)


def test_throttler_sleeps_off_its_deficit_only_once_it_reaches_two_ms() -> None:
    now_ns = [0]
    waits: list[float] = []

    def wait(seconds: float) -> None:
        waits.append(seconds)
        now_ns[0] += round(seconds * 1e9)

    throttler = ThroughputThrottler(1000, start_ms=0)  # 1 ms of sleep owed per throttled record
    throttler.throttle(wait, clock_ns=lambda: now_ns[0])
    assert waits == []
    throttler.throttle(wait, clock_ns=lambda: now_ns[0])
    assert waits == [0.002]
    throttler.throttle(wait, clock_ns=lambda: now_ns[0])
    assert waits == [0.002]


def test_throttler_keeps_waiting_when_woken_early() -> None:
    now_ns = [0]
    waits: list[float] = []

    def woken_within_one_and_a_half_ms(seconds: float) -> None:
        waits.append(seconds)
        now_ns[0] += min(round(seconds * 1e9), 1_500_000)

    throttler = ThroughputThrottler(250, start_ms=0)  # 4 ms per record
    throttler.throttle(woken_within_one_and_a_half_ms, clock_ns=lambda: now_ns[0])
    assert waits == [0.004, 0.0025, 0.001]
    assert now_ns[0] == 4_000_000


def test_payload_is_made_once_of_capital_letters() -> None:
    payload = make_payload(10_000)
    assert len(payload) == 10_000
    assert set(payload) <= set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    assert len(set(payload)) == 26
    assert make_payload(10_000) == payload


def test_java_producer_properties_are_translated_or_dropped() -> None:
    notices: list[str] = []
    config = translate_producer_props(
        {"buffer.memory": "67108864", "max.request.size": "2000000", "value.serializer": "x", "acks": "1"},
        notices.append,
    )
    assert config == {"queue.buffering.max.kbytes": "65536", "message.max.bytes": "2000000", "acks": "1"}
    assert notices == ["ignoring Java-only producer property value.serializer"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_records": 0}, "--num-records"),
        ({"record_size": 0}, "--record-size"),
        ({"throughput": 0.0}, "--throughput 0.0"),
        ({"throughput": float("nan")}, "--throughput nan"),
        ({"producer_config": {}}, "no bootstrap servers"),
        ({"producer_config": {"bootstrap.servers": "x:1", "no.such.property": "1"}}, "no.such.property"),
        ({"producer_config": {"bootstrap.servers": "x:1", "buffer.memory": "lots"}}, "buffer.memory"),
    ],
)
def test_bad_arguments_raise_one_typed_error(kwargs: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {
        "topic": TOPIC,
        "num_records": 10,
        "record_size": 10,
        "throughput": -1.0,
        "producer_config": {"bootstrap.servers": "127.0.0.1:1"},
    }
    arguments.update(kwargs)
    with pytest.raises(PerfTestError, match=re.escape(message)):
        run_perf_test(**arguments)  # type: ignore[arg-type]


def test_cli_exits_2_with_a_message_on_a_bad_property(capsys: pytest.CaptureFixture[str]) -> None:
    arguments = ["--topic", "t", "--num-records", "1", "--record-size", "1", "--throughput", "-1"]
    code = main([*arguments, "--producer-props", "bootstrap.servers"])
    assert code == 2
    assert "Invalid property: bootstrap.servers" in capsys.readouterr().err
