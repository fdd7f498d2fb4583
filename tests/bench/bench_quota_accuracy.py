"""Target: long-run quota accuracy within +/-2 %, for 16 KiB and 1 MB batches.

A flat-out confluent-kafka (librdkafka) producer sends to a one-partition topic through a proxy that gives
its client-id `producer_byte_rate` Q = 100,000 B/s, for RUN_S seconds. The cases run at the same time, each
with its own proxy, topic and producer (the throttled traffic is 5 x 100 kB/s, so they hardly compete):
16 KiB batches of one 10 kB record, and 1 MB batches of ten 100 kB records (a 1 MB request is 10 s of
quota), each with Kafka's sampled-window sensor (`quota.sensor: window`) and with the token bucket.

What is measured is the proxy's own `sluice_request_bytes_total{api="Produce"}`, which counts each Produce
exactly as the quota charges it, at the moment it is charged. The counter is read right after each charge
(when the producer gets a delivery report; in kip219 mode the response is not held), not on a clock:
every scrape of the proxy's metrics also reads the quota sensors' rates, and reading a sampled-window rate
restarts its expired samples at the time of the read (Kafka's `SampledStat` purge does the same), which
shortens later throttles. A read right after a charge finds nothing new to restart. One extra case shows
what a clock-driven 10 Hz scrape does to the 1 MB window case.

The initial allowance (a new client may send about N x W x Q at once) is left out: the steady part starts
N x W seconds after the first charge. Then, per case:

* over whole periods: from the first charge of one burst to the first charge of a later burst of the same
  size (a burst: a 1 MB request, a pair of them, or the window comb's ~1 MB rush), so the span holds whole
  periods of whatever shape the traffic has;
* over an arbitrary span: from the start of the steady part to the end of the run, wherever in a period
  those fall;
* over every 60 s span inside the steady part: the lowest and the highest ratio (how far the shape of the
  traffic lets a short observation stray).

The client is told its throttles in `throttle_time_ms`; librdkafka reports them to `throttle_cb`, whose
largest value is recorded (Kafka 3.7 was measured at 1.15-1.30x with throttles up to 21 s in the 1 MB
case).

Run alone: ``.venv/bin/python tests/bench/bench_quota_accuracy.py [seconds]`` (one JSON record per line).
"""

from __future__ import annotations

import bisect
import json
import re
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parents[1]))  # tests/: the test broker and proxy handles

from confluent_kafka import KafkaError, Producer
from harness import QuietProxy
from measurements import Record, measurement
from mock_cluster_process import MockCluster

QUOTA = 100_000  # producer_byte_rate, B/s
TARGET_PERCENT = 2.0
RUN_S = 240.0
WINDOW_SAMPLES, WINDOW_SECONDS = 11, 1  # the proxy's defaults (Kafka's quota.window.num / .size.seconds)
ALLOWANCE_S = WINDOW_SAMPLES * WINDOW_SECONDS
SPAN_S = 60.0
SPAN_STEP_S = 0.1
# A burst starts with a charge that follows QUIET_S without one and is followed, within BURST_WINDOW_S, by
# at least BURST_BYTES; whole periods run between bursts at least ANCHOR_SHARE as big as the biggest.
QUIET_S = 0.5
BURST_WINDOW_S = 0.5
BURST_BYTES = 500_000
ANCHOR_SHARE = 0.75
SHOWN_S = 60
BROKERS = 3

