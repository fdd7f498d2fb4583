"""NodeEndpoints rewriting (protocol/node_endpoints.py) in Produce, Fetch, ShareFetch and ShareAcknowledge
answers of every version that carries them, checked against answers built and read by tests/schema_codec.py
from Kafka's schemas (the share answers need Kafka's own schemas, beside the repository: skipped, saying so,
where they are missing)."""

from __future__ import annotations

from typing import Any

import pytest
from kafka_schemas import SHARED_MISSING
from node_endpoint_answers import REAL, answer, proxy_address
from schema_codec import decode

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.errors import ProtocolError
from sluice.protocol.node_endpoints import (
    NODE_ENDPOINTS_FROM,
    NODE_ENDPOINTS_MAX_VERSIONS,
    decode_node_endpoints,
    rewrite_node_endpoints,
)

PRODUCE, FETCH = ApiKey.PRODUCE, ApiKey.FETCH
SHARE_FETCH, SHARE_ACKNOWLEDGE = ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE
NEEDS_SHARED = pytest.mark.skipif(SHARED_MISSING is not None, reason=SHARED_MISSING or "")


def _cases() -> list[Any]:
    cases = []
    for key, newest in NODE_ENDPOINTS_MAX_VERSIONS.items():
        marks = [NEEDS_SHARED] if key in (SHARE_FETCH, SHARE_ACKNOWLEDGE) else []
        for version in range(NODE_ENDPOINTS_FROM[key], newest + 1):
            cases.append(pytest.param(key, version, marks=marks, id=f"{key.name}-v{version}"))
    return cases


@pytest.mark.parametrize(("key", "version"), _cases())
def test_every_endpoint_is_rewritten_and_nothing_else_changes(key: int, version: int) -> None:
    schema, body = answer(key, version, REAL)
    assert decode_node_endpoints(key, version, body) == REAL
    new_body, rewritten = rewrite_node_endpoints(key, version, memoryview(body), proxy_address)
    assert new_body is not None and rewritten == 2
    before, after = decode(schema, version, body), decode(schema, version, new_body)
    assert after["NodeEndpoints"] == [
        {"NodeId": 2, "Host": "sluice.example", "Port": 9002, "Rack": "rack-2"},
        {"NodeId": 3, "Host": "sluice.example", "Port": 9003, "Rack": "rack-3"},
    ]
    before.pop("NodeEndpoints")
    after.pop("NodeEndpoints")
    assert after == before


@pytest.mark.parametrize(("key", "version"), _cases())
def test_a_node_without_a_listener_is_left_out(key: int, version: int) -> None:
    schema, body = answer(key, version, REAL)
    new_body, rewritten = rewrite_node_endpoints(
        key, version, body, lambda node, host, port: None if node == 2 else proxy_address(node, host, port)
    )
    assert new_body is not None and rewritten == 2  # one rewritten, one left out
    assert decode(schema, version, new_body)["NodeEndpoints"] == [
        {"NodeId": 3, "Host": "sluice.example", "Port": 9003, "Rack": "rack-3"}
    ]


@pytest.mark.parametrize(("key", "version"), _cases())
def test_an_answer_without_endpoints_is_left_alone(key: int, version: int) -> None:
    _schema, body = answer(key, version, [])
    calls = []
    assert rewrite_node_endpoints(key, version, body, lambda *a: calls.append(a)) == (None, 0)
    assert calls == [] and decode_node_endpoints(key, version, body) == []


@pytest.mark.parametrize("version", range(NODE_ENDPOINTS_FROM[FETCH], NODE_ENDPOINTS_MAX_VERSIONS[FETCH] + 1))
def test_other_top_level_tagged_fields_survive_in_order(version: int) -> None:
    schema, body = answer(FETCH, version, REAL, _tag1=b"\x05later", _tag9=b"")
    new_body, _ = rewrite_node_endpoints(FETCH, version, body, proxy_address)
    assert new_body is not None
    after = decode(schema, version, new_body)
    assert (after["_tag1"], after["_tag9"]) == (b"\x05later", b"")
    assert new_body.endswith(b"\x01\x06\x05later\x09\x00")


def test_addresses_already_the_proxys_change_nothing() -> None:
    _schema, body = answer(PRODUCE, 10, REAL)
    assert rewrite_node_endpoints(PRODUCE, 10, body, lambda node, host, port: (host, port)) == (None, 0)


def test_versions_before_the_field_are_not_read() -> None:
    assert rewrite_node_endpoints(PRODUCE, 9, b"", proxy_address) == (None, 0)
    assert rewrite_node_endpoints(FETCH, 15, b"\xff", proxy_address) == (None, 0)
    assert rewrite_node_endpoints(ApiKey.METADATA, 12, b"", proxy_address) == (None, 0)


@pytest.mark.parametrize("key", list(NODE_ENDPOINTS_MAX_VERSIONS))
def test_a_version_beyond_the_known_layouts_is_refused(key: int) -> None:
    with pytest.raises(ProtocolError) as caught:
        rewrite_node_endpoints(key, NODE_ENDPOINTS_MAX_VERSIONS[key] + 1, b"\x00" * 64, proxy_address)
    assert caught.value.reason == "unsupported_version"


@pytest.mark.parametrize(("key", "version"), [(PRODUCE, 10), (FETCH, 16)])
@pytest.mark.parametrize("damage", ["trailing", "truncated", "oversized_tag"])
def test_malformed_answers_raise_protocol_error(key: int, version: int, damage: str) -> None:
    _schema, body = answer(key, version, REAL)
    if damage == "trailing":
        body += b"\x00"
    elif damage == "truncated":
        body = body[:-3]
    else:  # the NodeEndpoints tag claims more bytes than the body has
        block = len(answer(key, version, [])[1]) - 1  # where the top-level tagged block starts
        assert body[block : block + 2] == b"\x01\x00" and body[block + 2] < 0x7F  # one field, tag 0, size
        body = body[: block + 2] + b"\x7f" + body[block + 3 :]
    with pytest.raises(ProtocolError) as caught:
        rewrite_node_endpoints(key, version, body, proxy_address)
    assert caught.value.reason == "bad_response_body"
