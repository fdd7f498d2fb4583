"""`sluice perf-test`: Apache Kafka's kafka-producer-perf-test, on confluent-kafka.

Usage::

    sluice perf-test --topic T --num-records N --record-size S --throughput R \\
        [--producer-props k=v ...] [--producer.config FILE] [--bootstrap-server HOST:PORT]

Behaves like Kafka's ``ProducerPerformance`` for these flags:

* one pre-generated payload of S random upper-case letters is sent N times, without a key;
* ``--throughput R`` caps the send rate at about R records/s with Kafka's ``ThroughputThrottler``
  (sleep off a deficit once it reaches 2 ms); any negative R means unthrottled. As in Kafka, records sent
  within the first millisecond pass unthrottled, so short runs come out a little above R;
* latency of a record = delivery-report time minus send time, in whole milliseconds; only successful
  deliveries are counted, failures are printed to stderr;
* every 5 s a progress line, at the end the summary line, both with Kafka's exact number formats::

      5000 records sent, 999.8 records/sec (0.95 MB/sec), 1.3 ms avg latency, 12.0 ms max latency.
      5000 records sent, 999.800040 records/sec (0.95 MB/sec), 1.33 ms avg latency, 12.00 ms max latency, \\
1 ms 50th, 3 ms 95th, 7 ms 99th, 12 ms 99.9th.

Differences from Kafka, on purpose: ``--throughput 0`` is refused (Kafka would block forever after the
first record); a property value may contain ``=``; Java-only producer properties are translated
(``buffer.memory``, ``max.request.size``) or ignored with a notice (serializers, ``max.block.ms``).
Delivery reports are served by ``poll(0)`` after every send and by ``poll(timeout)`` while throttled, so a
report waits at most one send for Python to see it. ``--payload-file``, ``--print-metrics``,
transactions and warm-up records are not implemented.

Why this module is long: kafka-producer-perf-test's flags, stats windows and exact output lines are one
tool.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Context, Decimal
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException, Message, Producer

REPORTING_INTERVAL_MS = 5000
_MAX_LATENCY_SAMPLES = 500_000
_MIN_SLEEP_NS = 2_000_000
_NS_PER_SEC = 1_000_000_000
_BYTES_PER_MB = 1024.0 * 1024.0
_QUEUE_FULL_WAIT_S = 0.05
_FLUSH_STEP_S = 1.0

# Producer properties that only the Java client knows.
_IGNORED_JAVA_PROPS = frozenset({"key.serializer", "value.serializer", "max.block.ms", "partitioner.class"})


class PerfTestError(Exception):
    """Bad arguments or producer configuration for a perf test."""


def java_fixed(value: float, places: int) -> str:
    """Format like Java's ``String.format("%.<places>f")``: half-up rounding, Infinity and NaN spelled out."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    # Java rounds the shortest decimal representation half-up; Python's format() rounds the binary value
    # half-even, which differs on ties such as 0.125.
    exact = Decimal(repr(value))
    digits = Context(prec=max(28, exact.adjusted() + places + 2))  # never run out of digits, as Java doesn't
    return str(exact.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP, context=digits))


def _ratio(numerator: float, denominator: float) -> float:
    """Java double division: x/0 is +-Infinity, 0/0 is NaN."""
    if denominator == 0:
        return math.nan if numerator == 0 else math.copysign(math.inf, numerator)
    return numerator / denominator


@dataclass(frozen=True)
class PerfResult:
    records: int
    records_per_sec: float
    mb_per_sec: float
    avg_latency_ms: float
    max_latency_ms: int
    p50_latency_ms: int
    p95_latency_ms: int
    p99_latency_ms: int
    p999_latency_ms: int
    elapsed_s: float
    failed: int = 0

    def summary_line(self) -> str:
        return (
            f"{self.records} records sent, {java_fixed(self.records_per_sec, 6)} records/sec "
            f"({java_fixed(self.mb_per_sec, 2)} MB/sec), "
            f"{java_fixed(self.avg_latency_ms, 2)} ms avg latency, "
            f"{java_fixed(float(self.max_latency_ms), 2)} ms max latency, {self.p50_latency_ms} ms 50th, "
            f"{self.p95_latency_ms} ms 95th, {self.p99_latency_ms} ms 99th, {self.p999_latency_ms} ms 99.9th."
        )


