"""The guard that cannot go stale: every response version that can carry a broker address, as Kafka's own
message schemas show it, is either rewritten by the proxy's filter chain or never offered to clients.

The schemas read are kafka-python's (always there) and Kafka's 3.9.1 and 2026-trunk reference copies (beside
the repository; the tests that need them say so when they are missing). Nothing here is a hand-kept list of
APIs: the address-carrying (api, version, path) triples are derived from the schemas, and each is checked
against the server's real chain: either the ApiVersions clamp keeps clients below that version (and the
request gate refuses it), or a response built from the schema with distinct broker addresses in every
address field comes out of the chain with none of them left. A new kafka-python or new schemas with a new
address field fail here until the chain rewrites it or the clamp hides it.

Also: protocol/schema_table.py is exactly what tests/generate_schema_table.py makes of the schemas, and every
field named like a host or a port that is not part of a Host+Port pair is named below with the reason.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from generate_schema_table import TABLE, collect, committed_data, render, table_data
from kafka.protocol.metadata import ApiVersionsResponse
from kafka_schemas import SHARED_MISSING, SHARED_VERSIONS, Schema, SchemaSource, schema_sources
from schema_codec import decode, encode, sample, versions_of

from sluice.config.load import config_from_mapping
from sluice.protocol.api_keys import ApiKey
from sluice.protocol.api_vetting import NOT_BROKER_ADDRESSES
from sluice.protocol.codec_quirks import encode_body
from sluice.protocol.headers import RequestHeader, encode_response
from sluice.protocol.schema_table import KNOWN_APIS
from sluice.proxy.cluster.brokers import BrokerDirectory
from sluice.proxy.data_path.filter_chain import FilterChain
from sluice.proxy.filter_api import InFlight
from sluice.proxy.filters import ApiVersionsClampFactory, BrokerAddressRewriteFactory
from sluice.proxy.filters.unadvertised_requests import UnadvertisedRequestsFactory
from sluice.proxy.process.server import SluiceServer
from sluice.quota import ANONYMOUS

ADVERTISED_HOST = "127.0.0.1"
REAL_HOST = "broker-{}.real.example"
REAL_PORT = 19000
KEYS = range(128)
# At least this many (api, version) answers of each source are checked through the chain: Metadata 0-13,
# FindCoordinator 0-6, DescribeCluster, Produce 10+, Fetch 16+ (and the share answers in Kafka's own).
MIN_CHECKED = {"kafka-python": 30, "3.9.1": 28, "trunk-2026-08": 34}

# Fields named like a host or a port outside a Host+Port pair, and why none is a broker's address.
LONE_HOST_OR_PORT_FIELDS = {
    ("DescribeAcls", "Resources/Acls/Host"): "an ACL's host pattern: the client hosts a rule applies to",
    ("DeleteAcls", "FilterResults/MatchingAcls/Host"): "an ACL's host pattern, as in DescribeAcls",
    ("DescribeGroups", "Groups/Members/ClientHost"): "the address a group member connected from",
    ("ConsumerGroupDescribe", "Groups/Members/ClientHost"): "the address a group member connected from",
    ("ShareGroupDescribe", "Groups/Members/ClientHost"): "the address a group member connected from",
    ("StreamsGroupDescribe", "Groups/Members/ClientHost"): "the address a group member connected from",
}


def _sources() -> list[Any]:
    present = {source.name: source for source in schema_sources()}
    params = [pytest.param(present["kafka-python"], id="kafka-python")]
    for version in SHARED_VERSIONS:
        source = present.get(version)
        marks = [] if source is not None else [pytest.mark.skip(reason=SHARED_MISSING or "")]
        params.append(pytest.param(source, id=version, marks=marks))
    return params


# ---- the table ------------------------------------------------------------------------------------------


@pytest.mark.skipif(SHARED_MISSING is not None, reason=SHARED_MISSING or "")
def test_the_table_is_what_the_schemas_say() -> None:
    """Compared as data, not as text: the file is laid out by `ruff format`, and a newer ruff laying it out
    otherwise changes nothing the proxy reads."""
    assert committed_data() == table_data(schema_sources()), (
        "protocol/schema_table.py is stale: run .venv/bin/python tests/generate_schema_table.py"
    )


@pytest.mark.skipif(SHARED_MISSING is not None, reason=SHARED_MISSING or "")
def test_the_generated_text_holds_the_same_data() -> None:
    namespace: dict[str, object] = {}
    exec(compile(render(schema_sources()), str(TABLE), "exec"), namespace)  # the text the generator writes
    known, fields = namespace["KNOWN_APIS"], namespace["RESPONSE_FIELDS"]
    assert {k: tuple(v) for k, v in known.items()} == committed_data().known_apis  # type: ignore[attr-defined]
    assert fields == committed_data().response_fields


def test_the_table_holds_everything_kafka_python_says() -> None:
    # Runs without the reference copies too: a kafka-python upgrade that knows more fails here.
    for key, api in collect(schema_sources(with_shared=False)).items():
        if not api.ranges:
            continue
        known = KNOWN_APIS.get(key)
        assert known is not None, f"api key {key} ({api.name}) is missing from the table"
        low, high = known.versions
        assert all(low <= a and b <= high for a, b in api.ranges), (api.name, api.ranges, known.versions)
        table = {(path, v) for path, first, last in known.addresses for v in range(first, last + 1)}
        assert {(path, v) for path, versions in api.addresses.items() for v in versions} <= table, api.name


# ---- the server's chain ---------------------------------------------------------------------------------


class _Connection:
    peer = "127.0.0.1:1"
    upstream_peer = "127.0.0.1:2"
    listener = "bootstrap"
    user = ANONYMOUS

    def now_ms(self) -> int:
        return 0

    def read_ms(self) -> int:
        return 0

    def take_cpu_ns(self) -> int:
        return 0

    def mute_remaining_ms(self) -> int:
        return 0


def _fake_port(node_id: int) -> int:
    return 9000 + node_id


def server_chain() -> FilterChain:
    """The filter chain `sluice run` builds (default configuration), with a broker directory that opens no
    sockets: node N's listener is port 9000 + N."""
    config = config_from_mapping({"listen": "127.0.0.1:9092", "upstream": {"bootstrap": ["127.0.0.1:19092"]}})
    server = SluiceServer(config)
    server.directory = BrokerDirectory(ADVERTISED_HOST, _fake_port)
    return FilterChain(server._filters())


