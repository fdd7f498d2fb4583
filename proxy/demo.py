"""`sluice demo`: a local test broker, the proxy in front of it, a real producer and consumer through it.

Everything runs on 127.0.0.1 and stops by itself; the exit code is 0 only if every record produced came
back byte for byte through the proxy.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
import time
import uuid
from collections.abc import Sequence

from .mock_cluster_process import MockCluster
from .proxy_process import ProxyProcess

TOPIC = "demo"
PARTITIONS = 6


def _payload(i: int, size: int) -> bytes:
    seed = hashlib.sha256(i.to_bytes(8, "big")).digest()
    return (seed * (size // len(seed) + 1))[:size]


def _produce(bootstrap: str, records: int, size: int) -> str:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "client.id": "demo-producer"})
    digest = hashlib.sha256()
    started = last_report = time.monotonic()
    reported = 0
    for i in range(records):
        value = _payload(i, size)
        digest.update(value)
        while True:
            try:
                producer.produce(TOPIC, value, key=b"%d" % i)
                break
            except BufferError:
                producer.poll(0.05)
        now = time.monotonic()
        if now - last_report >= 1.0:
            rate = (i - reported) / (now - last_report)
            print(
                f"  producer  t={now - started:5.1f}s  {rate:9,.0f} records/s  {rate * size / 1e6:7.2f} MB/s"
            )
            last_report, reported = now, i
    left = producer.flush(60)
    if left:
        raise RuntimeError(f"{left} records were not delivered")
    elapsed = time.monotonic() - started
    print(
        f"  producer  done: {records:,} records in {elapsed:.1f}s ({records * size / elapsed / 1e6:.2f} MB/s)"
    )
    return _ordered_digest(records, size)


def _ordered_digest(records: int, size: int) -> str:
    # Consumers see partitions interleaved, so compare an order-independent digest: sorted record hashes.
    return hashlib.sha256(
        b"".join(sorted(hashlib.sha256(_payload(i, size)).digest() for i in range(records)))
    ).hexdigest()


def _consume(bootstrap: str, records: int, timeout_s: float = 120.0) -> str:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"demo-{uuid.uuid4()}",
            "client.id": "demo-consumer",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([TOPIC])
    hashes: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    started = time.monotonic()
    while len(hashes) < records and time.monotonic() < deadline:
        for msg in consumer.consume(1000, timeout=1.0):
            if msg.error() is None:
                hashes.append(hashlib.sha256(msg.value()).digest())
    consumer.close()
    print(f"  consumer  read {len(hashes):,} records in {time.monotonic() - started:.1f}s")
    return hashlib.sha256(b"".join(sorted(hashes))).hexdigest()


def _traffic_table(metrics_text: str) -> list[tuple[str, int, int, int]]:
    """(api, requests, request bytes, response bytes) per API, from the proxy's Prometheus endpoint."""
    values: dict[tuple[str, str], float] = {}
    pattern = re.compile(r'^(sluice_\w+)_total\{api="(\w+)"\} ([0-9.e+]+)$')
    for line in metrics_text.splitlines():
        m = pattern.match(line)
        if m:
            values[(m.group(1), m.group(2))] = float(m.group(3))
    apis = sorted({api for _, api in values}, key=lambda a: -values.get(("sluice_request_bytes", a), 0))
    return [
        (
            api,
            int(values.get(("sluice_requests", api), 0)),
            int(values.get(("sluice_request_bytes", api), 0)),
            int(values.get(("sluice_response_bytes", api), 0)),
        )
        for api in apis
    ]


def run_demo(records: int, size: int) -> int:
    print("Starting the test broker: librdkafka's mock cluster, 3 brokers, topic 'demo' with 6 partitions")
    with MockCluster(brokers=3, topics={TOPIC: PARTITIONS}) as cluster:
        print(f"  brokers at {cluster.bootstrap}")
        with ProxyProcess(cluster.bootstrap) as proxy:
            print(f"Sluice listening on {proxy.bootstrap} (brokers on {proxy.broker_port_base}+node id)")
            print(f"Producing {records:,} records of {size} bytes through Sluice:")
            produced = _produce(proxy.bootstrap, records, size)
            print("Consuming them back through Sluice with a consumer group:")
            consumed = _consume(proxy.bootstrap, records)
            table = _traffic_table(proxy.metrics_text())
            exit_code = proxy.stop()
        print("\nWhat flowed through Sluice:")
        print(f"  {'API':<28}{'requests':>10}{'bytes in':>14}{'bytes out':>14}")
        for api, requests, bytes_in, bytes_out in table:
            print(f"  {api:<28}{requests:>10,}{bytes_in:>14,}{bytes_out:>14,}")
    intact = produced == consumed
    print(f"\nEvery record came back byte for byte: {'yes' if intact else 'NO'}")
    print(f"Proxy stopped on SIGTERM with exit code {exit_code}")
    return 0 if intact and exit_code == 0 else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sluice demo", description=__doc__)
    parser.add_argument("--records", type=int, default=30_000)
    parser.add_argument("--record-size", type=int, default=512)
    args = parser.parse_args(argv)
    return run_demo(args.records, args.record_size)


if __name__ == "__main__":
    sys.exit(main())
