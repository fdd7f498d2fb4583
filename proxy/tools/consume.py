"""`sluice consume`: Apache Kafka's kafka-consumer-perf-test, on confluent-kafka.

Usage::

    sluice consume --bootstrap-server HOST:PORT --topic T --messages N [--group G] [--timeout MS] \\
        [--from-latest] [--consumer-props k=v ...] [--consumer.config FILE] [--hide-header]

Behaves like Kafka's ``ConsumerPerformance``: one consumer in group G (default ``perf-consumer-<random>``)
subscribes to T and reads from the earliest offset (``--from-latest``: the latest) until it has read at
least N records or no record came for ``--timeout`` ms (default 10000; counted from the group's assignment
or the last record, and the assignment is awaited up to 60 s; then a warning on stderr and exit code 1,
since fewer than N came back). It prints Kafka's header and one line, with Kafka's number
formats::

    start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, \\
fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
    2026-11-24 10:00:00:000, 2026-11-24 10:00:12:345, 0.9537, 0.0773, 10000, 810.0446, 3012, 9333, \\
0.1022, 1071.4668

MB are MiB of keys and values (1024 x 1024 bytes), as in Kafka; ``MB.sec`` is over the whole run,
``fetch.MB.sec`` over the time after the group assigned partitions (``fetch.time.ms``). A record
consumed in a batch that passes N is counted too, so the count may end a little above N.

Differences from Kafka, on purpose: ``--consumer-props k=v`` sets consumer properties on the command line
(Kafka only takes ``--consumer.config``); a timeout before N records exits with code 1 (Kafka: 0), and
the timeout waits for the group's first assignment (Kafka's can run out during a slow first rebalance);
``--threads``, ``--num-fetch-threads``, ``--show-detailed-stats`` and ``--print-metrics`` are not
implemented.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from .perf_test import PerfTestError, java_fixed, parse_props, read_properties_file

HEADER = (
    "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
    "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
)
DEFAULT_TIMEOUT_MS = 10_000
ASSIGNMENT_WAIT_MS = 60_000  # how long to wait for the group to assign partitions at all
_BATCH = 500
_POLL_S = 0.2
_BYTES_PER_MB = 1024.0 * 1024.0


@dataclass(frozen=True)
class ConsumeResult:
    records: int
    bytes: int
    start_ms: int  # wall clock, for the printed times
    end_ms: int
    rebalance_ms: int  # from subscribing until the group assigned partitions
    timed_out: bool

    @property
    def elapsed_s(self) -> float:
        return (self.end_ms - self.start_ms) / 1000.0

    def line(self) -> str:
        megabytes = self.bytes / _BYTES_PER_MB
        elapsed_s = self.elapsed_s
        fetch_ms = self.end_ms - self.start_ms - self.rebalance_ms
        fetch_s = fetch_ms / 1000.0
        return ", ".join(
            [
                _kafka_time(self.start_ms),
                _kafka_time(self.end_ms),
                java_fixed(megabytes, 4),
                java_fixed(_ratio(megabytes, elapsed_s), 4),
                str(self.records),
                java_fixed(_ratio(self.records, elapsed_s), 4),
                str(self.rebalance_ms),
                str(fetch_ms),
                java_fixed(_ratio(megabytes, fetch_s), 4),
                java_fixed(_ratio(self.records, fetch_s), 4),
            ]
        )


def _ratio(numerator: float, denominator: float) -> float:
    if denominator <= 0:
        return float("nan") if numerator == 0 else float("inf")
    return numerator / denominator


def _kafka_time(epoch_ms: int) -> str:
    """Kafka's default --date-format, yyyy-MM-dd HH:mm:ss:SSS, in local time."""
    moment = datetime.fromtimestamp(epoch_ms / 1000.0)
    return moment.strftime("%Y-%m-%d %H:%M:%S:") + f"{epoch_ms % 1000:03d}"


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def consume(
    topic: str,
    messages: int,
    consumer_config: Mapping[str, str],
    *,
    bootstrap_servers: str | None = None,
    group: str | None = None,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
    from_latest: bool = False,
    on_record: Callable[[bytes | None, bytes | None], None] | None = None,
) -> ConsumeResult:
    """Read at least `messages` records of `topic` (or until `timeout_ms` without one) and count them.

    `on_record(key, value)` sees every record read, for callers that check what came back."""
    if messages <= 0:
        raise PerfTestError("--messages should be greater than zero")
    if timeout_ms <= 0:
        raise PerfTestError("--timeout should be greater than zero")
    config = {
        "group.id": group or f"perf-consumer-{random.randrange(100_000)}",
        "client.id": "perf-consumer-client",
        "auto.offset.reset": "latest" if from_latest else "earliest",
        **consumer_config,
    }
    if bootstrap_servers:
        config["bootstrap.servers"] = bootstrap_servers
    if not config.get("bootstrap.servers"):
        raise PerfTestError("no bootstrap servers: give --bootstrap-server or bootstrap.servers=")
    try:
        consumer = Consumer(config)
    except KafkaException as exc:
        reason = exc.args[0].str() if exc.args and isinstance(exc.args[0], KafkaError) else str(exc)
        raise PerfTestError(f"consumer configuration: {reason}") from None
    try:
        return _read(consumer, topic, messages, timeout_ms, on_record)
    finally:
        consumer.close()