CHAIN = server_chain()


def _offered() -> dict[int, tuple[int, int]]:
    """What the chain's ApiVersions clamp offers a client of a broker offering every API key at 0..32767."""
    version = 3
    answer = ApiVersionsResponse(
        version=version,
        error_code=0,
        api_keys=[
            ApiVersionsResponse.ApiVersion(api_key=k, min_version=0, max_version=0x7FFF) for k in range(128)
        ],
        throttle_time_ms=0,
    )
    frame = encode_response(ApiKey.API_VERSIONS, version, 1, encode_body(answer, version))
    filters = CHAIN.for_connection(_Connection(), lambda _ms: None)
    out = filters.on_response(InFlight(RequestHeader(ApiKey.API_VERSIONS, version, 1, "guard", 0)), frame)
    from sluice.protocol.codec_quirks import decode_body

    clamped = decode_body(ApiVersionsResponse, version, memoryview(out)[8:])
    return {e.api_key: (e.min_version, e.max_version) for e in clamped.api_keys}


OFFERED = _offered()


def test_the_server_chain_vets_and_gates_by_default() -> None:
    kinds = {type(factory) for factory in CHAIN.factories}
    assert {ApiVersionsClampFactory, BrokerAddressRewriteFactory, UnadvertisedRequestsFactory} <= kinds
    gate = next(f for f in CHAIN.factories if isinstance(f, UnadvertisedRequestsFactory))
    for key in range(128):
        if key == ApiKey.API_VERSIONS:
            continue
        offered = OFFERED.get(key)
        assert gate.newest[key] == (offered[1] if offered else -1), key


def test_what_the_schemas_do_not_know_is_not_offered() -> None:
    assert set(OFFERED) <= set(KNOWN_APIS)
    for key, (_low, high) in OFFERED.items():
        assert high <= KNOWN_APIS[key].versions[1], KNOWN_APIS[key].name
    hidden = {KNOWN_APIS[key].name for key in KNOWN_APIS if key not in OFFERED}
    assert {"Vote", "BeginQuorumEpoch", "FetchSnapshot", "UpdateRaftVoter", "BrokerRegistration"} <= hidden
    assert OFFERED[ApiKey.DESCRIBE_QUORUM][1] == 1  # v2 lists the controllers' listeners


# ---- the guard ------------------------------------------------------------------------------------------