_SMALL_BATCHES: dict[str, Any] = {"batch.size": 16384, "linger.ms": 0, "queue.buffering.max.kbytes": 512}
# message.max.bytes (librdkafka's cap on a whole request) is raised above its 1,000,000 default, so a batch
# holds all ten 100 kB records that batch.size allows.
_LARGE_BATCHES: dict[str, Any] = {
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
    scrape_every_s: float | None = None  # None: read the counter right after each charge

    @property
    def topic(self) -> str:
        return f"accuracy-{self.key}"

    @property
    def client_id(self) -> str:
        return f"pump-{self.key}"

    @property
    def label(self) -> str:
        scraped = "" if self.scrape_every_s is None else f", scraped every {self.scrape_every_s:g} s"
        return f"{self.batches} / {self.sensor}{scraped}"

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
    Case("1mb_window_scraped", "1 MB", "window", 100_000, _LARGE_BATCHES, scrape_every_s=0.1),
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
        self.delivery = threading.Event()  # set on every delivery report: a charge has just happened
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
            self.delivery.set()
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
    """One proxy's Produce byte counter, read whenever `trigger` is set (or every `every_s` seconds when
    given), stamped with the middle of the scrape."""

    def __init__(self, proxy: QuietProxy, trigger: threading.Event, every_s: float | None) -> None:
        super().__init__(daemon=True)
        self._proxy = proxy
        self._trigger = trigger
        self._every_s = every_s
        self.samples: list[tuple[float, float]] = []
        self._stopping = threading.Event()

    def sample(self) -> None:
        before = time.monotonic()
        value = produce_bytes(self._proxy.metrics_text())
        self.samples.append(((before + time.monotonic()) / 2, value))

    def run(self) -> None:
        next_at = time.monotonic()
        while not self._stopping.is_set():
            if self._every_s is not None:
                self.sample()
                next_at += self._every_s
                self._stopping.wait(max(0.0, next_at - time.monotonic()))
            elif self._trigger.wait(0.5):
                # Cleared before the read, so a charge during the read triggers one more.
                self._trigger.clear()
                self.sample()

    def stop(self) -> None:
        self._stopping.set()
        self.join(10)
        self.sample()


# ---- analysis: pure functions over (seconds, cumulative bytes) samples --------------------------------


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


@dataclass(frozen=True)
class Burst:
    index: int  # the sample that first shows the burst
    at_s: float
    bytes: float  # within BURST_WINDOW_S


@dataclass
class Accuracy:
    first_charge_s: float
    steady_from_s: float
    initial_bytes: float  # in the first ALLOWANCE_S seconds
    arbitrary: Span
    periods: Span | None
    period_count: int
    bursts: list[Burst]  # from the steady part on
    span_ratios: tuple[float, float]  # lowest and highest over every SPAN_S span in the steady part
    per_second: list[float]


class Counter:
    """A sampled cumulative counter, read as a step function: its value at t is the last sample <= t."""

    def __init__(self, samples: Sequence[tuple[float, float]]) -> None:
        self.times = [t for t, _ in samples]
        self.values = [v for _, v in samples]

    def at(self, t: float) -> float:
        i = bisect.bisect_right(self.times, t)
        return self.values[i - 1] if i else self.values[0]

    def steps(self) -> list[int]:
        """Indices of the samples that show an increase."""
        return [i for i in range(1, len(self.values)) if self.values[i] > self.values[i - 1]]


def find_bursts(counter: Counter, from_s: float) -> list[Burst]:
    steps = counter.steps()
    bursts = []
    for k, i in enumerate(steps):
        t = counter.times[i]
        if t < from_s or (k > 0 and t - counter.times[steps[k - 1]] < QUIET_S):
            continue
        size = counter.at(t + BURST_WINDOW_S) - counter.values[i - 1]
        if size >= BURST_BYTES:
            bursts.append(Burst(i, t, size))
    return bursts


def whole_periods(counter: Counter, bursts: Sequence[Burst]) -> tuple[Span | None, int]:
    """From the first to the last burst of the biggest kind: the periods between them are whole."""
    if not bursts:
        return None, 0
    biggest = max(b.bytes for b in bursts)
    anchors = [b for b in bursts if b.bytes >= ANCHOR_SHARE * biggest]
    if len(anchors) < 2:
        return None, 0
    first, last = anchors[0], anchors[-1]
    sent = counter.values[last.index - 1] - counter.values[first.index - 1]
    return Span(first.at_s, last.at_s, sent), len(anchors) - 1


def analyse(samples: Sequence[tuple[float, float]]) -> Accuracy:
    """`samples`: (monotonic seconds, cumulative Produce bytes), the first taken before any charge."""
    counter = Counter(samples)
    first_step = counter.steps()[0]
    first_charge = counter.times[first_step]
    steady_from = first_charge + ALLOWANCE_S
    end = counter.times[-1]
    arbitrary = Span(steady_from, end, counter.at(end) - counter.at(steady_from))
    bursts = find_bursts(counter, steady_from)
    periods, count = whole_periods(counter, bursts)
    ratios = []
    start = steady_from
    while start + SPAN_S <= end:
        ratios.append((counter.at(start + SPAN_S) - counter.at(start)) / SPAN_S / QUOTA)
        start += SPAN_STEP_S
    before = counter.values[first_step - 1]
    return Accuracy(
        first_charge_s=first_charge,
        steady_from_s=steady_from,
        initial_bytes=counter.at(steady_from) - before,
        arbitrary=arbitrary,
        periods=periods,
        period_count=count,
        bursts=bursts,
        span_ratios=(min(ratios), max(ratios)) if ratios else (float("nan"), float("nan")),
        # The first charge's sample comes a moment after the charge: second 0 starts just before it.
        per_second=[
            counter.at(first_charge - 0.01 + s + 1) - counter.at(first_charge - 0.01 + s)
            for s in range(SHOWN_S)
        ],
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
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def _metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        m = _METRIC.match(line)
        if m and m["name"] == name:
            have = dict(_LABEL.findall(m["labels"] or ""))
            if all(have.get(k) == v for k, v in labels.items()):
                total += float(m["value"])
    return total


def measure(cases: Sequence[Case] = CASES, run_s: float = RUN_S) -> list[CaseRun]:
    with MockCluster(brokers=BROKERS, topics={case.topic: 1 for case in cases}) as cluster:
        proxies: dict[str, QuietProxy] = {}
        producers: dict[str, FlatOutProducer] = {}
        samplers: dict[str, ProduceByteSampler] = {}
        try:
            for case in cases:
                proxies[case.key] = QuietProxy(cluster.bootstrap, extra_config=case.quota_config())
            for case in cases:
                producer = FlatOutProducer(proxies[case.key].bootstrap, case)
                producers[case.key] = producer
                samplers[case.key] = ProduceByteSampler(
                    proxies[case.key], producer.delivery, case.scrape_every_s
                )
            for sampler in samplers.values():
                sampler.sample()  # before the first charge, to date it
                sampler.start()
            for producer in producers.values():
                producer.start()
            time.sleep(run_s)
            for sampler in samplers.values():
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
        samples = samplers[case.key].samples
        runs.append(
            CaseRun(
                case=case,
                accuracy=analyse(samples),
                largest_told_s=max(told, default=0.0),
                throttles_told=len(told),
                largest_computed_ms=_metric(text, "sluice_throttle_time_max_ms", type="Produce"),
                throttles_computed=_metric(text, "sluice_throttles_total", type="Produce"),
                requests=_metric(text, "sluice_requests_total", api="Produce"),
                request_bytes=produce_bytes(text),
                delivered=producer.delivered,
                samples=samples,
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


def _table(runs: Sequence[CaseRun]) -> dict[str, list]:
    rows = []
    for r in runs:
        a = r.accuracy
        periods = "—" if a.periods is None else f"{a.period_count} in {a.periods.seconds:.1f} s"
        rows.append(
            [r.case.label, f"{r.requests:,.0f}", f"{r.request_bytes / max(r.requests, 1):,.0f}",
             f"{a.initial_bytes / 1000:,.0f}", periods, _ratio_text(a.periods),
             f"{a.arbitrary.seconds:.1f} s", _ratio_text(a.arbitrary),
             f"{a.span_ratios[0]:.3f} - {a.span_ratios[1]:.3f}",
             f"{r.throttles_told:,}", f"{r.largest_told_s:.3f}", f"{r.largest_computed_ms / 1000:.3f}"]
        )  # fmt: skip
    return {
        "columns": ["case (batches / sensor)", "Produce requests", "mean request B",
                    f"first {ALLOWANCE_S} s, kB", "whole periods", "measured / Q, whole periods",
                    "steady span", "measured / Q, span", f"any {SPAN_S:.0f} s span, lowest - highest",
                    "throttles told", "largest told, s", "largest computed, s"],
        "rows": rows,
    }  # fmt: skip


def _notes(runs: Sequence[CaseRun], run_s: float) -> list[str]:
    notes = [
        f"Q = producer_byte_rate = {QUOTA:,} B/s on each producer's client-id; window sensor N = "
        f"{WINDOW_SAMPLES}, W = {WINDOW_SECONDS} s; throttle_mode kip219 (librdkafka ignores "
        f"throttle_time_ms, so the mute alone holds it). The {len(runs)} cases ran at the same time for "
        f"{run_s:.0f} s, each with its own proxy and one-partition topic on a {BROKERS}-broker mock cluster.",
        "producers (confluent-kafka, acks=1): 16 KiB = 10,000 B records, "
        + ", ".join(f"{k}={v}" for k, v in _SMALL_BATCHES.items())
        + "; 1 MB = 100,000 B records, "
        + ", ".join(f"{k}={v}" for k, v in _LARGE_BATCHES.items())
        + ".",
        'measured = the proxy\'s `sluice_request_bytes_total{api="Produce"}` (what the quota charges), read '
        "right after each charge (on the producer's delivery reports); the first "
        f"{ALLOWANCE_S} s after the first charge (the initial allowance of about N x W x Q) are left out.",
        "whole periods: from the first charge of one burst to the first charge of the last burst of the "
        f"same size (a burst: >= {BURST_BYTES:,} B within {BURST_WINDOW_S} s after {QUIET_S} s without a "
        "charge); span: from the end of the allowance to the end of the run, whatever the phase; "
        f"any {SPAN_S:.0f} s span: every {SPAN_S:.0f} s span starting in the steady part, "
        f"{SPAN_STEP_S} s apart.",
        "throttles told = non-zero throttle_time_ms values librdkafka reported to throttle_cb; largest "
        'computed = the proxy\'s `sluice_throttle_time_max_ms{type="Produce"}`. For comparison, a Kafka '
        "3.7 broker was measured with 1 MB batches at 1.15-1.30x its quota with throttles of up to 21 s "
        "(not here: these machines have no broker).",
        "`scraped every 0.1 s`: the same 1 MB / window case with the proxy's metrics read on a 10 Hz clock "
        "instead. Each read measures the quota sensors, and reading a sampled-window rate restarts expired "
        "samples at the time of the read (Kafka's SampledStat purge resets a sample to `now`, and its "
        "metric reads do the same), so the elapsed window at the next charge is up to 1 s longer and that "
        "throttle up to 1 s shorter. The token bucket's reading is a pure function of time and is not "
        "affected; the 16 KiB comb charges often enough that its samples are restarted by charges anyway.",
    ]
    for r in runs:
        a = r.accuracy
        shown = a.bursts[:12]
        bursts = ", ".join(f"{b.at_s - a.first_charge_s:.1f} s ({b.bytes / 1e6:.2f} MB)" for b in shown)
        more = ", ..." if len(a.bursts) > len(shown) else ""
        notes.append(
            f"{r.case.label}: kB per second for the first {SHOWN_S} s: "
            + " ".join(f"{v / 1000:.0f}" for v in a.per_second)
            + (f"; bursts after the allowance, from the first charge: {bursts}{more}" if bursts else "")
            + f"; {r.delivered:,} records delivered, {len(r.samples):,} counter reads."
        )
    return notes


def records_from(runs: Sequence[CaseRun], run_s: float = RUN_S) -> list[Record]:
    records: list[Record] = []
    for r in runs:
        if r.case.scrape_every_s is not None:
            continue  # a demonstration of the observer effect, not the target
        span, what = _long_run(r)
        extra: dict[str, Any] = {}
        if not records:
            extra = {
                "title": "Quota accuracy of a flat-out librdkafka producer, producer_byte_rate = 100,000 B/s",
                "table": _table(runs),
                "notes": _notes(runs, run_s),
                "commands": [".venv/bin/python tests/bench/bench_quota_accuracy.py"],
            }
        records.append(
            measurement(
                f"quota_accuracy_{r.case.key}_error",
                round(abs(span.ratio - 1) * 100, 2),
                f"% off Q ({span.ratio:.4f} x Q over {what}, {span.seconds:.0f} s)",
                TARGET_PERCENT,
                better="lower",
                **extra,
            )
        )
    for r in runs:
        a, key = r.accuracy, r.case.key
        if a.periods is not None:
            records.append(measurement(f"quota_accuracy_{key}_periods", round(a.periods.ratio, 4), "x Q"))
        records.append(measurement(f"quota_accuracy_{key}_span", round(a.arbitrary.ratio, 4), "x Q"))
        records.append(
            measurement(f"quota_accuracy_{key}_largest_throttle_told", round(r.largest_told_s, 3), "s")
        )
    return records


def run(run_s: float = RUN_S) -> list[Record]:
    return records_from(measure(CASES, run_s), run_s)


if __name__ == "__main__":
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else RUN_S
    for record in run(seconds):
        print(json.dumps(record))