def _read(
    consumer: Consumer,
    topic: str,
    messages: int,
    timeout_ms: int,
    on_record: Callable[[bytes | None, bytes | None], None] | None,
) -> ConsumeResult:
    start_ms = _wall_ms()
    assigned_ms: list[int] = []

    def on_assign(_consumer: Consumer, _partitions: list[TopicPartition]) -> None:
        if not assigned_ms:
            assigned_ms.append(_wall_ms())

    consumer.subscribe([topic], on_assign=on_assign)
    records = size = 0
    last_record_ms = end_ms = start_ms
    while records < messages:
        batch = consumer.consume(_BATCH, timeout=_POLL_S)
        now_ms = _wall_ms()
        for message in batch:
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    print(f"sluice consume: {error.str()}", file=sys.stderr, flush=True)
                continue
            key, value = message.key(), message.value()
            records += 1
            size += len(key or b"") + len(value or b"")
            if on_record is not None:
                on_record(key, value)
            last_record_ms = end_ms = now_ms
        # The group's first rebalance (3 s on librdkafka's mock) does not eat into the timeout.
        if assigned_ms:
            quiet_since, limit_ms = max(last_record_ms, assigned_ms[0]), timeout_ms
        else:
            quiet_since, limit_ms = start_ms, max(timeout_ms, ASSIGNMENT_WAIT_MS)
        if records < messages and now_ms - quiet_since > limit_ms:
            return ConsumeResult(records, size, start_ms, end_ms, _rebalance(assigned_ms, start_ms), True)
    return ConsumeResult(records, size, start_ms, end_ms, _rebalance(assigned_ms, start_ms), False)


def _rebalance(assigned_ms: list[int], start_ms: int) -> int:
    return assigned_ms[0] - start_ms if assigned_ms else 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT", help="the servers to bootstrap from")
    parser.add_argument("--topic", required=True, metavar="TOPIC", help="the topic to consume from")
    parser.add_argument(
        "--messages", required=True, type=int, metavar="COUNT", help="the number of records to read"
    )
    parser.add_argument(
        "--group", metavar="GROUP-ID", help="consumer group (default: perf-consumer-<random>)"
    )
    parser.add_argument(
        "--timeout",
        type=int,
        default=DEFAULT_TIMEOUT_MS,
        metavar="MS",
        help="give up when no record came for this long",
    )
    parser.add_argument("--from-latest", action="store_true", help="start at the end of the topic")
    parser.add_argument("--consumer-props", nargs="+", default=[], metavar="PROP-NAME=PROP-VALUE")
    parser.add_argument("--consumer.config", dest="consumer_config", type=Path, metavar="CONFIG-FILE")
    parser.add_argument("--hide-header", action="store_true", help="print the numbers without the header")


DESCRIPTION = "Kafka's consumer performance test (kafka-consumer-perf-test) on confluent-kafka."


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sluice consume", description=DESCRIPTION)
    add_arguments(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    try:
        props = (
            read_properties_file(args.consumer_config, "--consumer.config") if args.consumer_config else {}
        )
        props.update(parse_props(args.consumer_props))
        result = consume(
            args.topic,
            args.messages,
            props,
            bootstrap_servers=args.bootstrap_server,
            group=args.group,
            timeout_ms=args.timeout,
            from_latest=args.from_latest,
        )
    except PerfTestError as exc:
        print(f"sluice consume: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    if result.timed_out:
        print(
            f"WARNING: Exiting before consuming the expected number of messages: timeout ({args.timeout} ms) "
            f"exceeded with {result.records} of {args.messages} read. You can use the --timeout option to "
            "increase the timeout.",
            file=sys.stderr,
            flush=True,
        )
    if not args.hide_header:
        print(HEADER)
    print(result.line(), flush=True)
    return 1 if result.timed_out else 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
