"""Issue 4 target: long-run quota accuracy within +/-2 %, for 16 KiB and 1 MB batches.

A flat-out confluent-kafka (librdkafka) producer sends to a one-partition topic through a proxy that gives
its client-id `producer_byte_rate` Q = 100,000 B/s, for RUN_S seconds. Four cases run at the same time, each
with its own proxy, topic and producer (the throttled traffic is 4 x 100 kB/s, so they hardly compete): 16
KiB batches of one 10 kB record, and 1 MB batches of ten 100 kB records (a 1 MB request is 10 s of quota),
each with Kafka's sampled-window sensor (`quota.sensor: window`) and with the token bucket.

What is measured is the proxy's own `sluice_request_bytes_total{api="Produce"}`, which counts each Produce
exactly as the quota charges it, at the moment it is charged; a sampler thread reads it every SAMPLE_S.
The initial allowance (a new client may send about N x W x Q at once) is left out: the steady measurement
starts N x W seconds after the first byte. Then, per case:

* over whole periods: from the start of one burst to the start of a later one (a burst = a 1 MB request,
  or the window comb's ~1 MB rush), so the span holds whole periods of whatever shape the traffic has;
* over an arbitrary span: from the steady start to the end of the run, wherever in a period it falls;
* over every 60 s span inside the steady part: the lowest and highest ratio (how far the shape of the
  traffic lets a short observation stray).

The client is told its throttles in `throttle_time_ms`; librdkafka reports them to `throttle_cb`, whose
largest value is recorded (the issue quotes Kafka 3.7 at 1.15-1.30x with throttles up to 21 s in the 1 MB
case).

Run alone: ``.venv/bin/python tests/bench/bench_quota_accuracy.py`` (one JSON record per line).
"""

from __future__ import annotations

import bisect
import json
import re
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from anywhere without installing

from confluent_kafka import KafkaError, Producer
from harness import QuietProxy
from measurements import Record, measurement

from proxy.mock_cluster_process import MockCluster

QUOTA = 100_000  # producer_byte_rate, B/s
TARGET_PERCENT = 2.0
RUN_S = 180.0
SAMPLE_S = 0.1
WINDOW_SAMPLES, WINDOW_SECONDS = 11, 1  # the proxy's defaults (Kafka's quota.window.num / .size.seconds)
ALLOWANCE_S = WINDOW_SAMPLES * WINDOW_SECONDS
SPAN_S = 60.0
# A period starts where at least BURST_BYTES pass within one second and the first sampled step alone
# carries JUMP_BYTES (so a lone 10 kB request just before a rush does not count as its start).
BURST_BYTES = 500_000
JUMP_BYTES = 50_000
MIN_PERIOD_S = 2.0
SHOWN_S = 60
BROKERS = 3

_SMALL_BATCHES = {"batch.size": 16384, "linger.ms": 0, "queue.buffering.max.kbytes": 512}
# message.max.bytes (librdkafka's cap on a whole request) is raised above its 1,000,000 default, so a batch
# holds all ten 100 kB records that batch.size allows.
_LARGE_BATCHES = {
    "batch.size": 1048576,
    "linger.ms": 500,
    "message.max.bytes": 1_100_000,
    "queue.buffering.max.kbytes": 2048,
}


@dataclass(frozen=True)
class Case:
    key: str
    batches: str
    sensor: str
    record_bytes: int
    producer_config: dict[str, Any]

    @property
    def topic(self) -> str:
        return f"accuracy-{self.key}"

    @property
    def client_id(self) -> str:
        return f"pump-{self.key}"

    def quota_config(self) -> dict[str, Any]:
        return {
            "quota": {
                "sensor": self.sensor,
                "window": {"samples": WINDOW_SAMPLES, "size_seconds": WINDOW_SECONDS},
                "throttle_mode": "kip219",
                "entities": [{"client_id": self.client_id, "producer_byte_rate": QUOTA}],
            }
        }


CASES = (
    Case("16kib_window", "16 KiB", "window", 10_000, _SMALL_BATCHES),
    Case("16kib_token_bucket", "16 KiB", "token_bucket", 10_000, _SMALL_BATCHES),
    Case("1mb_window", "1 MB", "window", 100_000, _LARGE_BATCHES),
    Case("1mb_token_bucket", "1 MB", "token_bucket", 100_000, _LARGE_BATCHES),
)


# ---- load and observation -------------------------------------------------------------------------