class PerfStats:
    """Kafka's Stats: totals, a 5 s reporting window, and a sample of at most 500 000 latencies."""

    def __init__(self, num_records: int, start_ms: int, report: Callable[[str], None] | None = None) -> None:
        self._start_ms = start_ms
        self._report = report
        self._sampling = num_records // min(num_records, _MAX_LATENCY_SAMPLES)
        self._latencies: list[int] = []
        self._iteration = 0
        self.count = 0
        self.failed = 0
        self._bytes = 0
        self._max_latency = 0
        self._total_latency = 0
        self._window_start_ms = start_ms
        self._window_count = 0
        self._window_bytes = 0
        self._window_max_latency = 0
        self._window_total_latency = 0

    def record(self, latency_ms: int, size: int, now_ms: int) -> None:
        self.count += 1
        self._bytes += size
        self._total_latency += latency_ms
        self._max_latency = max(self._max_latency, latency_ms)
        self._window_count += 1
        self._window_bytes += size
        self._window_total_latency += latency_ms
        self._window_max_latency = max(self._window_max_latency, latency_ms)
        if self._iteration % self._sampling == 0:
            self._latencies.append(latency_ms)
        if now_ms - self._window_start_ms >= REPORTING_INTERVAL_MS:
            if self._report is not None:
                self._report(self.window_line(now_ms))
            self._new_window(now_ms)
        self._iteration += 1

    def window_line(self, now_ms: int) -> str:
        elapsed = now_ms - self._window_start_ms
        records_per_sec = _ratio(1000.0 * self._window_count, elapsed)
        mb_per_sec = _ratio(1000.0 * self._window_bytes, elapsed) / _BYTES_PER_MB
        avg_latency = _ratio(self._window_total_latency, self._window_count)
        return (
            f"{self._window_count} records sent, {java_fixed(records_per_sec, 1)} records/sec "
            f"({java_fixed(mb_per_sec, 2)} MB/sec), {java_fixed(avg_latency, 1)} ms avg latency, "
            f"{java_fixed(float(self._window_max_latency), 1)} ms max latency."
        )

    def _new_window(self, now_ms: int) -> None:
        self._window_start_ms = now_ms
        self._window_count = 0
        self._window_bytes = 0
        self._window_max_latency = 0
        self._window_total_latency = 0

    def result(self, now_ms: int) -> PerfResult:
        elapsed = now_ms - self._start_ms
        p50, p95, p99, p999 = self._percentiles(0.5, 0.95, 0.99, 0.999)
        return PerfResult(
            records=self.count,
            records_per_sec=_ratio(1000.0 * self.count, elapsed),
            mb_per_sec=_ratio(1000.0 * self._bytes, elapsed) / _BYTES_PER_MB,
            avg_latency_ms=_ratio(self._total_latency, self.count),
            max_latency_ms=self._max_latency,
            p50_latency_ms=p50,
            p95_latency_ms=p95,
            p99_latency_ms=p99,
            p999_latency_ms=p999,
            elapsed_s=elapsed / 1000.0,
            failed=self.failed,
        )

    def _percentiles(self, *quantiles: float) -> list[int]:
        ordered = sorted(self._latencies)
        if not ordered:
            return [0] * len(quantiles)  # Kafka reads its zero-filled sample array
        return [ordered[int(q * len(ordered))] for q in quantiles]


