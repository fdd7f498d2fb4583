"""The walks past the responses of Produce, Fetch and the share answers: the layouts they assume are the ones
Kafka's schemas give (protocol/schema_table.py's RESPONSE_FIELDS), the versions they take from there are
the schemas', and a Produce answer asked about twice in a row is walked once."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from unittest import mock

import pytest
from kafka.protocol.producer import ProduceResponse

from sluice.protocol import node_endpoints, response_walks
from sluice.protocol.api_keys import ApiKey
from sluice.protocol.node_endpoints import NODE_ENDPOINTS_FROM, NODE_ENDPOINTS_MAX_VERSIONS
from sluice.protocol.schema_table import RESPONSE_FIELDS
from sluice.protocol.throttle_field import throttle_field_at

# What follows the walked array, untagged, as protocol/node_endpoints.py and protocol/throttle_field.py read
# it: Produce's throttle_time_ms, the share answers' NodeEndpoints array (the rest is tagged fields).
AFTER_THE_WALK = {
    ApiKey.PRODUCE: ("ThrottleTimeMs",),
    ApiKey.FETCH: (),
    ApiKey.SHARE_FETCH: ("NodeEndpoints",),
    ApiKey.SHARE_ACKNOWLEDGE: ("NodeEndpoints",),
}


@pytest.mark.parametrize("key", sorted(AFTER_THE_WALK))
def test_each_walk_goes_past_the_fields_kafkas_schemas_put_there(key: int) -> None:
    first = NODE_ENDPOINTS_FROM[key]
    untagged = [
        name
        for name, low, high, tag in RESPONSE_FIELDS[key]
        if tag is None and high >= first and low <= NODE_ENDPOINTS_MAX_VERSIONS[key]
    ]
    walked = response_walks.WALKED_FIELDS[key]
    assert tuple(untagged[: len(walked)]) == walked
    assert tuple(untagged[len(walked) :]) == AFTER_THE_WALK[key]


def test_the_versions_come_from_the_schemas() -> None:
    assert NODE_ENDPOINTS_FROM == {ApiKey.PRODUCE: 10, ApiKey.FETCH: 16, 78: 0, 79: 0}
    lock_timeout_from = {key: first for key, (first, _walk) in response_walks._SHARE_LAYOUTS.items()}
    assert lock_timeout_from == {ApiKey.SHARE_FETCH: 1, ApiKey.SHARE_ACKNOWLEDGE: 2}


def produce_answer(version: int, partitions: int = 3) -> bytes:
    partition = ProduceResponse.TopicProduceResponse.PartitionProduceResponse
    topic = ProduceResponse.TopicProduceResponse(
        name="walked",
        partition_responses=[partition(index=p, error_code=0, base_offset=p) for p in range(partitions)],
    )
    message = ProduceResponse(version=version, responses=[topic], throttle_time_ms=0)
    return bytes(message.encode(version=version))


@contextmanager
def counted_walks() -> Iterator[list[int]]:
    """Every Produce walk made meanwhile, by the NodeEndpoints rewrite or anyone else."""
    walks: list[int] = []
    walk = response_walks.produce_responses_end

    def counting(api_version: int, body: object, start: int = 0, remember: bool = False) -> int:
        walks.append(api_version)
        return walk(api_version, body, start, remember)  # type: ignore[arg-type]

    with (
        mock.patch.object(response_walks, "produce_responses_end", counting),
        mock.patch.object(node_endpoints, "produce_responses_end", counting),
    ):
        yield walks


# The rewrite the proxy runs (compiled where the install has it) and its Python reference.
_REWRITES = [node_endpoints.rewrite_node_endpoints, node_endpoints.rewrite_node_endpoints_in_python]


@pytest.mark.parametrize("rewrite", _REWRITES, ids=["as installed", "python"])
def test_the_throttle_field_of_an_answer_just_walked_for_its_node_endpoints_is_found_without_a_walk(
    rewrite: Callable[..., tuple[bytes | None, int]],
) -> None:
    frame = b"\x00" * 9 + produce_answer(12)  # a size, a correlation id and an empty tagged block first
    with counted_walks() as walks:
        assert rewrite(0, 12, frame, lambda n, h, p: (h, p), 9, True) == (None, 0)
        at = throttle_field_at(ApiKey.PRODUCE, 12, frame, 9)
    # the rewrite's one walk (the compiled one walks in C, uncounted), and none for the throttle field
    assert walks == ([] if rewrite is not node_endpoints.rewrite_node_endpoints_in_python else [12])
    assert at == len(frame) - 5  # then only the empty tagged block


def test_only_the_very_object_walked_last_and_asked_to_be_remembered_is() -> None:
    first, same_bytes = produce_answer(11), bytearray(produce_answer(11))
    other = produce_answer(11, partitions=5)
    with counted_walks() as walks:
        end = response_walks.produce_responses_end(11, first, 0, remember=True)
        assert response_walks.walked_produce_responses_end(11, first) == end
        response_walks.walked_produce_responses_end(11, same_bytes)  # equal bytes, another object
        response_walks.walked_produce_responses_end(10, first)  # another version
        response_walks.produce_responses_end(11, other)  # not remembered: the first still is
        assert response_walks.walked_produce_responses_end(11, first) == end
        response_walks.produce_responses_end(11, other, remember=True)
        assert response_walks.walked_produce_responses_end(11, first) == end  # walked again
    assert walks == [11, 11, 10, 11, 11, 11]
    assert end == len(first) - 5
