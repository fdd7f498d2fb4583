"""Every decoder in protocol/ raises nothing but ProtocolError, whatever bytes it is given (issue 14 item 8).

Each decoder is fed valid bodies (built from kafka-python's schemas: every field present, one element per
array) that hypothesis then mutates: bytes set to 0x00/0xff (null arrays and strings), int32 -1 written
at any offset, bytes inserted or removed, the body cut short, plus plain random bytes. A decoder may
answer or raise ProtocolError; any other exception fails the test.

`test_every_decoder_is_fuzzed` keeps the list complete: a public function in protocol/ must be either
fuzzed here or named in NOT_DECODERS with the reason it reads no untrusted bytes.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.admin import DescribeClusterResponse
from kafka.protocol.admin.client_quotas import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from kafka.protocol.admin.configs import DescribeConfigsResponse
from kafka.protocol.admin.topics import CreateTopicsResponse
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.consumer.offsets import ListOffsetsResponse
from kafka.protocol.metadata import ApiVersionsResponse, FindCoordinatorResponse, MetadataResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from kafka_schemas import SHARED_MISSING
from sample_messages import sample_body
from schema_codec import encode, message_schema, sample

import sluice.protocol
from sluice.protocol import (
    api_versions_clamp,
    apis,
    broker_addresses,
    client_quota_codec,
    client_requests,
    codec_quirks,
    fetch,
    frames,
    headers,
    message_codec,
    metadata_brokers,
    node_endpoints,
    primitives,
    produce,
    produce_stream,
    produce_topics,
    record_batches,
    record_sets,
    response_walks,
    sasl,
    sasl_client,
    sasl_exchange,
    sasl_mechanisms,
    share_fetch,
    throttle_field,
    topic_metadata,
    topic_mutations,
)
from sluice.protocol.api_keys import ApiKey
from sluice.protocol.errors import ProtocolError

# Bounded: about 70 decoders x 60 examples run in a few seconds; the deadline catches a decoder that
# goes quadratic or loops on some input. SLUICE_FUZZ_EXAMPLES=5000 runs a deeper search by hand.
FUZZ = settings(
    max_examples=int(os.environ.get("SLUICE_FUZZ_EXAMPLES", "60")),
    deadline=timedelta(seconds=1),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)


def _address(node_id: int, host: str, port: int) -> tuple[str, int]:
    return "proxy.example", 9000 + (node_id & 0xFF)


def _versions(message_class) -> range:
    return range(message_class.min_version, message_class.max_version + 1)


def _samples(message_class) -> dict[int, list[bytes]]:
    return {v: [sample_body(message_class, v)] for v in _versions(message_class)}


@dataclass(frozen=True)
class Target:
    """One decoder: `call(version, data)` with the seeds (valid inputs) per version to mutate."""

    name: str
    call: Callable[[int, bytes], object]
    seeds: dict[int, list[bytes]] = field(default_factory=dict)
    versions: Sequence[int] = ()

    def all_versions(self) -> list[int]:
        return sorted(set(self.versions) | set(self.seeds)) or [0]


def _request_frames(api_key: int, message_class, client_id: str | None = "fuzz") -> dict[int, list[bytes]]:
    return {
        v: [headers.encode_request(api_key, v, 7, client_id, sample_body(message_class, v))]
        for v in _versions(message_class)
    }


def _response_frames(api_key: int, message_class) -> dict[int, list[bytes]]:
    return {
        v: [headers.encode_response(api_key, v, 7, sample_body(message_class, v))]
        for v in _versions(message_class)
    }


def _produce_acks(version: int, frame: bytes) -> object:
    return produce.produce_acks(frame, headers.parse_request_header(frame))


def _split(version: int, data: bytes) -> object:
    # Frames of 32 bytes or more are assembled in mappings of their own, the smaller ones from pieces.
    splitter = frames.FrameSplitter(max_frame_bytes=64 + version, own_mapping_bytes=32)
    splitter.min_payload_bytes = version % 5
    cut = len(data) // 3
    out = splitter.feed(data[:cut]) + splitter.feed(data[cut:])
    splitter.eof()
    return out


def _exchange(version: int, data: bytes) -> object:
    mechanisms = ["PLAIN", "SCRAM-SHA-256", "OAUTHBEARER", "GSSAPI"]
    exchange = sasl_exchange.SaslExchange(mechanisms[version % len(mechanisms)])
    half = len(data) // 2
    exchange.client_token(data[:half])
    exchange.server_token(data[half:])
    return exchange.server_token(data[:half], error_code=version)


def _scram_client(version: int, data: bytes) -> object:
    """A hostile server's SCRAM messages: server-first, then (if accepted) server-final."""
    client = sasl_client.ScramClient("SCRAM-SHA-256", "alice", "pw", nonce="abc")
    client.client_first()
    half = data.find(b"|")
    first, final = (data, b"v=AAAA") if half < 0 else (data[:half], data[half + 1 :])
    client.server_first(first)
    client.client_final()
    return client.server_final(final)


