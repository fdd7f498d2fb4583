"""The open-loop generator against the test broker: every request it schedules in the counted window is
answered and counted once, the rate it reports is the rate it offered, and its percentiles are ordered."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parents[1]))  # tests/: the test broker and proxy handles

import open_loop
from mock_cluster_process import MockCluster

pytestmark = pytest.mark.slow  # starts the test broker

RATE = 2_000
DURATION_S = 0.5


def test_every_scheduled_request_is_answered_and_counted_once() -> None:
    with MockCluster(brokers=1, topics={"latency": 1}) as cluster:
        port = str(cluster.addresses[0][1])
        flags = ["--rate", str(RATE), "--connections", "3", "--warmup", "0.2", "--duration", str(DURATION_S)]
        args = open_loop.build_parser().parse_args(["--port", port, *flags, "--check-every", "7"])
        load = open_loop.OpenLoop(args)
        try:
            result = load.run()
        finally:
            load.close()
    assert result["counted"] == RATE * DURATION_S
    assert result["missing"] == 0 and result["errors"] == 0 and result["failures"] == []
    assert result["achieved_per_s"] == RATE
    assert result["checked"] > 0
    latency = result["latency_us"]
    assert 0 < latency["p50"] <= latency["p99"] <= latency["p99.9"] <= latency["max"]
    # From the intended send time, never less than from the actual send.
    assert latency["p50"] >= result["latency_from_send_us"]["p50"]
