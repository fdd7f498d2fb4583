"""A consumer that fetches by topic id (librdkafka sends Fetch v13+ to the mock cluster) is recorded in the
usage records under the topic's name, which its own Metadata answer paired with the id."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from mock_cluster_process import MockCluster
from proxy_process import ProxyProcess

from sluice.proxy.tools.demo_usage import save_usage_topic

pytestmark = pytest.mark.slow
TOPIC, RECORDS = "history", 30
UUID_TEXT = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def test_fetch_topics_are_recorded_by_name(tmp_path: Path) -> None:
    with MockCluster(brokers=3, topics={TOPIC: 3}) as cluster:
        filler = Producer({"bootstrap.servers": cluster.bootstrap})
        for i in range(RECORDS):
            filler.produce(TOPIC, b"x" * 1000, partition=i % 3)
        assert filler.flush(10) == 0
        with ProxyProcess(cluster.bootstrap, {"usage": {"enabled": True, "interval_ms": 200}}) as proxy:
            reader = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": "g", "client.id": "reader"})
            reader.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(3)])
            received, deadline = 0, time.monotonic() + 30
            while received < RECORDS and time.monotonic() < deadline:
                received += sum(1 for m in reader.consume(100, timeout=0.5) if m.error() is None)
            reader.close()
            assert received == RECORDS
            proxy.stop()  # a clean stop publishes the interval so far
        saved = save_usage_topic(cluster.bootstrap, tmp_path / "usage.jsonl")
    text = (tmp_path / "usage.jsonl").read_text()
    assert saved.messages > 0
    assert f'"topic":"{TOPIC}"' in text and '"fetch_bytes"' in text
    assert not UUID_TEXT.search(text), "a topic was recorded by its id"