def _client_answer(decode: Callable[..., object], message_class, *args: object) -> Target:
    """One of the proxy's own client's answer decoders, over every version the client speaks."""
    low, high = client_requests.CLIENT_VERSIONS[message_class.API_KEY]
    seeds = {v: bodies for v, bodies in _samples(message_class).items() if low <= v <= high}
    return Target(f"client_requests.{decode.__name__}", lambda v, d: decode(v, d, *args), seeds)


def _record_seeds() -> dict[int, list[bytes]]:
    records = [record_batches.Record(b"k", b"value", (("h", b"1"),), None) for _ in range(3)]
    batch = record_batches.encode_record_batch(records, now_ms=1_700_000_000_000)
    return {0: [batch, batch + batch], 1: [batch]}


def _merge(api_key: int) -> Callable[[int, bytes], object]:
    def call(version: int, data: bytes) -> object:
        request = topic_mutations.MutationRequest(
            api_key, version, False, [topic_mutations.TopicMutation("t", None, 1, None)]
        )
        return topic_mutations.merge_mutation_response(api_key, version, request, data, [0], [], 5)

    return call


def _subset(api_key: int) -> Callable[[int, bytes], object]:
    def call(version: int, data: bytes) -> object:
        try:
            return topic_mutations.mutation_request_subset(api_key, version, data, [0])
        except ValueError as exc:  # the caller's indexes do not fit: documented misuse, not bad input
            assert "do not fit" in str(exc)
            return None

    return call


# Produce and ApiVersions response bodies (walked positions); other APIs are fuzzed from random bytes.
_WALKED_SEEDS: dict[int, dict[int, list[bytes]]] = {
    0: _samples(ProduceResponse),
    18: _samples(ApiVersionsResponse),
}


def _throttle(fn: Callable[..., object]) -> Callable[[int, bytes], object]:
    """Version encodes (api key, version): every API of the table is fuzzed, walked ones from seeds."""

    def call(key_and_version: int, data: bytes) -> object:
        api_key, version = divmod(key_and_version, 100)
        if fn in (throttle_field.patch_throttle_ms, throttle_field.raise_throttle_ms):
            return fn(api_key, version, bytearray(data), 12345)
        if fn in (throttle_field.patch_frame_throttle_ms, throttle_field.raise_frame_throttle_ms):
            return fn(api_key, version, bytearray(data), version % 3, 12345)
        if fn is throttle_field.throttle_field_at:
            return fn(api_key, version, b"\x00\x00" + data, 2)  # a body that begins inside the frame
        return fn(api_key, version, data)

    return call


def _node_endpoints(fn: Callable[..., object]) -> Callable[[int, bytes], object]:
    """Version encodes (api key, version), as for the throttle field."""

    def call(key_and_version: int, data: bytes) -> object:
        api_key, version = divmod(key_and_version, 100)
        if fn is not node_endpoints.decode_node_endpoints:  # a rewrite: as installed, or the Python
            return fn(api_key, version, data, lambda n, h, p: None if n % 3 == 0 else _address(n, h, p))
        return fn(api_key, version, data)

    return call


def _node_endpoints_seeds() -> tuple[list[int], dict[int, list[bytes]]]:
    """Every version of the four answers (one past the newest too); Produce and Fetch from kafka-python's
    schemas, the share answers from Kafka's own where the reference copies are (random bytes otherwise)."""
    versions = [
        key * 100 + v
        for key, newest in node_endpoints.NODE_ENDPOINTS_MAX_VERSIONS.items()
        for v in range(newest + 2)
    ]
    seeds = {
        key * 100 + v: bodies
        for key, cls in ((0, ProduceResponse), (1, FetchResponse))
        for v, bodies in _samples(cls).items()
    }
    if SHARED_MISSING is None:
        for key in (ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE):
            for v in range(node_endpoints.NODE_ENDPOINTS_MAX_VERSIONS[key] + 1):
                schema = message_schema(key, "response", v)
                seeds[key * 100 + v] = [encode(schema, v, sample(schema, v))]
    return versions, seeds


