"""`sluice demo` end to end: mock cluster, real proxy, three real producers, a consumer group, the chart.

The run is 15 s, so the summary averages seconds 6-15 (the warm-up is 2/5 of the run, capped at 12 s): about
nine seconds, i.e. ~90 records for alpha. The bounds are loose on purpose:
* per-second counts move in whole 10 kB records (10 % of alpha's quota per second);
* each of the three broker connections can have requests charged to the bucket before their delivery
  reports arrive, which moves up to ~0.3 s of alpha's quota in or out of a 9 s span;
* the summary counts record payload, ~1.2 % less than the Produce requests Sluice charges.
An unthrottled flat-out producer here delivers over 10x its quota (the first second of the burst alone),
so 0.85-1.10x still tells "held at the quota" from "not held" without doubt.
"""

from __future__ import annotations

import re

import pytest

from sluice.proxy.tools import demo

RUN_S = 15
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def summary_rows(output: str) -> dict[str, dict[str, str]]:
    """The demo's summary table as {client: {column: text}}."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Summary, seconds"))
    columns = ["quota", "avg", "ratio", "sent", "delivered", "throttled", "max_told"]
    rows: dict[str, dict[str, str]] = {}
    for line in lines[start + 2 :]:
        fields = line.split()
        if len(fields) != len(columns) + 1 or fields[0] not in ("alpha", "beta", "gamma"):
            break
        rows[fields[0]] = dict(zip(columns, fields[1:], strict=True))
    return rows


def number(text: str) -> float:
    return float(text.replace(",", "").rstrip("x"))


@pytest.mark.timeout(120)
def test_demo_holds_the_quota_clients_and_leaves_the_other_alone(tmp_path, capsys) -> None:
    chart = tmp_path / "charts" / "throughput.png"
    exit_code = demo.main(["--seconds", str(RUN_S), "--chart", str(chart)])
    output = capsys.readouterr().out

    assert exit_code == 0, output
    rows = summary_rows(output)
    assert set(rows) == {"alpha", "beta", "gamma"}, output
    for client, quota in (("alpha", 100.0), ("beta", 250.0)):
        row = rows[client]
        assert number(row["quota"]) == quota
        assert 0.85 <= number(row["avg"]) / quota <= 1.10, row
        assert number(row["throttled"]) > 0, row
        assert row["sent"] == row["delivered"], row
    gamma = rows["gamma"]
    assert gamma["quota"] == "none"
    assert gamma["throttled"] == "0" and gamma["max_told"] == "0", gamma
    # gamma paces itself at 500 kB/s and nothing slows it down.
    assert number(gamma["avg"]) >= 0.9 * 500.0, gamma
    # The read-back of the throttled producers' records.
    assert re.search(r"\[ok\] every alpha record came back byte for byte", output)
    assert re.search(r"\[ok\] every beta record came back byte for byte", output)
    assert "What flowed through Sluice:" in output and re.search(r"^\s+Produce\s+[\d,]+", output, re.M)
    assert chart.read_bytes().startswith(PNG_SIGNATURE)
    assert f"Chart of the per-second throughput: {chart}" in output


def test_record_values_are_distinct_per_client_and_index() -> None:
    values = {demo.record_value(client, i) for client in ("alpha", "beta") for i in range(50)}
    assert len(values) == 100
    assert all(len(v) == demo.RECORD_SIZE for v in values)


def test_read_back_digest_ignores_order_but_not_content() -> None:
    hashes = [bytes([i]) * 32 for i in range(5)]
    assert demo.order_free_digest(hashes) == demo.order_free_digest(list(reversed(hashes)))
    assert demo.order_free_digest(hashes) != demo.order_free_digest([*hashes[:4], hashes[0]])


def test_too_short_a_run_is_refused() -> None:
    with pytest.raises(SystemExit) as exc:
        demo.main(["--seconds", "2"])
    assert exc.value.code == 2
