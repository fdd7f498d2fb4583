"""`sluice consume`: Kafka's ConsumerPerformance output, on a real confluent-kafka consumer."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from mock_cluster_process import MockCluster

from sluice.proxy.tools.consume import HEADER, ConsumeResult, consume, main
from sluice.proxy.tools.perf_test import PerfTestError

TOPIC = "consumed"
RECORDS = 400
ASKED = ["--topic", TOPIC, "--messages", str(RECORDS)]
NUMBER = r"-?\d+\.\d{4}"
TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}"
LINE = re.compile(
    rf"^(?P<start>{TIME}), (?P<end>{TIME}), "
    rf"(?P<mb>{NUMBER}), (?P<mb_sec>{NUMBER}), (?P<records>\d+), (?P<records_sec>{NUMBER}), "
    rf"(?P<rebalance>\d+), (?P<fetch>-?\d+), (?P<fetch_mb_sec>{NUMBER}), (?P<fetch_records_sec>{NUMBER})$"
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[MockCluster]:
    with MockCluster(brokers=3, topics={TOPIC: 3}) as running:
        producer = Producer({"bootstrap.servers": running.bootstrap, "linger.ms": 5})
        for i in range(RECORDS):
            producer.produce(TOPIC, b"v" * 100, key=b"k%04d" % i, partition=i % 3)
        assert producer.flush(15) == 0
        yield running


@pytest.mark.slow
def test_cli_reads_every_record_and_prints_kafkas_header_and_line(cluster: MockCluster) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "sluice.proxy", "consume", "--bootstrap-server", cluster.bootstrap, *ASKED],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    header, line = completed.stdout.splitlines()
    assert header == HEADER
    match = LINE.match(line)
    assert match, line
    assert int(match["records"]) == RECORDS
    # 400 records of a 5-byte key and a 100-byte value, in MiB as Kafka counts them.
    assert float(match["mb"]) == pytest.approx(RECORDS * 105 / 1024 / 1024, abs=1e-4)


@pytest.mark.slow
def test_every_record_is_seen_once_by_the_callback(cluster: MockCluster) -> None:
    keys: list[bytes | None] = []

    def seen(key: bytes | None, _value: bytes | None) -> None:
        keys.append(key)

    result = consume(TOPIC, RECORDS, {}, bootstrap_servers=cluster.bootstrap, on_record=seen)
    assert result.records == RECORDS and not result.timed_out
    assert sorted(keys) == [b"k%04d" % i for i in range(RECORDS)]


@pytest.mark.slow
def test_too_few_records_time_out_with_a_warning_and_exit_1(cluster: MockCluster, capsys) -> None:
    asked = ["--topic", TOPIC, "--messages", str(RECORDS + 50), "--timeout", "1500", "--hide-header"]
    code = main(["--bootstrap-server", cluster.bootstrap, *asked])
    out, err = capsys.readouterr()
    assert code == 1
    assert "WARNING: Exiting before consuming the expected number of messages" in err
    assert f"{RECORDS} of {RECORDS + 50} read" in err
    match = LINE.match(out.strip())
    assert match and int(match["records"]) == RECORDS


def test_the_line_uses_kafkas_units_and_formats() -> None:
    # 2 MiB in 4 s, 3 s of which after the group assigned partitions.
    result = ConsumeResult(
        records=2000, bytes=2 * 1024 * 1024, start_ms=0, end_ms=4000, rebalance_ms=1000, timed_out=False
    )
    fields = result.line().split(", ")
    assert fields[2:] == ["2.0000", "0.5000", "2000", "500.0000", "1000", "3000", "0.6667", "666.6667"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:000", fields[0])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"messages": 0}, "--messages should be greater than zero"),
        ({"messages": 5, "timeout_ms": 0}, "--timeout should be greater than zero"),
        ({"messages": 5}, "no bootstrap servers"),
    ],
)
def test_bad_arguments_raise_one_typed_error(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(PerfTestError, match=message):
        consume(TOPIC, consumer_config={}, **kwargs)  # type: ignore[arg-type]


def test_cli_exits_2_on_a_bad_property(capsys) -> None:
    assert main(["--topic", TOPIC, "--messages", "1", "--consumer-props", "no-equals-sign"]) == 2
    assert "Invalid property: no-equals-sign" in capsys.readouterr().err