def _share_answer_seeds() -> dict[int, list[bytes]]:
    """ShareFetch (versions 0-2) and ShareAcknowledge (3-5) answers built from Kafka's own schemas, where
    the reference copies are (random bytes otherwise)."""
    seeds: dict[int, list[bytes]] = {}
    if SHARED_MISSING is None:
        for index, key in enumerate((ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE)):
            for v in range(3):
                schema = message_schema(key, "response", v)
                seeds[index * 3 + v] = [encode(schema, v, sample(schema, v))]
    return seeds


def _broker_entries(version: int, data: bytes) -> object:
    """Version 0-3: (flexible, has_rack) = (version >= 2, version is odd); parsed, then rewritten."""
    flexible, has_rack = version >= 2, version % 2 == 1
    _end, entries = metadata_brokers.parse_broker_entries(data, 0, flexible, has_rack)
    return metadata_brokers.rewrite_broker_entries(data, entries, _address, flexible)


def _broker_entries_seeds() -> dict[int, list[bytes]]:
    """Metadata brokers arrays: v0 (classic, no rack), v1 (classic), v9 (flexible, after throttle_time_ms)."""
    return {
        0: [sample_body(MetadataResponse, 0)],
        1: [sample_body(MetadataResponse, 1)],
        3: [sample_body(MetadataResponse, 9)[4:]],
    }


def _share_fetch_requests() -> dict[int, list[bytes]]:
    """ShareFetch request bodies, from Kafka's own schemas where the reference copies are."""
    if SHARED_MISSING is not None:
        return {}
    seeds = {}
    for version in range(share_fetch.SHARE_FETCH_MAX_VERSION + 1):
        schema = message_schema(ApiKey.SHARE_FETCH, "request", version)
        seeds[version] = [encode(schema, version, sample(schema, version))]
    return seeds


def _throttle_versions() -> tuple[list[int], dict[int, list[bytes]]]:
    versions = [key * 100 + v for key, spec in apis.API_SPECS.items() for v in range(spec.max_version + 2)]
    seeds = {
        key * 100 + v: bodies for key, by_version in _WALKED_SEEDS.items() for v, bodies in by_version.items()
    }
    return versions, seeds


def _codec_target(name: str, message_class) -> Target:
    return Target(
        name,
        lambda v, d: codec_quirks.decode_body(message_class, v, d),
        _samples(message_class),
        versions=[*_versions(message_class), message_class.max_version + 1],
    )


def _codec_decoder(name: str, decode: Callable[[int, bytes], object], message_class) -> Target:
    return Target(name, decode, _samples(message_class), versions=[message_class.max_version + 1])


def _keyed(fn: Callable[..., object], api_key: int) -> Callable[[int, bytes], object]:
    return lambda v, d: fn(api_key, v, d)


