"""A real Kafka client as a load generator: librdkafka (confluent-kafka) producing or consuming flat out.

The raw-socket generator (wire_load.py) sends what we choose; this sends what a real producer sends: the
sticky partitioner's batches of `--batch-bytes` over every partition, `linger.ms`, the client's own
request pipelining, and a consumer's Fetch sessions. The same process serves the bare relay and the proxy,
so the bytes through either are the client's own choice, not ours.

Run: ``.venv/bin/python tests/bench/kafka_client_load.py --bootstrap HOST:PORT --topic T --mode produce
--batch-bytes 16384 --acks 1 --records 200000`` or ``... --mode consume --passes 8`` (reads every partition
from its first kept offset to its end, that many times).

Prints ``{"event": "window_start"}`` once the client is connected (a producer: and has moved its first
records; the connection set-up and metadata are outside the counted window), ``{"event": "window_end"}``
when the last record is acknowledged (produce) or received (consume), then the result as one JSON object,
on stdout; the harness reads the proxy's CPU clock at the two events (harness.run_windowed).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

CLIENT_ID = "real-client-bench"
WARMUP_RECORDS = 600  # enough for every partition's first batch and the connections behind them
_QUEUE_FULL_WAIT_S = 0.005  # librdkafka's own queue is full: wait for deliveries (the client's back-pressure)
# The longest a consume call waits for 10,000 records: a pass's last call, which gets fewer, returns this
# soon after the last record instead of idling inside the window.
_CONSUME_WAIT_S = 0.01
_PASS_TIMEOUT_S = 120  # a consume pass that has not read every partition to its end by then fails


def _event(name: str) -> None:
    print(json.dumps({"event": name}), flush=True)


def produce(args: argparse.Namespace) -> dict[str, Any]:
    failures: list[str] = []

    def delivered(error: KafkaError | None, _message: object) -> None:
        if error is not None and len(failures) < 10:
            failures.append(str(error))

    producer = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "client.id": CLIENT_ID,
            "acks": args.acks,
            "batch.size": args.batch_bytes,
            "linger.ms": args.linger_ms,
            "compression.type": "none",
            "queue.buffering.max.kbytes": 65536,
        }
    )
    value = bytes(65 + i % 26 for i in range(args.record_bytes))

    def send(count: int) -> None:
        for _ in range(count):
            while True:
                try:
                    producer.produce(args.topic, value, on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(_QUEUE_FULL_WAIT_S)
            producer.poll(0)

    send(WARMUP_RECORDS)
    producer.flush(30)
    _event("window_start")
    start = time.perf_counter()
    send(args.records)
    left = producer.flush(120)
    seconds = time.perf_counter() - start
    _event("window_end")
    if left:
        failures.append(f"{left} records not delivered")
    return _result("produce", args, seconds, failures)


def consume(args: argparse.Namespace) -> dict[str, Any]:
    """Read every partition from its first kept offset to its end, `--passes` times over, each pass with a
    consumer of its own: the mock cluster keeps only the newest ~5 MB of each partition, too little for one
    pass to be measured.

    The window covers the reading: each pass's assignment (its offset look-up and Fetch session set-up, part
    of what a consumer costs a proxy), its Fetch exchanges, and the empty answers to the finished passes'
    last long polls. A pass ends when its last partition's last record arrives, not when a `consume` call's
    timeout runs out (with `consume(10_000, 1.0)` every pass ended in a one-second wait for records that did
    not exist). A consumer of its own per pass, because a consumer at a log's end has a long poll in flight
    (`fetch.wait.max.ms`, 500 ms, held by the broker while it has nothing), and librdkafka sends a
    connection's next Fetch only after that one's answer: the same consumer re-assigned would wait out the
    poll before its next pass could start."""
    connected = [_connected_consumer(args, n) for n in range(args.passes)]
    ends = {tp.partition: end for tp, end in connected[0][1].items() if end > 0}
    _event("window_start")
    start = time.perf_counter()
    failures: list[str] = []
    received = 0
    for consumer, _ in connected:
        consumer.assign([TopicPartition(args.topic, partition, OFFSET_BEGINNING) for partition in ends])
        left = set(ends)
        deadline = time.monotonic() + _PASS_TIMEOUT_S
        while left and time.monotonic() < deadline:
            for message in consumer.consume(10_000, _CONSUME_WAIT_S):
                if message.error() is not None:
                    if len(failures) < 10:
                        failures.append(str(message.error()))
                    continue
                received += 1
                if message.offset() + 1 >= ends[message.partition()]:
                    left.discard(message.partition())
        # Fetch no more: its partitions unassigned, the finished consumer sends nothing during the others'
        # passes (its long poll in flight is answered and not followed by another).
        consumer.unassign()
        if left:
            failures.append(f"partitions {sorted(left)} not read to their end")
            break
    seconds = time.perf_counter() - start
    _event("window_end")
    for consumer, _ in connected:
        consumer.close()
    args.records = received
    return _result("consume", args, seconds, failures)


def _connected_consumer(args: argparse.Namespace, number: int) -> tuple[Consumer, dict[TopicPartition, int]]:
    """A consumer, and the topic's end offsets it read, with what it asks for before it reads done before
    the window opens: the topic's metadata and end offsets (its connections to the bootstrap server and the
    partitions' leader) and its committed offsets (which find the group's coordinator and connect to it; a
    consumer with a `group.id` looks for it even when it only assigns partitions)."""
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "client.id": CLIENT_ID,
            "group.id": f"{CLIENT_ID}-{time.time_ns()}-{number}",
            "enable.auto.commit": False,
        }
    )
    metadata = consumer.list_topics(args.topic, timeout=30)
    partitions = [TopicPartition(args.topic, p) for p in sorted(metadata.topics[args.topic].partitions)]
    ends = {tp: consumer.get_watermark_offsets(tp, timeout=30)[1] for tp in partitions}
    consumer.committed(partitions, timeout=30)
    return consumer, ends


def _result(kind: str, args: argparse.Namespace, seconds: float, failures: list[str]) -> dict[str, Any]:
    payload = args.records * args.record_bytes
    return {
        "kind": kind,
        "records": args.records,
        "payload_bytes": payload,
        "seconds": round(seconds, 4),
        "errors": len(failures),
        "closed_early": 0,
        "failures": failures,
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--mode", choices=("produce", "consume"), required=True)
    parser.add_argument("--records", type=int, default=0, help="produce: records in the counted window")
    parser.add_argument("--record-bytes", type=int, default=1000)
    parser.add_argument("--batch-bytes", type=int, default=16384, help="the producer's batch.size")
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--acks", default="1", choices=("0", "1", "all"))
    parser.add_argument("--passes", type=int, default=8, help="consume: times the topic is read over")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.passes < 1:
        parser.error("--passes must be at least 1")
    result = produce(args) if args.mode == "produce" else consume(args)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
