"""A raw-socket Kafka load generator for the benchmarks: pre-built requests, pipelined, responses counted.

Requests are encoded once with kafka-python's generated codecs and the request header from `protocol/`,
then written again and again, so the generator spends its CPU on system calls rather than on encoding,
and the process under test (proxy, bare relay or broker) is the bottleneck. Every connection keeps
``--in-flight`` requests outstanding, writing ``--batch`` requests per system call whenever ``--batch``
answers have come back. Every answer is length-checked; every ``--check-every``-th (and the first) is
decoded and its error code checked, so a broker refusing the load cannot pass for a fast one.

Run: ``.venv/bin/python tests/bench/wire_load.py --port P --kind produce --record-bytes 104857 --records 10
--requests 2048 --in-flight 4`` or ``... --kind fetch --topic small --requests 3000 --in-flight 4`` (bulk: a
fixed number of requests; a Fetch asks 6 partitions of `--topic` from offset 0, ready for
tests/bench/canned_broker.py's canned answer) or ``... --kind apiversions
--connections 8 --in-flight 256 --batch 32 --warmup 1 --duration 5`` (rate: answers per second; SIGTERM
ends the window early). Prints ``{"event": "window_start"}`` and ``{"event": "window_end"}`` around the
counted window, then the result as one JSON object, on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import ssl
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, cast

from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.memory_records import MemoryRecordsBuilder

from sluice.protocol.headers import encode_request_header, frame, response_header_size

API_VERSIONS = 18

PRODUCE_VERSION = 7  # the newest non-flexible Produce: a fixed-size header, nothing to patch
FETCH_VERSION = 11  # the newest non-flexible Fetch, naming topics by name
FETCH_PARTITIONS = 6
CLIENT_ID = "sluice-bench"


@dataclass(frozen=True)
class RequestKind:
    api_key: int
    version: int
    body: bytes
    check: Callable[[bytes], int]  # response body -> error code (0 = fine)


def _produce_errors(version: int) -> Callable[[bytes], int]:
    def check(body: bytes) -> int:
        response = ProduceResponse[version].decode(body)
        for topic in response.responses:
            for partition in topic.partition_responses:
                if partition.error_code:
                    return partition.error_code
        return 0

    return check


def produce_body(topic: str, partition: int, record_bytes: int, records: int, acks: int) -> bytes:
    """A Produce v7 body with one uncompressed v2 record batch of `records` values of `record_bytes`."""
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=records * (record_bytes + 64))
    value = bytes(65 + i % 26 for i in range(record_bytes))
    for _ in range(records):
        builder.append(0, None, value, [])
    builder.close()
    data = ProduceRequest.TopicProduceData.PartitionProduceData(
        index=partition, records=bytes(builder.buffer())
    )
    request = ProduceRequest(
        version=PRODUCE_VERSION,
        acks=acks,
        timeout_ms=30000,
        topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=[data])],
    )
    request.transactional_id = None
    return bytes(request.encode(version=PRODUCE_VERSION))


def _fetch_errors(body: bytes) -> int:
    response = FetchResponse[FETCH_VERSION].decode(body)
    if response.error_code:
        return response.error_code
    for topic in response.responses:
        for partition in topic.partitions:
            if partition.error_code:
                return partition.error_code
    return 0


def fetch_body(topic: str) -> bytes:
    """A Fetch v11 body asking `FETCH_PARTITIONS` partitions of `topic` from offset 0, up to 50 MB."""
    partition_cls = FetchRequest.FetchTopic.FetchPartition
    partitions = [
        partition_cls(
            partition=p,
            current_leader_epoch=-1,
            fetch_offset=0,
            log_start_offset=-1,
            partition_max_bytes=1 << 20,
        )
        for p in range(FETCH_PARTITIONS)
    ]
    request = FetchRequest[FETCH_VERSION](
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=52_428_800,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=partitions)],
        forgotten_topics_data=[],
        rack_id="",
    )
    return bytes(request.encode(version=FETCH_VERSION))


def request_kind(name: str, topic: str, partition: int, record_bytes: int, records: int) -> RequestKind:
    if name == "produce":
        body = produce_body(topic, partition, record_bytes, records, acks=1)
        return RequestKind(0, PRODUCE_VERSION, body, _produce_errors(PRODUCE_VERSION))
    if name == "fetch":
        return RequestKind(1, FETCH_VERSION, fetch_body(topic), _fetch_errors)
    if name == "apiversions":
        return RequestKind(
            18,
            0,
            bytes(ApiVersionsRequest[0]().encode(version=0)),
            lambda body: ApiVersionsResponse[0].decode(body).error_code,
        )
    if name == "metadata":
        return RequestKind(
            3,
            1,
            bytes(MetadataRequest[1](topics=[]).encode(version=1)),
            lambda body: 0 if MetadataResponse[1].decode(body).brokers else -1,
        )
    raise ValueError(f"unknown request kind {name!r}")


class Tally:
    """Answers counted by every connection of this process."""

    def __init__(self, check_every: int) -> None:
        self.answers = 0
        self.answer_bytes = 0  # whole frames, length prefix included
        self.errors = 0
        self.failures: list[str] = []
        self.check_every = check_every
        self.closed_early = 0


class PipelinedConnection(asyncio.Protocol):
    def __init__(
        self,
        kind: RequestKind,
        in_flight: int,
        batch: int,
        tally: Tally,
        budget: list[int] | None,
        client_id: str = CLIENT_ID,
    ) -> None:
        self._kind = kind
        self._batch = batch
        self._in_flight_target = in_flight
        self._tally = tally
        self._budget = budget  # shared [requests still to send]; None = send until stopped
        # One write carries `batch` requests with consecutive correlation ids, reused from write to write.
        self._frames = [
            frame(encode_request_header(kind.api_key, kind.version, i, client_id) + kind.body)
            for i in range(batch)
        ]
        self._blob = b"".join(self._frames)
        self._buffer = bytearray()
        self._since_write = 0
        self._outstanding = 0
        self._transport: asyncio.Transport | None = None
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.stopping = False
        self._greeting: asyncio.Future[None] | None = None
        self._client_id = client_id

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    async def greet(self) -> None:
        """ApiVersions first, as every Kafka client sends it: until the broker has answered a connection's
        first request, the proxy holds it to frames of 512 KiB."""
        assert self._transport is not None
        self._greeting = asyncio.get_running_loop().create_future()
        self._transport.write(frame(encode_request_header(API_VERSIONS, 0, -1, self._client_id)))
        await self._greeting

    def begin(self) -> None:
        for _ in range(max(1, self._in_flight_target // self._batch)):
            self._write_batch()

    def _write_batch(self) -> None:
        if self.stopping:
            return
        count = self._batch
        if self._budget is not None:
            count = min(count, self._budget[0])
            if count <= 0:
                return
            self._budget[0] -= count
        assert self._transport is not None
        if count == self._batch:
            self._transport.write(self._blob)
        else:
            self._transport.writelines(self._frames[:count])
        self._outstanding += count

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        pos = 0
        end = len(buffer)
        greeting = self._greeting
        if greeting is not None and not greeting.done():
            if end < 4 or end < 4 + int.from_bytes(buffer[:4], "big"):
                return
            pos = 4 + int.from_bytes(buffer[:4], "big")  # the ApiVersions answer: not counted
            greeting.set_result(None)
        tally = self._tally
        answered = 0
        while end - pos >= 4:
            size = int.from_bytes(buffer[pos : pos + 4], "big")
            if end - pos - 4 < size:
                break
            if tally.answers % tally.check_every == 0:
                self._check(bytes(buffer[pos : pos + 4 + size]))
            tally.answers += 1
            tally.answer_bytes += 4 + size
            answered += 1
            pos += 4 + size
        del buffer[:pos]
        self._outstanding -= answered
        self._since_write += answered
        while self._since_write >= self._batch:
            self._since_write -= self._batch
            self._write_batch()
        if self._outstanding == 0 and (self.stopping or (self._budget is not None and self._budget[0] <= 0)):
            self._finish()

    def _check(self, response: bytes) -> None:
        kind = self._kind
        try:
            offset = 4 + response_header_size(kind.api_key, kind.version, response)
            error = kind.check(response[offset:])
        except Exception as exc:  # any undecodable answer is a failed benchmark, not a crash
            error = -1
            self._tally.failures.append(f"undecodable answer: {exc!r}")
        if error:
            self._tally.errors += 1
            if len(self._tally.failures) < 5:
                self._tally.failures.append(f"error code {error}")

    def stop(self) -> None:
        self.stopping = True
        if self._outstanding == 0:
            self._finish()

    def _finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)
        if self._transport is not None:
            self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self._tally.closed_early += 1
            self._tally.failures.append(f"connection closed by peer: {exc!r}")
            self.done.set_result(None)


@dataclass
class LoadResult:
    kind: str
    connections: int
    answers: int
    seconds: float
    answers_per_s: float
    request_bytes: int
    response_bytes: int
    errors: int
    closed_early: int
    failures: list[str]


async def generate(args: argparse.Namespace) -> LoadResult:
    kind = request_kind(args.kind, args.topic, args.partition, args.record_bytes, args.records)
    frame_bytes = len(frame(encode_request_header(kind.api_key, kind.version, 0, args.client_id) + kind.body))
    tally = Tally(args.check_every)
    budget = [args.requests] if args.requests else None
    loop = asyncio.get_running_loop()
    connections: list[PipelinedConnection] = []
    tls: dict[str, Any] = {}
    if args.tls_ca:
        tls = {"ssl": ssl.create_default_context(cafile=args.tls_ca), "server_hostname": "localhost"}
    for _ in range(args.connections):
        _, conn = await loop.create_connection(
            lambda: PipelinedConnection(kind, args.in_flight, args.batch, tally, budget, args.client_id),
            args.host,
            args.port,
            **tls,
        )
        await conn.greet()
        connections.append(conn)
    if budget is not None:
        _mark("window_start")
        start, start_answers, start_bytes = time.perf_counter(), 0, 0
        for conn in connections:
            conn.begin()
        await asyncio.gather(*(c.done for c in connections))
    else:
        for conn in connections:
            conn.begin()
        await asyncio.sleep(args.warmup)
        _mark("window_start")
        start, start_answers, start_bytes = time.perf_counter(), tally.answers, tally.answer_bytes
        # SIGTERM ends the window early, with the result printed (a background load stopped by its harness).
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), args.duration)
    elapsed = time.perf_counter() - start
    _mark("window_end")
    answers = tally.answers - start_answers
    response_bytes = tally.answer_bytes - start_bytes
    for conn in connections:
        conn.stop()
    await asyncio.wait_for(asyncio.gather(*(c.done for c in connections)), 30)
    return LoadResult(
        kind=args.kind,
        connections=args.connections,
        answers=answers,
        seconds=round(elapsed, 4),
        answers_per_s=round(answers / elapsed, 1) if elapsed > 0 else 0.0,
        request_bytes=answers * frame_bytes,
        response_bytes=response_bytes,
        errors=tally.errors,
        closed_early=tally.closed_early,
        failures=tally.failures[:5],
    )


def _mark(event: str) -> None:
    """Tell the harness (reading our stdout line by line) that the counted window opens or closes, so it
    can read the CPU clocks of the processes under test at the same moments."""
    print(json.dumps({"event": event}), flush=True)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--tls-ca", help="connect with TLS, trusting this CA file (server name: localhost)")
    p.add_argument("--client-id", default=CLIENT_ID, help="the requests' client_id (quota entity)")
    p.add_argument("--kind", choices=("produce", "fetch", "apiversions", "metadata"), default="produce")
    p.add_argument("--topic", default="bench")
    p.add_argument("--partition", type=int, default=0)
    p.add_argument("--record-bytes", type=int, default=100, help="bytes per record value (produce)")
    p.add_argument("--records", type=int, default=1, help="records per request (produce)")
    p.add_argument("--connections", type=int, default=1)
    p.add_argument("--in-flight", type=int, default=1, help="requests outstanding per connection")
    p.add_argument("--batch", type=int, default=1, help="requests per write")
    p.add_argument("--requests", type=int, default=0, help="bulk mode: send this many, then stop")
    p.add_argument("--warmup", type=float, default=1.0, help="rate mode: seconds before counting")
    p.add_argument("--duration", type=float, default=5.0, help="rate mode: seconds counted")
    p.add_argument("--check-every", type=int, default=1000, help="decode every Nth answer")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        import uvloop
    except ImportError:
        result = asyncio.run(generate(args))
    else:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            result = runner.run(generate(args))
    out: dict[str, Any] = asdict(result)
    print(json.dumps(out), flush=True)
    return 0 if not result.errors and not result.closed_early else 1


if __name__ == "__main__":
    sys.exit(main())
