"""`sluice pipeline` end to end as an operator runs it: synth -> the usage topic -> all jobs -> one page."""

from __future__ import annotations

import csv
import glob
import os
import subprocess
import sys

import pytest
from confluent_kafka import Producer
from mock_cluster_process import MockCluster


def sluice(*args: str, timeout: int = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sluice.proxy", *args], capture_output=True, text=True, timeout=timeout
    )


def test_a_bad_quotas_file_names_the_key_and_exits_2_before_spark_starts(tmp_path) -> None:
    quotas = tmp_path / "q.yaml"
    quotas.write_text("quota:\n  entities:\n    - {client_id: pump, producer_byte_rate: -5}\n")
    result = sluice(
        "pipeline",
        "whatif",
        "--input",
        str(tmp_path),
        "--out",
        str(tmp_path / "o"),
        "--quotas",
        str(quotas),
        timeout=60,
    )
    assert result.returncode == 2
    assert "quota.entities[0].producer_byte_rate" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_missing_input_is_one_line_before_spark_starts(tmp_path) -> None:
    result = sluice("pipeline", "report", "--input", str(tmp_path / "missing"), "--out", str(tmp_path / "o"))
    assert result.returncode == 1
    assert result.stderr == f"sluice pipeline: {tmp_path / 'missing'}: no such file or directory\n"
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_a_file_that_is_not_usage_records_is_one_line_and_spark_keeps_its_noise_in_its_log(tmp_path) -> None:
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}\n')
    result = sluice("pipeline", "report", "--input", str(other), "--out", str(tmp_path / "o"), "--quiet")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"sluice pipeline: file://{other}: line '{{\"hello\": 1}}'...: not a usage record: "
        "schema is not 'sluice.usage'"
    ]
    # Java's warnings and the executor's stack trace went to the log instead.
    assert "WARN" in (tmp_path / "o" / "spark.log").read_text()


@pytest.mark.slow
def test_synth_to_the_topic_then_every_job_from_kafka(tmp_path) -> None:
    """Takes a minute quiet, three loaded: two `sluice pipeline` commands, each starting its own JVM, as
    an operator runs them."""
    made = sluice(
        "pipeline",
        "synth",
        "--out",
        str(tmp_path / "synth"),
        "--days",
        "3",
        "--entities",
        "4",
        "--interval-s",
        "600",
        "--brokers",
        "2",
        "--format",
        "jsonl",
        "--quiet",
        "--master",
        "local[2]",
    )
    assert made.returncode == 0, made.stderr[-3000:]
    lines = []
    for name in sorted(glob.glob(str(tmp_path / "synth" / "usage.jsonl" / "part-*"))):
        with open(name, encoding="utf-8") as stream:
            lines += [line for line in stream if line.strip()]
    assert len(lines) == 3 * 144  # one message per interval (one instance)
    quotas = tmp_path / "quotas.yaml"
    quotas.write_text("quota:\n  entities:\n    - {client_id: <default>, producer_byte_rate: 9000}\n")
    with MockCluster(brokers=1, topics={"_sluice_usage": 3}) as cluster:
        producer = Producer({"bootstrap.servers": cluster.bootstrap})
        for i, line in enumerate(lines):
            producer.produce("_sluice_usage", line.encode(), partition=i % 3)
        assert producer.flush(30) == 0
        out = tmp_path / "out"
        ran = sluice(
            "pipeline",
            "all",
            "--input",
            f"kafka://{cluster.bootstrap}/_sluice_usage",
            "--out",
            str(out),
            "--quotas",
            str(quotas),
            "--capacity",
            "400000",
            "--master",
            "local[2]",
        )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "whatif: replaying" in ran.stderr and "done in" in ran.stderr  # progress lines
    assert ran.stdout.strip().endswith("report.html")
    for table in (
        "report/entity_summary.csv",
        "whatif/entities.csv",
        "propose/quotas.yaml",
        "forecast/forecast.csv",
        "report.html",
    ):
        assert os.path.exists(out / table), table
    with open(out / "report" / "broker_summary.csv") as stream:
        assert [r["broker"] for r in csv.DictReader(stream)] == ["1", "2"]  # --brokers, through the topic
    with open(out / "whatif" / "entities.csv") as stream:
        throttled = [r for r in csv.DictReader(stream) if int(r["throttle_ms"]) > 0]
    assert throttled  # the 9 kB/s default is below the busiest clients' demand