class FlatOutProducer(threading.Thread):
    """librdkafka producing as fast as its (small) queue allows until stopped; what is still queued at
    the end is purged, not flushed, because flushing a throttled queue would take minutes."""

    def __init__(self, bootstrap: str, case: Case) -> None:
        super().__init__(daemon=True)
        self.throttles_s: list[float] = []
        self.delivered = 0
        self.errors: list[str] = []
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": case.client_id,
                "acks": 1,
                "message.timeout.ms": 600_000,
                "throttle_cb": lambda event: self.throttles_s.append(event.throttle_time),
                **case.producer_config,
            }
        )
        self._topic = case.topic
        self._value = bytes(65 + i % 26 for i in range(case.record_bytes))
        self._stopping = threading.Event()

    def _on_delivery(self, err: KafkaError | None, _msg: object) -> None:
        if err is None:
            self.delivered += 1
        elif err.code() not in (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT):
            self.errors.append(str(err))

    def run(self) -> None:
        producer = self._producer
        while not self._stopping.is_set():
            try:
                producer.produce(self._topic, self._value, on_delivery=self._on_delivery)
            except BufferError:
                producer.poll(0.05)
            producer.poll(0)

    def stop(self) -> None:
        self._stopping.set()
        self.join(30)
        self._producer.purge()
        self._producer.flush(10)


_PRODUCE_BYTES = re.compile(r'^sluice_request_bytes_total\{api="Produce"\} (\S+)$', re.MULTILINE)


def produce_bytes(metrics_text: str) -> float:
    match = _PRODUCE_BYTES.search(metrics_text)
    return float(match.group(1)) if match else 0.0


class ProduceByteSampler(threading.Thread):
    """Every SAMPLE_S, each proxy's Produce byte counter, stamped with the middle of its scrape."""

    def __init__(self, proxies: dict[str, QuietProxy]) -> None:
        super().__init__(daemon=True)
        self._proxies = proxies
        self.samples: dict[str, list[tuple[float, float]]] = {key: [] for key in proxies}
        self._stopping = threading.Event()

    def _sample_all(self) -> None:
        for key, proxy in self._proxies.items():
            before = time.monotonic()
            value = produce_bytes(proxy.metrics_text())
            self.samples[key].append(((before + time.monotonic()) / 2, value))

    def run(self) -> None:
        next_at = time.monotonic()
        while not self._stopping.is_set():
            self._sample_all()
            next_at += SAMPLE_S
            self._stopping.wait(max(0.0, next_at - time.monotonic()))

    def stop(self) -> None:
        self._stopping.set()
        self.join(10)
        self._sample_all()


# ---- analysis (pure functions over (seconds, cumulative bytes) samples) ------------------------------


@dataclass(frozen=True)
class Span:
    start_s: float
    end_s: float
    bytes: float

    @property
    def seconds(self) -> float:
        return self.end_s - self.start_s

    @property
    def ratio(self) -> float:
        return self.bytes / self.seconds / QUOTA


@dataclass
class Accuracy:
    first_byte_s: float
    steady_from_s: float
    initial_bytes: float  # bytes in the first ALLOWANCE_S seconds
    arbitrary: Span
    periods: Span | None
    period_count: int
    period_starts_s: list[float]
    span_ratios: tuple[float, float]  # lowest and highest over every SPAN_S span in the steady part
    per_second: list[float] = field(default_factory=list)


def _bytes_at(times: Sequence[float], values: Sequence[float], at: float) -> float:
    """The counter at time `at`, by linear interpolation between the samples around it."""
    i = bisect.bisect_left(times, at)
    if i <= 0:
        return values[0]
    if i >= len(times):
        return values[-1]
    t0, t1 = times[i - 1], times[i]
    return values[i - 1] + (values[i] - values[i - 1]) * (at - t0) / (t1 - t0)


def period_starts(samples: Sequence[tuple[float, float]], from_s: float) -> list[int]:
    """Indices i whose preceding sample (i - 1) is the last moment before a burst (see BURST_BYTES)."""
    times = [t for t, _ in samples]
    values = [b for _, b in samples]
    starts: list[int] = []
    for i in range(1, len(samples)):
        t = times[i - 1]
        if t < from_s or values[i] - values[i - 1] < JUMP_BYTES:
            continue
        if starts and t - times[starts[-1] - 1] < MIN_PERIOD_S:
            continue
        if _bytes_at(times, values, t + 1.0) - values[i - 1] >= BURST_BYTES:
            starts.append(i)
    return starts


def per_second(samples: Sequence[tuple[float, float]], from_s: float, seconds: int) -> list[float]:
    times = [t for t, _ in samples]
    values = [b for _, b in samples]
    return [
        _bytes_at(times, values, from_s + s + 1) - _bytes_at(times, values, from_s + s)
        for s in range(seconds)
    ]


