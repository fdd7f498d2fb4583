"""What the server's whole filter chain costs a small Produce and Fetch, per request and per answer.

The chain is the one `sluice run` builds (`SluiceServer(config).settings.chain`, `protocol.unvetted_apis:
hide`), run in process on one connection: no sockets, no event loop, only the filters' own work. Each row is
the best of several repeats (the code's cost, not the machine's noise):

* `chain_produce_request` / `chain_fetch_request`: a small Produce v12 / Fetch v16 request on its way in,
  no quota configured (the common case);
* `chain_produce_v9_answer`: a one-partition Produce v9 answer (before NodeEndpoints): nothing to walk;
* `chain_produce_v12_answer`: a one-partition Produce v12 answer without NodeEndpoints, no throttle: the
  walk that finds the (empty) top-level tagged block;
* `chain_produce_v12_answer_throttled`: the same answer while the connection is throttled, so the
  throttle is written into it too;
* `chain_fetch_v16_answer`: a one-partition Fetch v16 answer (1 KiB of records) without NodeEndpoints.

Run: ``.venv/bin/python tests/bench/bench_chain.py`` prints one JSON object per line.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.producer import ProduceRequest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_protocol import _best_seconds, produce_response_body

from sluice.config.load import config_from_mapping
from sluice.protocol.api_keys import ApiKey
from sluice.protocol.headers import RequestHeader, encode_request, encode_response, parse_request_header
from sluice.proxy.data_path.filter_chain import ConnectionFilters
from sluice.proxy.filter_api import InFlight
from sluice.proxy.process.server import SluiceServer
from sluice.quota import ANONYMOUS

CLIENT_ID = "bench"


class _Connection:
    """A connection as the filters see it, idle and unthrottled."""

    peer, upstream_peer, listener, user = "127.0.0.1:1", "127.0.0.1:2", "bootstrap", ANONYMOUS

    def now_ms(self) -> int:
        return 1_000_000

    def read_ms(self) -> int:
        return 1_000_000

    def take_cpu_ns(self) -> int:
        return 0

    def mute_remaining_ms(self) -> int:
        return 0


def _filters(quotas: list[dict[str, object]]) -> ConnectionFilters:
    config = config_from_mapping(
        {
            "listen": "127.0.0.1:9092",
            "upstream": {"bootstrap": ["127.0.0.1:19092"]},
            "quota": {"entities": quotas},
        }
    )
    chain = SluiceServer(config).settings.chain
    return chain.for_connection(_Connection(), lambda _ms: None)  # type: ignore[arg-type]


def _best_ns(fn: Callable[[], object]) -> float:
    return _best_seconds(fn, repeats=7, number=20000) * 1e9


def _produce_request() -> memoryview:
    request = ProduceRequest[12](
        transactional_id=None,
        acks=1,
        timeout_ms=30000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="bench-topic",
                partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=b"x" * 100)
                ],
            )
        ],
    )
    return memoryview(encode_request(ApiKey.PRODUCE, 12, 1, CLIENT_ID, bytes(request.encode(version=12))))


def fetch_request(
    version: int = 16, correlation_id: int = 1, max_bytes: int = 1 << 20, client_id: str = CLIENT_ID
) -> bytes:
    """A Fetch request naming no topic (an incremental session's usual one), as a client sends it."""
    request = FetchRequest[version](
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[],
        forgotten_topics_data=[],
        rack_id="",
    )
    body = bytes(request.encode(version=version))
    return encode_request(ApiKey.FETCH, version, correlation_id, client_id, body)


def _fetch_answer(version: int) -> bytes:
    topic_cls = FetchResponse.FetchableTopicResponse
    partition = topic_cls.PartitionData(
        partition_index=0, error_code=0, high_watermark=10, records=b"\x00" * 1024
    )
    message = FetchResponse(
        version=version,
        throttle_time_ms=0,
        error_code=0,
        session_id=7,
        responses=[topic_cls(topic="bench-topic", topic_id=uuid.UUID(int=1), partitions=[partition])],
        node_endpoints=[],
    )
    return bytes(message.encode(version=version))


def _request_row(name: str, filters: ConnectionFilters, frame: memoryview) -> dict[str, Any]:
    header = parse_request_header(frame)
    assert filters.on_request(header, frame) is frame
    return _row(name, _best_ns(lambda: filters.on_request(header, frame)))


def _answer_row(
    name: str, filters: ConnectionFilters, key: int, version: int, body: bytes, throttle_ms: int = 0
) -> dict[str, Any]:
    frame = memoryview(encode_response(key, version, 1, body))
    request = InFlight(RequestHeader(key, version, 1, CLIENT_ID, 0), throttle_ms=throttle_ms)
    out = filters.on_response(request, frame)
    assert (out is frame) is (throttle_ms == 0), name
    return _row(name, _best_ns(lambda: filters.on_response(request, frame)))


def _row(name: str, ns: float) -> dict[str, Any]:
    return {"name": name, "value": round(ns / 1000, 3), "unit": "us", "target": None}


def run() -> list[dict[str, Any]]:
    plain = _filters([])
    # A quota on this client: a request that earned a throttle has it written into its answer.
    quota = _filters([{"client_id": CLIENT_ID, "producer_byte_rate": 1 << 30}])
    produce = ApiKey.PRODUCE
    return [
        _request_row("chain_produce_request", plain, _produce_request()),
        _request_row("chain_fetch_request", plain, memoryview(fetch_request())),
        _answer_row("chain_produce_v9_answer", plain, produce, 9, produce_response_body(9, partitions=1)),
        _answer_row("chain_produce_v12_answer", plain, produce, 12, produce_response_body(12, partitions=1)),
        _answer_row(
            "chain_produce_v12_answer_throttled",
            quota,
            produce,
            12,
            produce_response_body(12, partitions=1),
            throttle_ms=50,
        ),
        _answer_row("chain_fetch_v16_answer", plain, ApiKey.FETCH, 16, _fetch_answer(16)),
    ]


if __name__ == "__main__":
    for record in run():
        print(json.dumps(record))