class ThroughputThrottler:
    """Kafka's ThroughputThrottler: records/s target; ``wait`` sleeps (and may wake early)."""

    def __init__(self, target_per_sec: float, start_ms: int) -> None:
        self._start_ms = start_ms
        self._target = target_per_sec
        self._sleep_ns = int(_NS_PER_SEC / target_per_sec) if target_per_sec > 0 else sys.maxsize
        self._deficit_ns = 0

    def should_throttle(self, sent_so_far: int, send_start_ms: int) -> bool:
        if self._target < 0:
            return False
        elapsed_s = (send_start_ms - self._start_ms) / 1000.0
        return elapsed_s > 0 and sent_so_far / elapsed_s > self._target

    def throttle(
        self, wait: Callable[[float], None], clock_ns: Callable[[], int] = time.monotonic_ns
    ) -> None:
        self._deficit_ns += self._sleep_ns
        if self._deficit_ns < _MIN_SLEEP_NS:
            return
        started = clock_ns()
        remaining = self._deficit_ns
        while remaining > 0:
            wait(remaining / _NS_PER_SEC)
            remaining = self._deficit_ns - (clock_ns() - started)
        self._deficit_ns = 0


def make_payload(size: int, seed: int = 0) -> bytes:
    """``size`` random letters A-Z, made once and sent for every record, as Kafka does."""
    letters = bytes(65 + value % 26 for value in range(256))
    return random.Random(seed).randbytes(size).translate(letters)