def analyse(samples: Sequence[tuple[float, float]]) -> Accuracy:
    """`samples`: (monotonic seconds, cumulative Produce bytes), the first taken before any byte."""
    times = [t for t, _ in samples]
    values = [b for _, b in samples]
    first = next(i for i, b in enumerate(values) if b > values[0])
    first_byte_s = times[first - 1]  # the first request arrived after this sample
    steady_from = first_byte_s + ALLOWANCE_S
    s = bisect.bisect_left(times, steady_from)
    arbitrary = Span(times[s], times[-1], values[-1] - values[s])
    starts = period_starts(samples, steady_from)
    periods = None
    if len(starts) >= 2:
        a, b = starts[0] - 1, starts[-1] - 1
        periods = Span(times[a], times[b], values[b] - values[a])
    ratios = []
    for i in range(s, len(times)):
        end = times[i] + SPAN_S
        if end > times[-1]:
            break
        ratios.append((_bytes_at(times, values, end) - values[i]) / SPAN_S / QUOTA)
    return Accuracy(
        first_byte_s=first_byte_s,
        steady_from_s=steady_from,
        initial_bytes=_bytes_at(times, values, steady_from) - values[first - 1],
        arbitrary=arbitrary,
        periods=periods,
        period_count=len(starts) - 1,
        period_starts_s=[times[i - 1] - first_byte_s for i in starts],
        span_ratios=(min(ratios), max(ratios)) if ratios else (float("nan"), float("nan")),
        per_second=per_second(samples, first_byte_s, SHOWN_S),
    )


# ---- the run --------------------------------------------------------------------------------------


@dataclass
class CaseRun:
    case: Case
    accuracy: Accuracy
    largest_told_s: float
    throttles_told: int
    largest_computed_ms: float
    throttles_computed: float
    requests: float
    request_bytes: float
    delivered: int
    samples: list[tuple[float, float]]


_METRIC = re.compile(r"^(?P<name>\w+)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$")


def _metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        m = _METRIC.match(line)
        if m and m["name"] == name:
            have = dict(re.findall(r'(\w+)="([^"]*)"', m["labels"] or ""))
            if all(have.get(k) == v for k, v in labels.items()):
                total += float(m["value"])
    return total


def measure(cases: Sequence[Case] = CASES, run_s: float = RUN_S) -> list[CaseRun]:
    topics = {case.topic: 1 for case in cases}
    with MockCluster(brokers=BROKERS, topics=topics) as cluster:
        proxies: dict[str, QuietProxy] = {}
        producers: dict[str, FlatOutProducer] = {}
        try:
            for case in cases:
                proxies[case.key] = QuietProxy(cluster.bootstrap, BROKERS, extra_config=case.quota_config())
            for case in cases:
                producers[case.key] = FlatOutProducer(proxies[case.key].bootstrap, case)
            sampler = ProduceByteSampler(proxies)
            sampler.start()
            time.sleep(2 * SAMPLE_S)  # a few samples before the first byte, to date it
            for producer in producers.values():
                producer.start()
            time.sleep(run_s)
            sampler.stop()
            texts = {key: proxy.metrics_text() for key, proxy in proxies.items()}
            for producer in producers.values():
                producer.stop()
        finally:
            for proxy in proxies.values():
                proxy.close()
    runs = []
    for case in cases:
        producer, text = producers[case.key], texts[case.key]
        if producer.errors:
            raise RuntimeError(f"{case.key}: the producer saw errors: {producer.errors[:3]}")
        told = [t for t in producer.throttles_s if t > 0]
        runs.append(
            CaseRun(
                case=case,
                accuracy=analyse(sampler.samples[case.key]),
                largest_told_s=max(told, default=0.0),
                throttles_told=len(told),
                largest_computed_ms=_metric(text, "sluice_throttle_time_max_ms", type="Produce"),
                throttles_computed=_metric(text, "sluice_throttles_total", type="Produce"),
                requests=_metric(text, "sluice_requests_total", api="Produce"),
                request_bytes=produce_bytes(text),
                delivered=producer.delivered,
                samples=sampler.samples[case.key],
            )
        )
    return runs


# ---- the report -----------------------------------------------------------------------------------


def _ratio_text(span: Span | None) -> str:
    return "—" if span is None else f"{span.ratio:.4f}"


def _long_run(run: CaseRun) -> tuple[Span, str]:
    """The span the target is judged on: whole periods when the traffic has them, else the steady span."""
    if run.accuracy.periods is not None:
        return run.accuracy.periods, f"{run.accuracy.period_count} whole periods"
    return run.accuracy.arbitrary, "the steady span (no bursts, so no periods to align)"


