"""`sluice demo` end to end: mock cluster, two real proxies (one per sensor), real producers and a consumer.

The run is 15 s, so the summary averages seconds 6-15 (the warm-up is 2/5 of the run, capped at 12 s): about
nine seconds, i.e. ~90 records for alpha. The bounds are loose on purpose:
* per-second counts move in whole 10 kB records (10 % of alpha's quota per second);
* each of the three broker connections can have requests charged to the bucket before their delivery
  reports arrive, which moves up to ~0.3 s of alpha's quota in or out of a 9 s span;
* the summary counts record payload, ~1-2 % less than the requests and responses Sluice charges.
An unthrottled client delivers over 10x its quota in the first second alone, so 0.85-1.10x (0.80 for the
consumer, whose fetches are coarser) still tells "held at the quota" from "not held" without doubt.
"""

from __future__ import annotations

import re

import pytest
from confluent_kafka import Consumer, TopicPartition
from mock_cluster_process import MockCluster

from sluice.proxy.tools import demo, demo_clients

RUN_S = 15
WARM_UP_S = 6
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
COLUMNS = ["sensor", "quota", "avg", "ratio", "records", "done", "throttled", "max_told"]


def summary_rows(output: str) -> dict[str, dict[str, str]]:
    """The demo's summary table as {client: {column: text}}."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Summary, seconds"))
    rows: dict[str, dict[str, str]] = {}
    for line in lines[start + 2 :]:
        fields = line.split()
        if len(fields) != len(COLUMNS) + 1:
            break
        rows[fields[0]] = dict(zip(COLUMNS, fields[1:], strict=True))
    return rows


def per_second(output: str, label: str) -> list[float]:
    """One client's column of the live table, kB/s per second (M: MB/s)."""
    lines = output.splitlines()
    header_at = next(i for i, line in enumerate(lines) if line.strip().startswith("second"))
    column = lines[header_at].split().index(label) - 1  # the header's "second" is one word, a stamp two
    values = []
    for line in lines[header_at + 1 :]:
        if not re.match(r"^\s+\d+- ?\d+ s", line):
            break
        cell = line.split("s", 1)[1].split()[column].rstrip("*").replace(",", "")
        values.append(float(cell[:-1]) * 1000 if cell.endswith("M") else float(cell))
    return values


def number(text: str) -> float:
    return float(text.replace(",", "").rstrip("x"))


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_demo_holds_the_quota_clients_and_leaves_the_others_alone(tmp_path, capsys) -> None:
    chart = tmp_path / "charts" / "throughput.png"
    exit_code = demo.main(["--seconds", str(RUN_S), "--chart", str(chart)])
    output = capsys.readouterr().out

    assert exit_code == 0, output
    rows = summary_rows(output)
    assert set(rows) == {"alpha", "beta", "gamma", "delta", "alpha/window", "reader"}, output
    for client, quota, low in (("alpha", 100.0, 0.85), ("beta", 250.0, 0.85), ("reader", 150.0, 0.80)):
        row = rows[client]
        assert row["sensor"] == "token_bucket" and number(row["quota"]) == quota
        assert low <= number(row["avg"]) / quota <= 1.10, row
        assert number(row["throttled"]) > 0, row
        assert row["records"] == row["done"], row
    for client in ("gamma", "delta"):
        assert rows[client]["quota"] == "none"
        assert rows[client]["throttled"] == "0" and rows[client]["max_told"] == "0", rows[client]
    # gamma paces itself at 500 kB/s and nothing slows it down; delta, flat out, is far above every quota.
    assert number(rows["gamma"]["avg"]) >= 0.9 * 500.0, rows["gamma"]
    assert number(rows["delta"]["avg"]) >= 10 * 250.0, rows["delta"]
    # The same 100 kB/s quota on the two sensors: the token bucket's flat line, the window's comb.
    bucket = per_second(output, "alpha")[WARM_UP_S:]
    window = per_second(output, "alpha/window")[WARM_UP_S:]
    assert max(bucket) <= 2 * 100.0, bucket
    assert max(window) >= 4 * 100.0 and min(window) <= 0.5 * 100.0, window
    assert rows["alpha/window"]["sensor"] == "window" and number(rows["alpha/window"]["throttled"]) > 0
    # Kafka's per-broker arithmetic, labelled as computed.
    assert "(computed with Kafka's arithmetic, not measured)" in output
    assert re.search(r"alpha\s+3 brokers lead its partitions: up to 3 x 100\.0 = 300\.0 kB/s", output)
    # The read-back of the throttled producers' records.
    assert re.search(r"\[ok\] every alpha record came back byte for byte", output)
    assert re.search(r"\[ok\] every beta record came back byte for byte", output)
    assert re.search(r"^\s+Produce\s+[\d,]+", output, re.M) and re.search(r"^\s+Fetch\s+[\d,]+", output, re.M)
    assert chart.read_bytes().startswith(PNG_SIGNATURE)
    assert f"Chart of the per-second rates: {chart}" in output
    # The test broker's own lines went to a file beside the chart, not to the terminal.
    assert "Mock cluster enabled" in (chart.parent / "demo-broker.log").read_text()


def test_record_values_are_distinct_per_client_and_index() -> None:
    values = {demo_clients.record_value(client, i) for client in ("alpha", "beta") for i in range(50)}
    assert len(values) == 100
    assert all(len(v) == demo_clients.RECORD_SIZE for v in values)


def test_read_back_digest_ignores_order_but_not_content() -> None:
    hashes = [bytes([i]) * 32 for i in range(5)]
    assert demo_clients.order_free_digest(hashes) == demo_clients.order_free_digest(list(reversed(hashes)))
    assert demo_clients.order_free_digest(hashes) != demo_clients.order_free_digest([*hashes[:4], hashes[0]])


def test_each_sensor_runs_beside_the_other() -> None:
    for sensor in demo.SENSORS:
        plans = demo.plans(sensor)
        assert {p.route for p in plans} == {"main", "other"}
        twin = next(p for p in plans if p.route == "other")
        assert twin.client_id == "alpha" and twin.quota == 100_000
        assert demo.other_sensor(sensor) != sensor


def test_too_short_a_run_is_refused() -> None:
    with pytest.raises(SystemExit) as exc:
        demo.main(["--seconds", "2"])
    assert exc.value.code == 2


@pytest.mark.slow
def test_the_consumers_topic_holds_every_record_written_spread_evenly() -> None:
    # The demo's size: 56 s of the reader's 150 kB/s quota, 840 records of 10 kB, 8.4 MB over 6 partitions.
    # All in one partition it would pass the test broker's ~5 MB per partition, which drops the oldest: the
    # reader ran out of records mid-run and its rate fell to zero.
    topic, partitions, records = "history", 6, 840
    with MockCluster(brokers=3, topics={topic: partitions}) as cluster:
        filled = demo_clients.fill_topic(cluster.bootstrap, topic, records * demo_clients.RECORD_SIZE)
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "test-fill"})
        try:
            watermarks = consumer.get_watermark_offsets
            offsets = [watermarks(TopicPartition(topic, p), timeout=10) for p in range(partitions)]
        finally:
            consumer.close()
    assert filled == records
    assert offsets == [(0, records // partitions)] * partitions
