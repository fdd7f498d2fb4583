"""Quota admin: how soon an alter is enforced on every instance, and how fast a large store is described.

1. alter -> enforced, 3 proxy instances in front of one mock cluster, sharing one store topic. Each
   instance has a probe: a connection sending small Produce requests one after another under a fresh
   client-id. An AlterClientQuotas sent to one instance (rotating) gives that client-id a quota so small
   that its next Produce is throttled; the latency is from sending the alter to the first Produce answer
   carrying throttle_time_ms > 0, on each instance (the one that wrote it and the two that follow the
   store topic). Target: p99 < 1 s.
2. DescribeClientQuotas of everything with 10,000 entities stored, round trip through the proxy. Target:
   < 50 ms (median).

Run alone: ``.venv/bin/python tests/bench/bench_quota_admin.py`` (or as section 12 of ``make bench``).
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measurements import Record, measurement
from mock_cluster_process import MockCluster
from proxy_process import ProxyProcess
from rawclient import RawClient

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.client_quota_codec import (
    ALTER_CLIENT_QUOTAS,
    DESCRIBE_CLIENT_QUOTAS,
    AlterEntry,
    QuotaOp,
    decode_alter_response,
    decode_describe_response,
    encode_alter_request,
    encode_describe_request,
)
from sluice.protocol.client_requests import encode_produce_request
from sluice.protocol.record_batches import Record as KafkaRecord
from sluice.protocol.record_batches import encode_record_batch
from sluice.protocol.throttle_field import read_throttle_ms

TOPIC = "bench-admin"
PRODUCE_VERSION = 8
TRIALS = 40
ENTITIES = 10_000


def _produce_body() -> bytes:
    batch = encode_record_batch([KafkaRecord(None, b"x" * 1000)], int(time.time() * 1000))
    return encode_produce_request(PRODUCE_VERSION, TOPIC, 0, batch, acks=1, timeout_ms=5000)


class Probe(threading.Thread):
    """Produces under `client_id` to one instance until an answer carries a throttle; records when."""

    def __init__(self, port: int, client_id: str, body: bytes) -> None:
        super().__init__(daemon=True)
        self.client = RawClient("127.0.0.1", port, client_id=client_id)
        self.body = body
        self.throttled_at: float | None = None
        self.done = threading.Event()

    def run(self) -> None:
        try:
            while not self.done.is_set():
                answer = self.client.call_body(ApiKey.PRODUCE, PRODUCE_VERSION, self.body)
                if (read_throttle_ms(ApiKey.PRODUCE, PRODUCE_VERSION, answer) or 0) > 0:
                    self.throttled_at = time.monotonic()
                    return
        finally:
            self.client.close()


def _alter(port: int, entries: list[AlterEntry]) -> None:
    with RawClient("127.0.0.1", port, timeout_s=60) as client:
        body = client.call_body(ALTER_CLIENT_QUOTAS, 1, encode_alter_request(1, entries, False))
    failed = [r for r in decode_alter_response(1, body).results if r.error_code]
    if failed:
        raise RuntimeError(f"alter refused: {failed[:3]}")


def alter_to_enforced(proxies: list[ProxyProcess], trials: int = TRIALS) -> list[float]:
    body = _produce_body()
    latencies: list[float] = []
    for trial in range(trials):
        client_id = f"probe-{trial}"
        probes = [Probe(p.port, client_id, body) for p in proxies]
        for probe in probes:
            probe.start()
        time.sleep(0.2)  # every probe is producing, unthrottled
        sent = time.monotonic()
        _alter(
            proxies[trial % len(proxies)].port,
            [AlterEntry((("client-id", client_id),), (QuotaOp("producer_byte_rate", 1.0, False),))],
        )
        for probe in probes:
            probe.join(10)
            probe.done.set()
            if probe.throttled_at is None:
                raise RuntimeError(f"{client_id}: no throttle within 10 s on one instance")
            latencies.append(probe.throttled_at - sent)
    return latencies


def describe_large_store(proxy: ProxyProcess, entities: int = ENTITIES, runs: int = 20) -> list[float]:
    batch = 1000
    for start in range(0, entities, batch):
        _alter(
            proxy.port,
            [
                AlterEntry(
                    (("user", f"user-{i}"), ("client-id", f"app-{i % 50}")),
                    (QuotaOp("producer_byte_rate", 1000.0 + i, False),),
                )
                for i in range(start, min(start + batch, entities))
            ],
        )
    request = encode_describe_request(1, [], False)
    times = []
    with RawClient("127.0.0.1", proxy.port, timeout_s=30) as client:
        for _ in range(runs):
            began = time.perf_counter()
            body = client.call_body(DESCRIBE_CLIENT_QUOTAS, 1, request)
            times.append(time.perf_counter() - began)
            found = decode_describe_response(1, body).entries
            if found is None or len(found) < entities:
                raise RuntimeError(f"described {0 if found is None else len(found)} of {entities} entities")
    return times


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run() -> list[Record]:
    records: list[Record] = []
    with MockCluster(brokers=3, topics={TOPIC: 1}) as cluster:
        config = {
            "quota": {"store": {"topic": "bench-admin-store"}},
            "log": {"level": "warning", "format": "json"},
        }
        proxies = [ProxyProcess(cluster.bootstrap, config, log_level="warning") for _ in range(3)]
        try:
            latencies = alter_to_enforced(proxies)
            describe = describe_large_store(proxies[0])
        finally:
            for p in proxies:
                p.close()
    command = ".venv/bin/python tests/bench/bench_quota_admin.py"
    ms = [1000 * v for v in latencies]
    notes = [
        f"{len(ms)} samples ({TRIALS} alters x 3 instances); the alter goes to each instance in turn",
        f"min {min(ms):.0f} ms, p50 {statistics.median(ms):.0f} ms, p99 {_percentile(ms, 0.99):.0f} ms, "
        f"max {max(ms):.0f} ms",
    ]
    records.append(
        measurement(
            "alter_to_enforced_p50", statistics.median(ms), "ms", None, better="lower", commands=[command]
        )
    )
    records.append(
        measurement("alter_to_enforced_p99", _percentile(ms, 0.99), "ms", 1000.0, better="lower", notes=notes)
    )
    describe_ms = [1000 * v for v in describe]
    records.append(
        measurement(
            "describe_10000_entities_median",
            statistics.median(describe_ms),
            "ms",
            50.0,
            better="lower",
            notes=[f"round trip through the proxy, {len(describe_ms)} runs, max {max(describe_ms):.1f} ms"],
        )
    )
    return records


if __name__ == "__main__":
    for record in run():
        print(
            record["name"],
            f"{record['value']:.1f}",
            record["unit"],
            "target",
            record["target"],
            *record.get("notes", ()),
        )