def records_from(runs: Sequence[CaseRun], run_s: float = RUN_S) -> list[Record]:
    rows = []
    for r in runs:
        a = r.accuracy
        periods = "—" if a.periods is None else f"{a.period_count} in {a.periods.seconds:.1f} s"
        rows.append(
            [r.case.batches, r.case.sensor, f"{r.requests:,.0f}", f"{r.request_bytes / max(r.requests, 1):,.0f}",
             f"{a.initial_bytes / 1000:,.0f}", periods, _ratio_text(a.periods),
             f"{a.arbitrary.seconds:.1f} s", _ratio_text(a.arbitrary),
             f"{a.span_ratios[0]:.3f} - {a.span_ratios[1]:.3f}",
             f"{r.throttles_told:,}", f"{r.largest_told_s:.3f}", f"{r.largest_computed_ms / 1000:.3f}"]
        )  # fmt: skip
    table = {
        "columns": ["batches", "sensor", "Produce requests", "mean request B", "first 11 s, kB",
                    "periods", "measured / quota, whole periods", "steady span", "measured / quota, span",
                    f"any {SPAN_S:.0f} s span, lowest - highest", "throttles told", "largest told, s",
                    "largest computed, s"],
        "rows": rows,
    }  # fmt: skip
    notes = [
        f"Q = producer_byte_rate = {QUOTA:,} B/s on the producer's client-id; window sensor N = "
        f"{WINDOW_SAMPLES}, W = {WINDOW_SECONDS} s; throttle_mode kip219 (librdkafka ignores "
        "throttle_time_ms, so the mute alone holds it). The four cases ran at the same time for "
        f"{run_s:.0f} s, each with its own proxy and one-partition topic on a {BROKERS}-broker mock cluster.",
        "producers (confluent-kafka, acks=1): 16 KiB = 10,000 B records, "
        + ", ".join(f"{k}={v}" for k, v in _SMALL_BATCHES.items())
        + "; 1 MB = 100,000 B records, "
        + ", ".join(f"{k}={v}" for k, v in _LARGE_BATCHES.items())
        + ".",
        'measured = the proxy\'s `sluice_request_bytes_total{api="Produce"}` (what the quota charges), '
        f"sampled every {SAMPLE_S} s; the first {ALLOWANCE_S} s after the first byte (the initial "
        "allowance of about N x W x Q) are left out.",
        "whole periods: from the last sample before one burst to the last sample before a later one (a "
        f"burst: >= {BURST_BYTES:,} B within 1 s, starting with a sampled step of >= {JUMP_BYTES:,} B); "
        "span: from the end of the allowance to the end of the run, ignoring the period phase; "
        f"any {SPAN_S:.0f} s span: every {SPAN_S:.0f} s span starting at a sample in the steady part.",
        "throttles told = non-zero throttle_time_ms values librdkafka reported to throttle_cb; largest "
        'computed = the proxy\'s `sluice_throttle_time_max_ms{type="Produce"}`. For comparison, the issue '
        "quotes a Kafka 3.7 broker with 1 MB batches at 1.15-1.30x its quota with throttles of up to 21 s.",
    ]
    for r in runs:
        a = r.accuracy
        starts = ", ".join(f"{s:.1f}" for s in a.period_starts_s[:12])
        more = ", ..." if len(a.period_starts_s) > 12 else ""
        notes.append(
            f"{r.case.batches} / {r.case.sensor}: kB per second for the first {SHOWN_S} s: "
            + " ".join(f"{v / 1000:.0f}" for v in a.per_second)
            + (f"; bursts start at {starts}{more} s after the first byte" if starts else "; no bursts")
            + f"; {r.delivered:,} records delivered."
        )
    records: list[Record] = []
    for i, r in enumerate(runs):
        span, what = _long_run(r)
        extra: dict[str, Any] = {}
        if i == 0:
            extra = {
                "title": "Quota accuracy of a flat-out librdkafka producer, producer_byte_rate = 100,000 B/s",
                "table": table,
                "notes": notes,
                "commands": [".venv/bin/python tests/bench/bench_quota_accuracy.py"],
            }
        records.append(
            measurement(
                f"quota_accuracy_{r.case.key}_error",
                round(abs(span.ratio - 1) * 100, 2),
                f"% off quota ({span.ratio:.4f} x Q over {what}, {span.seconds:.0f} s)",
                TARGET_PERCENT,
                better="lower",
                **extra,
            )
        )
    for r in runs:
        a = r.accuracy
        if a.periods is not None:
            records.append(
                measurement(f"quota_accuracy_{r.case.key}_periods", round(a.periods.ratio, 4), "x Q")
            )
        records.append(measurement(f"quota_accuracy_{r.case.key}_span", round(a.arbitrary.ratio, 4), "x Q"))
        records.append(
            measurement(f"quota_accuracy_{r.case.key}_largest_throttle_told", round(r.largest_told_s, 3), "s")
        )
    return records


def run(run_s: float = RUN_S) -> list[Record]:
    return records_from(measure(CASES, run_s), run_s)


if __name__ == "__main__":
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else RUN_S
    for record in run(seconds):
        print(json.dumps(record))