def _address_structs(message: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every (path, struct) holding both a Host and a Port in a decoded message."""
    if isinstance(message, list):
        for item in message:
            yield from _address_structs(item, path)
    elif isinstance(message, dict):
        if "Host" in message and "Port" in message:
            yield path, message
        for name, value in message.items():
            if isinstance(value, list | dict):
                yield from _address_structs(value, f"{path}/{name}" if path else name)


def _node_id(struct: dict[str, Any]) -> str | None:
    return next((name for name in ("NodeId", "BrokerId", "LeaderId") if name in struct), None)


def _with_real_addresses(message: dict[str, Any]) -> dict[str, tuple[str, int]]:
    """Give every address struct its own node id and real address; returns host -> (node, path)."""
    real = {}
    counter = itertools.count(1)
    for path, struct in _address_structs(message):
        node = next(counter)
        struct["Host"], struct["Port"] = REAL_HOST.format(node), REAL_PORT + node
        id_field = _node_id(struct)
        if id_field is not None:
            struct[id_field] = node
        real[struct["Host"]] = (node, path)
    return real


def _address_cases(source: SchemaSource) -> Iterator[tuple[int, int, Schema, set[str]]]:
    """(api key, version, response schema, address paths) for every address-carrying response version."""
    for schema in source.messages():
        if schema["type"] != "response":
            continue
        for version in versions_of(schema):
            paths = {path for path, _s in _address_structs(sample(schema, version))}
            if paths:
                yield schema["apiKey"], version, schema, paths


@pytest.mark.parametrize("source", _sources())
def test_every_address_a_response_can_carry_is_rewritten_or_never_offered(source: SchemaSource) -> None:
    rewrites = next(f for f in CHAIN.factories if isinstance(f, BrokerAddressRewriteFactory))
    checked = 0
    for key, version, schema, paths in _address_cases(source):
        name = schema["name"].removesuffix("Response")
        broker_paths = {p for p in paths if (name, p) not in NOT_BROKER_ADDRESSES}
        offered = OFFERED.get(key)
        if not broker_paths or offered is None or version > offered[1]:
            continue  # not a broker's address, or never offered: a client cannot get this answer
        message = sample(schema, version)
        real = _with_real_addresses(message)
        frame = encode_response(key, version, 7, encode(schema, version, message))
        filters = CHAIN.for_connection(_Connection(), lambda _ms: None)
        before = rewrites.counts[key]
        out = filters.on_response(InFlight(RequestHeader(key, version, 7, "guard", 0)), frame)
        header_size = len(frame) - 4 - len(encode(schema, version, message))
        rewritten = decode(schema, version, bytes(memoryview(out)[4 + header_size :]))
        for path, struct in _address_structs(rewritten):
            if (name, path) in NOT_BROKER_ADDRESSES:
                continue
            node = struct[_node_id(struct)] if _node_id(struct) else None
            assert struct["Host"] not in real, f"{name} v{version} {path}: {struct['Host']} left as it was"
            assert (struct["Host"], struct["Port"]) == (ADVERTISED_HOST, _fake_port(node)), (name, version)
        if key != ApiKey.METADATA:
            assert rewrites.counts[key] - before == len(real), f"{name} v{version}: rewrites not counted"
        checked += 1
    assert checked >= MIN_CHECKED[source.name]


@pytest.mark.parametrize("source", _sources())
def test_every_lone_host_or_port_field_is_named_with_its_reason(source: SchemaSource) -> None:
    def lone(fields: list[Schema], path: str, name: str) -> Iterator[tuple[str, str]]:
        pair = {"Host", "Port"} <= {f["name"] for f in fields}
        for field in fields:
            here = f"{path}/{field['name']}" if path else field["name"]
            looks = "Host" in field["name"] or "Port" in field["name"]
            if looks and not (pair and field["name"] in ("Host", "Port")):
                yield name, here
            if "fields" in field:
                yield from lone(field["fields"], here, name)

    found = {
        item
        for schema in source.messages()
        if schema["type"] == "response"
        for item in lone(schema.get("fields", []), "", schema["name"].removesuffix("Response"))
    }
    assert found <= set(LONE_HOST_OR_PORT_FIELDS), sorted(found - set(LONE_HOST_OR_PORT_FIELDS))


def test_the_exempt_addresses_are_in_the_schemas() -> None:
    # An exemption for a path the schemas no longer have would hide nothing but could hide a rename.
    paths = {(api.name, path) for api in KNOWN_APIS.values() for path, _first, _last in api.addresses}
    assert set(NOT_BROKER_ADDRESSES) <= paths