def translate_producer_props(props: Mapping[str, str], warn: Callable[[str], None]) -> dict[str, str]:
    """Java producer property names to librdkafka ones, where they differ."""
    config: dict[str, str] = {}
    for key, value in props.items():
        if key in _IGNORED_JAVA_PROPS:
            warn(f"ignoring Java-only producer property {key}")
        elif key == "buffer.memory":
            config["queue.buffering.max.kbytes"] = str(max(1, _int_prop(key, value) // 1024))
        elif key == "max.request.size":
            config["message.max.bytes"] = value
        else:
            config[key] = value
    return config


def _int_prop(key: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise PerfTestError(f"producer property {key}={value!r}: expected an integer") from None


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def run_perf_test(
    topic: str,
    num_records: int,
    record_size: int,
    throughput: float,
    producer_config: Mapping[str, str],
    *,
    bootstrap_servers: str | None = None,
    progress: Callable[[str], None] | None = None,
    errors: Callable[[str], None] | None = None,
) -> PerfResult:
    """Produce ``num_records`` records of ``record_size`` bytes at about ``throughput`` records/s (-1: as
    fast as possible) and return Kafka's summary numbers. ``producer_config`` takes Kafka or librdkafka
    property names; ``bootstrap_servers`` overrides its ``bootstrap.servers``. ``progress`` receives the
    5-second lines, ``errors`` one line per failed delivery and per ignored property."""
    if num_records <= 0:
        raise PerfTestError("--num-records should be greater than zero")
    if record_size <= 0:
        raise PerfTestError("--record-size should be greater than zero")
    if throughput == 0 or math.isnan(throughput):
        raise PerfTestError(f"--throughput {throughput} would never send; use a positive rate or -1")
    report_error = errors or (lambda _line: None)
    config = {"client.id": "perf-producer-client", **translate_producer_props(producer_config, report_error)}
    if bootstrap_servers:
        config["bootstrap.servers"] = bootstrap_servers
    if not config.get("bootstrap.servers"):
        raise PerfTestError(
            "no bootstrap servers: give --bootstrap-server or --producer-props bootstrap.servers="
        )
    try:
        producer = Producer(config)
    except KafkaException as exc:
        reason = exc.args[0].str() if exc.args and isinstance(exc.args[0], KafkaError) else str(exc)
        raise PerfTestError(f"producer configuration: {reason}") from None
    payload = make_payload(record_size)
    try:
        return _produce_all(producer, topic, num_records, payload, throughput, progress, report_error)
    finally:
        # After a normal run nothing is left; after an interruption, drop the rest instead of waiting out
        # message.timeout.ms.
        producer.purge()
        producer.close()


def _produce_all(
    producer: Producer,
    topic: str,
    num_records: int,
    payload: bytes,
    throughput: float,
    progress: Callable[[str], None] | None,
    report_error: Callable[[str], None],
) -> PerfResult:
    start_ms = _now_ms()
    stats = PerfStats(num_records, start_ms, progress)
    size = len(payload)
    record = stats.record

    def delivered(send_ms: int) -> Callable[[KafkaError | None, Message | None], None]:
        def on_delivery(error: KafkaError | None, _message: Message | None) -> None:
            now_ms = _now_ms()
            if error is None:
                record(now_ms - send_ms, size, now_ms)
            else:
                stats.failed += 1
                report_error(f"delivery failed: {error.str()}")

        return on_delivery

    def wait(seconds: float) -> None:
        # Sleep by polling, so delivery reports are timed while we are throttled.
        producer.poll(seconds)

    throttler = ThroughputThrottler(throughput, start_ms)
    produce, poll = producer.produce, producer.poll
    for sent in range(num_records):
        send_ms = _now_ms()
        callback = delivered(send_ms)
        while True:
            try:
                produce(topic, payload, on_delivery=callback)
                break
            except BufferError:
                # The local queue is full: Kafka's send() blocks here too.
                poll(_QUEUE_FULL_WAIT_S)
            except KafkaException as exc:
                # Refused before sending (e.g. above message.max.bytes); Kafka hands this to the callback.
                callback(exc.args[0], None)
                break
        poll(0)
        if throttler.should_throttle(sent, send_ms):
            throttler.throttle(wait)
    while producer.flush(_FLUSH_STEP_S) > 0:
        pass
    return stats.result(_now_ms())


def read_properties_file(path: Path, flag: str = "--producer.config") -> dict[str, str]:
    """A Java .properties file, the simple subset: ``key=value`` or ``key: value`` lines, # and ! comments."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise PerfTestError(f"{flag} {path}: {exc.strerror}") from None
    props: dict[str, str] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        separator = min((i for i in (stripped.find("="), stripped.find(":")) if i >= 0), default=-1)
        if separator <= 0:
            raise PerfTestError(f"{flag} {path}: cannot read {stripped!r}")
        props[stripped[:separator].strip()] = stripped[separator + 1 :].strip()
    return props


def parse_props(items: Sequence[str]) -> dict[str, str]:
    props: dict[str, str] = {}
    for item in items:
        key, separator, value = item.partition("=")
        if not separator or not key:
            raise PerfTestError(f"Invalid property: {item}")
        props[key] = value
    return props


DESCRIPTION = "Kafka's producer performance test (kafka-producer-perf-test) on confluent-kafka."
EPILOG = """\
Against a quota, run long enough to pass the first burst: a new client may send about
samples x size_seconds x quota (11 s worth) at full speed before Sluice throttles it, so a run that
fits in that burst looks unthrottled. Against a tight quota, where one request's throttle (its size
divided by the quota) nears socket.timeout.ms, set enable.idempotence=true and a smaller batch.size
(docs/quotas.md, "Tight quotas and librdkafka")."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", required=True, metavar="TOPIC", help="produce messages to this topic")
    parser.add_argument("--num-records", required=True, type=int, metavar="NUM-RECORDS")
    parser.add_argument("--record-size", required=True, type=int, metavar="RECORD-SIZE", help="bytes")
    parser.add_argument(
        "--throughput",
        required=True,
        type=float,
        metavar="THROUGHPUT",
        help="throttle to about THROUGHPUT records/sec; -1 disables throttling",
    )
    parser.add_argument("--producer-props", nargs="+", default=[], metavar="PROP-NAME=PROP-VALUE")
    parser.add_argument("--producer.config", dest="producer_config", type=Path, metavar="CONFIG-FILE")
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT", help="overrides bootstrap.servers")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sluice perf-test",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    return parser


def _print_line(line: str) -> None:
    print(line, flush=True)


def _print_error(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    try:
        props = read_properties_file(args.producer_config) if args.producer_config else {}
        props.update(parse_props(args.producer_props))  # as in Kafka, --producer-props win
        result = run_perf_test(
            args.topic,
            args.num_records,
            args.record_size,
            args.throughput,
            props,
            bootstrap_servers=args.bootstrap_server,
            progress=_print_line,
            errors=_print_error,
        )
    except PerfTestError as exc:
        _print_error(f"sluice perf-test: {exc}")
        return 2
    except KeyboardInterrupt:
        return 130
    _print_line(result.summary_line())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