def _targets() -> list[Target]:
    targets: list[Target] = [
        Target("frames.FrameSplitter", _split, versions=range(8)),
        Target(
            "frames.whole_frames_in_python",
            lambda v, d: frames.whole_frames_in_python(memoryview(d), 0, 4, 64 + v, []),
            versions=range(8),
        ),
        Target(
            "headers.parse_request_header",
            lambda v, d: headers.parse_request_header(d),
            {**_request_frames(0, ProduceRequest), 100: _request_frames(1, FetchRequest)[12]},
        ),
        Target("produce.produce_acks", _produce_acks, _request_frames(0, ProduceRequest)),
        Target(
            "produce.produce_acks_in_python",
            lambda v, d: produce.produce_acks_in_python(d, headers.parse_request_header(d)),
            _request_frames(0, ProduceRequest),
        ),
        Target(
            "produce.produce_acks_and_timeout",
            lambda v, d: produce.produce_acks_and_timeout(d, headers.parse_request_header(d)),
            _request_frames(0, ProduceRequest),
        ),
        Target(
            "headers.response_header_size",
            lambda v, d: headers.response_header_size(3, v, d),
            _response_frames(3, MetadataResponse),
        ),
        Target(
            "headers.response_header_size_in_python",
            lambda v, d: headers.response_header_size_in_python(3, v, d),
            _response_frames(3, MetadataResponse),
        ),
        Target("headers.read_correlation_id", lambda v, d: headers.read_correlation_id(d), versions=[0]),
        Target(
            "metadata_brokers.metadata_brokers",
            metadata_brokers.metadata_brokers,
            _samples(MetadataResponse),
            versions=[14],
        ),
        Target(
            "metadata_brokers.rewrite_metadata_brokers",
            lambda v, d: metadata_brokers.rewrite_metadata_brokers(v, d, _address),
            _samples(MetadataResponse),
        ),
        Target(
            "broker_addresses.rewrite_metadata_with_codec",
            lambda v, d: broker_addresses.rewrite_metadata_with_codec(v, d, _address),
            _samples(MetadataResponse),
        ),
        Target(
            "api_versions_clamp.clamp_api_versions",
            lambda v, d: api_versions_clamp.clamp_api_versions(v, d, {3: 1, 18: 0, 0: 20}),
            _samples(ApiVersionsResponse),
        ),
        Target(
            "codec_quirks.api_versions_body_version",
            codec_quirks.api_versions_body_version,
            _samples(ApiVersionsResponse),
        ),
        Target(
            "fetch.fetch_request_limits",
            fetch.fetch_request_limits,
            _samples(FetchRequest),
            versions=[fetch.FETCH_MAX_VERSION + 1],
        ),
        Target(
            "fetch.cap_fetch_request",
            lambda v, d: fetch.cap_fetch_request(v, bytearray(d), 1000.0),
            _samples(FetchRequest),
        ),
        Target("fetch.fetch_response_session", fetch.fetch_response_session, _samples(FetchResponse)),
        Target(
            "topic_metadata.decode_topic_partitions",
            topic_metadata.decode_topic_partitions,
            _samples(MetadataResponse),
        ),
        Target(
            "topic_metadata.decode_broker_configs",
            topic_metadata.decode_broker_configs,
            _samples(DescribeConfigsResponse),
        ),
        Target(
            "topic_metadata.decode_config_value",
            lambda v, d: topic_metadata.decode_config_value(v, d, "ab"),
            _samples(DescribeConfigsResponse),
        ),
        Target(
            "sasl.decode_handshake_request", sasl.decode_handshake_request, _samples(SaslHandshakeRequest)
        ),
        Target(
            "sasl.decode_handshake_response", sasl.decode_handshake_response, _samples(SaslHandshakeResponse)
        ),
        Target(
            "sasl.decode_authenticate_request",
            sasl.decode_authenticate_request,
            _samples(SaslAuthenticateRequest),
        ),
        Target(
            "sasl.decode_authenticate_response",
            sasl.decode_authenticate_response,
            _samples(SaslAuthenticateResponse),
        ),
        Target(
            "sasl_mechanisms.plain_principal",
            lambda v, d: sasl_mechanisms.plain_principal(d),
            {0: [b"\x00alice\x00secret", b"admin\x00alice\x00pw"]},
        ),
        Target(
            "sasl_mechanisms.scram_principal",
            lambda v, d: sasl_mechanisms.scram_principal(d),
            {0: [b"n,,n=alice,r=abc", b"n,a=bob,n=al=2Cice,r=x"]},
        ),
        Target(
            "sasl_mechanisms.oauthbearer_principal",
            lambda v, d: sasl_mechanisms.oauthbearer_principal(d),
            {0: [b"n,,\x01auth=Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0.\x01\x01"]},
        ),
        Target("sasl_exchange.SaslExchange", _exchange, {0: [b"\x00alice\x00pw"], 1: [b"n,,n=a,r=b"]}),
        Target(
            "sasl_client.ScramClient",
            _scram_client,
            {
                0: [
                    b"r=abcdef,s=c2l4dGVlbi1ieXRlLXNsdA==,i=4096|v=c2lnbmF0dXJl",
                    b"e=invalid-proof",
                    b"r=abcX,s=c2l4dGVlbi1ieXRlLXNsdA==,i=16384|e=x",
                ]
            },
        ),
        Target(
            "client_requests.decode_api_versions",
            lambda v, d: client_requests.decode_api_versions(d),
            {0: [sample_body(ApiVersionsResponse, 2)]},
        ),
        _client_answer(client_requests.decode_metadata, MetadataResponse),
        _client_answer(client_requests.decode_produce, ProduceResponse, "ab", 1),
        _client_answer(client_requests.decode_fetch, FetchResponse, "ab", 1),
        _client_answer(client_requests.decode_list_offsets, ListOffsetsResponse, "ab"),
        _client_answer(client_requests.decode_create_topics, CreateTopicsResponse),
        Target("record_batches.decode_records", record_batches.decode_records, _record_seeds()),
        Target(
            "api_versions_clamp.advertise_apis",
            lambda v, d: api_versions_clamp.advertise_apis(v, d, {48: (0, 1), 49: (0, 1), 3: (0, 9)}),
            _samples(ApiVersionsResponse),
        ),
        Target(
            "produce_topics.produce_partition_sizes",
            lambda v, d: produce_topics.topic_sizes(
                produce_topics.produce_partition_sizes(d, headers.parse_request_header(d))
            ),
            _request_frames(0, ProduceRequest),
        ),
        Target(
            "produce_topics.produce_topic_sizes",
            lambda v, d: produce_topics.produce_topic_sizes(d, headers.parse_request_header(d)),
            _request_frames(0, ProduceRequest),
        ),
        Target(
            "produce_topics.produce_partitions",
            lambda v, d: produce_topics.produce_partitions(d, headers.parse_request_header(d)),
            _request_frames(0, ProduceRequest),
        ),
        Target(
            "produce_stream.produce_topic_bytes",
            produce_stream.produce_topic_bytes,
            _samples(ProduceRequest),
        ),
        Target(
            "produce_stream.walk_produce_body", produce_stream.walk_produce_body, _samples(ProduceRequest)
        ),
        Target(
            "headers.parse_request_header_in_python",
            lambda v, d: headers.parse_request_header_in_python(d),
            _request_frames(0, ProduceRequest),
        ),
        Target(
            "produce_stream.walk_produce_body_in_python",
            produce_stream.walk_produce_body_in_python,
            {v: bodies for v, bodies in _samples(ProduceRequest).items() if v <= produce_stream.PRODUCE_MAX},
        ),
        Target(
            "produce_stream.produce_body",
            lambda v, d: produce_stream.produce_body(d, headers.parse_request_header(d)),
            _request_frames(0, ProduceRequest),
        ),
        Target(
            "produce_stream.produce_topics",
            lambda v, d: produce_stream.produce_topics(d, headers.parse_request_header(d)),
            _request_frames(0, ProduceRequest),
        ),
        Target(
            "produce_stream.produce_topics_in_python",
            lambda v, d: produce_stream.produce_topics_in_python(d, headers.parse_request_header(d)),
            _request_frames(0, ProduceRequest),
        ),
        Target(
            "produce_stream.produce_topic_bytes_in_python",
            produce_stream.produce_topic_bytes_in_python,
            {v: bodies for v, bodies in _samples(ProduceRequest).items() if v <= produce_stream.PRODUCE_MAX},
        ),
        *(
            Target(f"node_endpoints.{fn.__name__}", _node_endpoints(fn), seeds, versions)
            for fn in (
                node_endpoints.rewrite_node_endpoints,
                node_endpoints.rewrite_node_endpoints_in_python,
                node_endpoints.decode_node_endpoints,
            )
            for versions, seeds in [_node_endpoints_seeds()]
        ),
        Target("metadata_brokers.parse_broker_entries", _broker_entries, _broker_entries_seeds(), range(4)),
        Target("metadata_brokers.rewrite_broker_entries", _broker_entries, _broker_entries_seeds(), range(4)),
        Target(
            "share_fetch.share_fetch_request_limits",
            share_fetch.share_fetch_request_limits,
            _share_fetch_requests(),
            versions=range(share_fetch.SHARE_FETCH_MAX_VERSION + 2),
        ),
        Target(
            "share_fetch.cap_share_fetch_request",
            lambda v, d: share_fetch.cap_share_fetch_request(v, bytearray(d), 1000.0),
            _share_fetch_requests(),
            versions=range(share_fetch.SHARE_FETCH_MAX_VERSION + 2),
        ),
        Target(
            "response_walks.produce_responses_end",
            response_walks.produce_responses_end,
            {v: bodies for v, bodies in _samples(ProduceResponse).items() if v >= 9},
            versions=range(9, 14),
        ),
        Target(
            "response_walks.walked_produce_responses_end",
            response_walks.walked_produce_responses_end,
            {v: bodies for v, bodies in _samples(ProduceResponse).items() if v >= 9},
            versions=range(9, 14),
        ),
        Target(
            "response_walks.fetch_responses",
            response_walks.fetch_responses,
            {v: bodies for v, bodies in _samples(FetchResponse).items() if v >= 12},
            versions=range(12, 19),
        ),
        Target(
            "response_walks.produce_responses_end_in_python",
            lambda v, d: response_walks.produce_responses_end_in_python(v, d, 0),
            {v: bodies for v, bodies in _samples(ProduceResponse).items() if v >= 9},
            versions=range(9, 14),
        ),
        Target(
            "response_walks.fetch_responses_in_python",
            lambda v, d: response_walks.fetch_responses_in_python(v, d, 0, True),
            {v: bodies for v, bodies in _samples(FetchResponse).items() if v >= 12},
            versions=range(12, 19),
        ),
        Target(
            "response_walks.fetch_answer_topics",
            lambda v, d: response_walks.fetch_answer_topics(v, d, 0),
            {v: bodies for v, bodies in _samples(FetchResponse).items() if v >= 12},
            versions=range(12, 19),
        ),
        Target(
            "response_walks.fetch_answer_topics_in_python",
            lambda v, d: response_walks.fetch_answer_topics_in_python(v, d, 0),
            {v: bodies for v, bodies in _samples(FetchResponse).items() if v >= 12},
            versions=range(12, 19),
        ),
        Target(
            "response_walks.share_responses_end",
            lambda v, d: response_walks.share_responses_end(ApiKey.SHARE_FETCH + v // 3, v % 3, d),
            _share_answer_seeds(),
            versions=range(6),
        ),
        Target("record_sets.fetch_topic_bytes", record_sets.fetch_topic_bytes, _samples(FetchResponse)),
        Target(
            "primitives.read_array_count",
            lambda v, d: primitives.read_array_count(d, v // 2, bool(v % 2)),
            versions=range(8),
        ),
        _codec_decoder(
            "client_quota_codec.decode_describe_request",
            client_quota_codec.decode_describe_request,
            DescribeClientQuotasRequest,
        ),
        _codec_decoder(
            "client_quota_codec.decode_describe_response",
            client_quota_codec.decode_describe_response,
            DescribeClientQuotasResponse,
        ),
        _codec_decoder(
            "client_quota_codec.decode_alter_request",
            client_quota_codec.decode_alter_request,
            AlterClientQuotasRequest,
        ),
        _codec_decoder(
            "client_quota_codec.decode_alter_response",
            client_quota_codec.decode_alter_response,
            AlterClientQuotasResponse,
        ),
    ]
    for reader in (
        primitives.read_int16,
        primitives.read_int32,
        primitives.read_uvarint,
        primitives.skip_tagged_fields,
        primitives.skip_nullable_string,
        primitives.skip_compact_nullable_string,
        primitives.skip_nullable_bytes,
    ):  # `version` is the offset to read at
        targets.append(
            Target(f"primitives.{reader.__name__}", lambda v, d, r=reader: r(d, v), versions=range(4))
        )
    for key, cls in (
        (ApiKey.METADATA, MetadataResponse),
        (ApiKey.FIND_COORDINATOR, FindCoordinatorResponse),
        (ApiKey.DESCRIBE_CLUSTER, DescribeClusterResponse),
    ):
        extra = [cls.max_version + 1]
        targets.append(
            Target(
                f"broker_addresses.rewrite_broker_addresses[{key}]",
                lambda v, d, key=key: broker_addresses.rewrite_broker_addresses(key, v, d, _address),
                _samples(cls),
                extra,
            )
        )
        targets.append(
            Target(
                f"broker_addresses.decode_brokers[{key}]",
                _keyed(broker_addresses.decode_brokers, key),
                _samples(cls),
                extra,
            )
        )
    for key, cls in message_codec.REQUEST_CLASSES.items():
        targets.append(
            Target(
                f"message_codec.decode_request_body[{key}]",
                _keyed(message_codec.decode_request_body, key),
                _samples(cls),
            )
        )
    for key, cls in message_codec.RESPONSE_CLASSES.items():
        targets.append(
            Target(
                f"message_codec.decode_response_body[{key}]",
                _keyed(message_codec.decode_response_body, key),
                _samples(cls),
            )
        )
    for key in (
        ApiKey.CREATE_TOPICS,
        ApiKey.DELETE_TOPICS,
        ApiKey.CREATE_PARTITIONS,
    ):
        request_class = message_codec.REQUEST_CLASSES[key]
        response_class = message_codec.RESPONSE_CLASSES[key]
        targets += [
            Target(
                f"topic_mutations.decode_mutation_request[{key}]",
                _keyed(topic_mutations.decode_mutation_request, key),
                _samples(request_class),
            ),
            Target(f"topic_mutations.mutation_request_subset[{key}]", _subset(key), _samples(request_class)),
            Target(
                f"topic_mutations.result_errors[{key}]",
                _keyed(topic_mutations.result_errors, key),
                _samples(response_class),
            ),
            Target(f"topic_mutations.merge_mutation_response[{key}]", _merge(key), _samples(response_class)),
        ]
    for cls in (FindCoordinatorResponse, DescribeClusterResponse, ApiVersionsResponse, FetchResponse):
        targets.append(_codec_target(f"codec_quirks.decode_body[{cls.__name__}]", cls))
    throttle_versions, throttle_seeds = _throttle_versions()
    for fn in (
        throttle_field.throttle_field_offset,
        throttle_field.read_throttle_ms,
        throttle_field.patch_throttle_ms,
        throttle_field.raise_throttle_ms,
        throttle_field.patch_frame_throttle_ms,
        throttle_field.raise_frame_throttle_ms,
        throttle_field.throttle_field_at,
    ):
        targets.append(
            Target(f"throttle_field.{fn.__name__}", _throttle(fn), throttle_seeds, throttle_versions)
        )
    return targets


TARGETS = _targets()

_INTERESTING_BYTES = [0x00, 0x01, 0x7F, 0x80, 0xFF, 0xFE]


def _length_fields(data: bytearray) -> list[tuple[int, bytes]]:
    """Where the seed's lengths may be (its arrays hold 1 element, strings and bytes 2) and their null.

    Classic int32 counts 1/2 become -1, int16 string lengths 2 become -1, compact lengths (n+1: 0x02,
    0x03) become 0; a guess at every plausible offset, since the fuzz need not know the schema.
    """
    found: list[tuple[int, bytes]] = []
    for i, byte in enumerate(data):
        if data[i : i + 4] in (b"\0\0\0\x01", b"\0\0\0\x02"):
            found.append((i, b"\xff\xff\xff\xff"))
        if data[i : i + 2] == b"\0\x02":
            found.append((i, b"\xff\xff"))
        if byte in (2, 3):
            found.append((i, b"\0"))
    return found


@st.composite
def _mutated(draw: st.DrawFn, target: Target) -> tuple[int, bytes]:
    version = draw(st.sampled_from(target.all_versions()))
    seeds = target.seeds.get(version)
    if not seeds or draw(st.integers(0, 9)) == 0:
        return version, draw(st.binary(max_size=80))
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.integers(0, 5))
        at = draw(st.integers(0, len(data)))
        lengths = _length_fields(data)
        if op == 5 and lengths:  # the likeliest bug: a null where the schema forbids one
            start, null = draw(st.sampled_from(lengths))
            data[start : start + len(null)] = null
        elif op == 0 and at < len(data):  # one byte: null a compact array/string, or a huge varint
            data[at] = draw(st.sampled_from(_INTERESTING_BYTES) | st.integers(0, 255))
        elif op == 1:  # a classic null (-1) array, string or bytes length
            data[at : at + 4] = b"\xff\xff\xff\xff"
        elif op == 2:
            data[at:at] = draw(st.binary(min_size=1, max_size=6))
        elif op == 3:
            del data[at : at + draw(st.integers(1, 6))]
        else:
            del data[at:]
    return version, bytes(data)


@pytest.mark.parametrize("target", TARGETS, ids=[t.name for t in TARGETS])
def test_only_protocol_error_escapes(target: Target) -> None:
    @FUZZ
    @given(case=_mutated(target))
    def run(case: tuple[int, bytes]) -> None:
        version, data = case
        with contextlib.suppress(ProtocolError):
            target.call(version, data)

    run()


# Public functions of protocol/ that read no untrusted bytes, and why.
NOT_DECODERS = {
    # Which API versions are vetted: a table over API keys and the filters' declarations.
    "vetted_max_versions",
    # Sums what produce_partition_sizes decoded (fuzzed with it).
    "topic_sizes",
    # Arithmetic on two limits a request decoder already read (cap_fetch_request, fuzzed, calls it).
    "capped_limits",
    # Encoders and builders: their input is the proxy's own values.
    "encode_",
    "empty_fetch_response",
    "produce_error_body",
    "build_message",
    "frame",
    "request_class",
    "response_class",
    "plain_token",
    # Tables over API keys and versions, not over bytes.
    "api_spec",
    "is_flexible",
    "request_header_version",
    "response_header_version",
    "choose_version",
    # Takes a certificate subject cryptography's x509 parsed from a certificate the trusted CA signed
    # (OpenSSL verified it in the handshake); it reads no bytes of its own.
    "rfc2253_name",
    # Asks whether the proxy's own read buffer is still exported; it reads none of the buffer's bytes
    # (its Python reference alike).
    "buffer_in_use",
    "buffer_in_use_in_python",
    # Asks what a view the splitter returned is a view of; it reads none of its bytes.
    "stays_valid",
    # Maps the memory for a frame whose size the splitter (fuzzed, with small frames in mappings) read.
    "frame_mapping",
    # Empties the client-id cache; it takes no argument.
    "forget_client_ids",
    # Hands back what fetch_responses (fuzzed) found in the very object it walked last; reads no bytes
    # (the Python reference of the compiled one, which is protocol/compiled.py's).
    "walked_fetch_topics",
    "walked_fetch_topics_in_python",
}

FUZZED = {name.split(".")[-1].split("[")[0] for name in (t.name for t in TARGETS)}


def _public_functions() -> set[str]:
    found: set[str] = set()
    for info in pkgutil.iter_modules(sluice.protocol.__path__):
        module = importlib.import_module(f"sluice.protocol.{info.name}")
        for name, value in vars(module).items():
            if name.startswith("_") or getattr(value, "__module__", None) != module.__name__:
                continue
            # Classes count when they take bytes: the frame splitter and the SASL exchanges.
            if inspect.isfunction(value) or name in ("FrameSplitter", "SaslExchange", "ScramClient"):
                found.add(name)
    return found


def test_every_decoder_is_fuzzed() -> None:
    def excused(name: str) -> bool:
        return any(name == n or (n.endswith("_") and name.startswith(n)) for n in NOT_DECODERS)

    missing = sorted(n for n in _public_functions() if n not in FUZZED and not excused(n))
    assert missing == [], f"protocol/ functions not fuzzed: {missing}"


def test_the_null_arrays_of_the_issue_raise_protocol_error() -> None:
    # Issue 14's own example: FindCoordinator v4 with a null coordinators array (int32 -1 after throttle).
    with pytest.raises(ProtocolError):
        broker_addresses.rewrite_broker_addresses(10, 4, bytes.fromhex("000000000000"), _address)
    with pytest.raises(ProtocolError):
        broker_addresses.rewrite_broker_addresses(10, 4, bytes.fromhex("00000000ffffffff"), _address)
    # DescribeCluster v0 (flexible): throttle, error code, null error message, cluster id "", controller,
    # then a null (compact 0) brokers array.
    describe = bytes.fromhex("00000000" + "0000" + "00" + "01" + "00000001" + "00" + "00000000" + "00")
    with pytest.raises(ProtocolError):
        broker_addresses.rewrite_broker_addresses(60, 0, describe, _address)
    with pytest.raises(ProtocolError):
        broker_addresses.decode_brokers(60, 0, describe)


def test_a_scram_iteration_count_in_non_ascii_digits_is_a_protocol_error() -> None:
    # str.isdigit() accepts "²", which int() refuses: it escaped as ValueError.
    client = sasl_client.ScramClient("SCRAM-SHA-256", "alice", "pw", nonce="abc")
    client.client_first()
    with pytest.raises(ProtocolError):
        client.server_first("r=abcdef,s=c2FsdA==,i=4²".encode())
