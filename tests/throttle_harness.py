"""Measuring throttled traffic from the outside: the proxy's own byte counters, sampled over time."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def metric_values(text: str, name: str, **labels: str) -> list[float]:
    """Every sample of `name` whose labels include `labels`."""
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if not m or m.group("name") != name:
            continue
        have = dict(_LABEL.findall(m.group("labels") or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            out.append(float(m.group("value")))
    return out


def metric_value(text: str, name: str, **labels: str) -> float:
    values = metric_values(text, name, **labels)
    return sum(values)


@dataclass
class TrafficSampler:
    """Samples the proxy's request/response byte counters for one API every `interval_s`."""

    proxy: object
    api: str
    direction: str = "request"  # "request" bytes (Produce) or "response" bytes (Fetch)
    interval_s: float = 0.5
    samples: list[tuple[float, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _bytes(self) -> float:
        name = f"sluice_{self.direction}_bytes_total"
        return metric_value(self.proxy.metrics_text(), name, api=self.api)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), self._bytes()))
            self._stop.wait(self.interval_s)

    def start(self) -> TrafficSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.samples.append((time.monotonic(), self._bytes()))

    def average_rate(self, from_s: float, to_s: float | None = None) -> float:
        """Bytes per second between `from_s` and `to_s` seconds after the first sample."""
        t0 = self.samples[0][0]
        window = [
            (t - t0, b) for t, b in self.samples if t - t0 >= from_s and (to_s is None or t - t0 <= to_s)
        ]
        (ta, ba), (tb, bb) = window[0], window[-1]
        return (bb - ba) / (tb - ta)

    def seconds_until(self, total_bytes: float) -> float:
        """Seconds after the first sample at which `total_bytes` had passed (for skipping a burst)."""
        t0, b0 = self.samples[0]
        return next(t - t0 for t, b in self.samples if b - b0 >= total_bytes)

    def per_second(self) -> list[float]:
        t0 = self.samples[0][0]
        series: dict[int, float] = {}
        previous = self.samples[0]
        for t, b in self.samples[1:]:
            series[int(t - t0)] = series.get(int(t - t0), 0.0) + (b - previous[1])
            previous = (t, b)
        return [series.get(s, 0.0) for s in range(max(series) + 1)] if series else []


class FlatOutProducer(threading.Thread):
    """A confluent-kafka (librdkafka) producer sending as fast as it can (or at a steady trickle, with
    `pause_s`) until stopped."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        client_id: str,
        record_size: int = 10_000,
        partitions: int = 6,
        pause_s: float = 0.0,
        **conf: object,
    ):
        super().__init__(daemon=True)
        from confluent_kafka import Producer

        self.throttle_events: list[int] = []
        config = {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "linger.ms": 0,
            "batch.size": 16384,
            "message.timeout.ms": 300000,
            "throttle_cb": lambda event: self.throttle_events.append(event.throttle_time),
        }
        config.update(conf)
        self.producer = Producer(config)
        self.topic = topic
        self.partitions = partitions
        self.pause_s = pause_s  # 0: flat out; otherwise a steady trickle
        self.record_size = record_size
        self.sent: list[bytes] = []
        self.delivered = 0
        self.errors: list[str] = []
        self._stop_flag = threading.Event()

    def _on_delivery(self, err, _msg) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.errors.append(str(err))

    def run(self) -> None:
        i = 0
        while not self._stop_flag.is_set():
            value = i.to_bytes(8, "big") * (self.record_size // 8)
            try:
                # Round-robin: the mock keeps only ~5 MB per partition; a sticky partitioner could pile a
                # whole run onto one partition and lose its oldest records before they are read back.
                self.producer.produce(
                    self.topic, value, partition=i % self.partitions, on_delivery=self._on_delivery
                )
                self.sent.append(value)
                i += 1
            except BufferError:
                self.producer.poll(0.05)
            self.producer.poll(self.pause_s)

    def stop(self) -> None:
        """Stop sending and wait for every queued record (at a tight quota, as long as the queue takes)."""
        self._stop_flag.set()
        self.join(30)
        remaining = self.producer.flush(120)
        self.producer.poll(0)
        if remaining:
            self.errors.append(f"{remaining} records not delivered")

    def stop_now(self) -> None:
        """Stop sending and drop what is still queued (reported as "Purged" errors), for a test that has
        measured what it needs and would otherwise wait for the queue to drain at the quota."""
        self._stop_flag.set()
        self.join(30)
        self.producer.purge()
        self.producer.flush(5)
