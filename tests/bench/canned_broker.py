"""A stand-in broker that answers at memory speed, for benchmarks where the proxy must be the bottleneck.

librdkafka's mock cluster answers tiny Produce requests at about 90,000-100,000 per second with one core
busy (section 3's direct rows): on this 2-core machine no middle process can be measured above that with
it behind. This process answers every Produce request (v3-v8) with one canned success (partition 0 of
`--topic`, built once with kafka-python's codecs; only the correlation id changes), every Fetch request
(v4-v11, whatever it asks) with one canned answer of about `--fetch-bytes` (6 partitions of `--topic`, each
one record batch of 1,000-byte records, as a consumer reads librdkafka's batches back: ~365,000 bytes for
64 KiB batches, ~94,000 for 16 KiB ones), ApiVersions (v0-v2) with those APIs, and Metadata (v0-v8) with
itself as broker 1 and no topics, which is all the proxy's own discovery asks. Anything else closes the
connection. It stores nothing: it exists to measure what one
proxy process can relay, never to stand in for a broker in tests.

Run: ``.venv/bin/python tests/bench/canned_broker.py [--topic small] [--fetch-bytes 365000]``. Prints
``LISTENING <port>``; stops on SIGTERM/SIGINT or when stdin closes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import cast

from kafka.protocol.metadata import ApiVersionsResponse, MetadataResponse
from kafka.protocol.producer import ProduceResponse

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_protocol import fetch_response_body, record_batch

PRODUCE, FETCH, METADATA, API_VERSIONS = 0, 1, 3, 18
_PRODUCE_VERSIONS = range(3, 9)  # non-flexible: a 4-byte response header, the correlation id
_FETCH_VERSIONS = range(4, 12)  # non-flexible, topics by name (v4: the record batches' first version)
FETCH_PARTITIONS = 6
FETCH_RECORD_BYTES = 1000
DEFAULT_FETCH_BYTES = 365_000
_METADATA_VERSIONS = range(9)
_API_VERSIONS_VERSIONS = range(3)  # (v3's answer is flexible; the proxy's own client asks v2)


def _api_versions_answer(version: int) -> bytes:
    offered = [
        (PRODUCE, _PRODUCE_VERSIONS),
        (FETCH, _FETCH_VERSIONS),
        (METADATA, _METADATA_VERSIONS),
        (API_VERSIONS, _API_VERSIONS_VERSIONS),
    ]
    keys = [
        ApiVersionsResponse.ApiVersion(api_key=key, min_version=versions[0], max_version=versions[-1])
        for key, versions in offered
    ]
    response = ApiVersionsResponse(version=version, error_code=0, api_keys=keys, throttle_time_ms=0)
    return bytes(response.encode(version=version))


def _produce_answer(topic: str, version: int) -> bytes:
    partition = ProduceResponse.TopicProduceResponse.PartitionProduceResponse(
        index=0, error_code=0, base_offset=0, log_append_time_ms=-1, log_start_offset=0
    )
    response = ProduceResponse(
        version=version,
        responses=[ProduceResponse.TopicProduceResponse(name=topic, partition_responses=[partition])],
        throttle_time_ms=0,
    )
    return bytes(response.encode(version=version))


def fetch_answer(topic: str, version: int, fetch_bytes: int) -> bytes:
    """A Fetch answer's body of about `fetch_bytes` (within one record per partition): `FETCH_PARTITIONS`
    partitions of `topic`, each one batch of `FETCH_RECORD_BYTES` records."""

    def answer(records: int) -> bytes:
        batch = record_batch(records, FETCH_RECORD_BYTES)
        return fetch_response_body(version, records=batch, partitions=FETCH_PARTITIONS, topic=topic)

    one, two = len(answer(1)), len(answer(2))
    per_record = (two - one) / FETCH_PARTITIONS  # what one more record in each partition adds, per partition
    return answer(max(1, 1 + round((fetch_bytes - one) / FETCH_PARTITIONS / per_record)))


def _metadata_answer(version: int, host: str, port: int) -> bytes:
    broker = MetadataResponse.MetadataResponseBroker(node_id=1, host=host, port=port, rack=None)
    response = MetadataResponse(version=version, brokers=[broker], controller_id=1, topics=[])
    return bytes(response.encode(version=version))


class CannedBroker(asyncio.Protocol):
    def __init__(self, produce: dict[int, bytes], fetch: dict[int, bytes], address: tuple[str, int]) -> None:
        self._produce = produce  # version -> answer body
        self._fetch = fetch  # version -> answer body
        self._address = address
        self._buffer = b""
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer + data if self._buffer else data
        pos, end = 0, len(buffer)
        out: list[bytes] = []
        produce = self._produce
        while end - pos >= 4:
            size = int.from_bytes(buffer[pos : pos + 4], "big")
            if end - pos - 4 < size:
                break
            api_key = int.from_bytes(buffer[pos + 4 : pos + 6], "big")
            version = int.from_bytes(buffer[pos + 6 : pos + 8], "big")
            correlation = buffer[pos + 8 : pos + 12]
            if api_key == PRODUCE and version in produce:
                body = produce[version]
            elif api_key == FETCH and version in self._fetch:
                body = self._fetch[version]
            elif api_key == METADATA and version in _METADATA_VERSIONS:
                body = _metadata_answer(version, *self._address)
            elif api_key == API_VERSIONS and version in _API_VERSIONS_VERSIONS:
                body = _api_versions_answer(version)
            else:
                assert self._transport is not None
                self._transport.close()
                return
            out.append((4 + len(body)).to_bytes(4, "big") + correlation + body)
            pos += 4 + size
        self._buffer = buffer[pos:]
        if out:
            assert self._transport is not None
            self._transport.write(b"".join(out))


async def serve(topic: str, fetch_bytes: int) -> None:
    loop = asyncio.get_running_loop()
    produce = {version: _produce_answer(topic, version) for version in _PRODUCE_VERSIONS}
    fetch = {version: fetch_answer(topic, version, fetch_bytes) for version in _FETCH_VERSIONS}
    address: list[tuple[str, int]] = []
    server = await loop.create_server(
        lambda: CannedBroker(produce, fetch, address[0]), "127.0.0.1", 0, backlog=1024
    )
    address.append(server.sockets[0].getsockname()[:2])
    print(f"LISTENING {address[0][1]}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    with contextlib.suppress(OSError, ValueError):
        loop.add_reader(sys.stdin.fileno(), lambda: stop.set() if not sys.stdin.buffer.read1(1) else None)
    await stop.wait()
    server.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", default="small")
    parser.add_argument("--fetch-bytes", type=int, default=DEFAULT_FETCH_BYTES, help="a Fetch answer's size")
    args = parser.parse_args(argv)
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(serve(args.topic, args.fetch_bytes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
