"""The broker shield's end-to-end tests' tools: producers at a fixed rate, and each broker's ingress as the
proxy counts it."""

from __future__ import annotations

import contextlib
import threading
import time

from proxy_process import ProxyProcess
from throttle_harness import metric_value

RECORD_BYTES = 10_000
# A request's batch, as Java's producer makes it by default. librdkafka's own default (1,000,000 bytes)
# made a throttled producer's requests grow with its backlog to ~1 MB each: 3 s of a 300 kB/s shield
# admitted at once, and a span measured over 40 s moved by a request more or less at its end.
BATCH_BYTES = 16_384
NODES = (1, 2, 3)


class PacedProducer(threading.Thread):
    """A librdkafka producer sending RECORD_BYTES records at a fixed rate, round robin over `partitions`;
    what cannot be delivered yet waits in its queue (the rate asked of the proxy does not change)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float, client_id: str) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer

        self.throttles: list[int] = []
        self.errors: list[str] = []
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": client_id,
                "linger.ms": 5,
                "batch.size": BATCH_BYTES,
                "throttle_cb": lambda event: self.throttles.append(event.throttle_time),
                "error_cb": lambda error: self.errors.append(str(error)),
            }
        )
        self.topic, self.partitions, self.rate = topic, partitions, rate
        self._stop_flag = threading.Event()

    def run(self) -> None:
        start = time.monotonic()
        sent = 0
        value = bytes(RECORD_BYTES)
        while not self._stop_flag.is_set():
            due = start + sent * RECORD_BYTES / self.rate
            # The pacing is the load itself: wait for the next record's turn (or the stop).
            if self._stop_flag.wait(max(0.0, due - time.monotonic())):
                break
            with contextlib.suppress(BufferError):  # a full queue: this record is skipped, the pace goes on
                self.producer.produce(self.topic, value, partition=sent % self.partitions)
            sent += 1
            self.producer.poll(0)

    def stop(self) -> None:
        self._stop_flag.set()
        self.join(10)
        self.producer.purge()
        self.producer.flush(5)


class BrokerIngress(threading.Thread):
    """Samples the proxy's per-broker Produce byte counters (a counter: scraping moves no sensor)."""

    def __init__(self, proxy: ProxyProcess, interval_s: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.proxy = proxy
        self.interval_s = interval_s
        self.samples: list[tuple[float, dict[int, float]]] = []
        self._stop_flag = threading.Event()
        self._sampled = threading.Condition()

    def run(self) -> None:
        while not self._stop_flag.is_set():
            text = self.proxy.metrics_text()
            counts = {
                n: metric_value(text, "sluice_broker_produce_bytes_total", node_id=str(n)) for n in NODES
            }
            with self._sampled:
                self.samples.append((time.monotonic(), counts))
                self._sampled.notify_all()
            self._stop_flag.wait(self.interval_s)

    def wait_past(self, instant: float) -> None:
        """Until a sample taken after `instant` exists (the span to measure has passed)."""
        with self._sampled:
            if not self._sampled.wait_for(lambda: self.samples and self.samples[-1][0] >= instant, 120):
                raise TimeoutError("the proxy's metrics stopped answering")

    def rate(self, node: int, start: float, seconds: int) -> float:
        """Bytes per second into `node` over `seconds` whole seconds from `start` (nearest samples)."""
        self.wait_past(start + seconds)
        first = min(self.samples, key=lambda s: abs(s[0] - start))
        last = min(self.samples, key=lambda s: abs(s[0] - (start + seconds)))
        return (last[1][node] - first[1][node]) / (last[0] - first[0])

    def stop(self) -> None:
        self._stop_flag.set()
        self.join(10)
