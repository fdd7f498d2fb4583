"""protocol/client_requests.py's encode_fetch_request: each long poll's own wait is written into a request
encoded once per offset, and the bytes are those of encoding the request whole."""

from __future__ import annotations

import pytest

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.client_requests import _encoded_fetch_request, encode_fetch_request
from sluice.protocol.message_codec import encode_request_body


def _whole(version: int, offset: int, max_wait_ms: int) -> bytes:
    partition = {
        "partition": 3,
        "current_leader_epoch": -1,
        "fetch_offset": offset,
        "last_fetched_epoch": -1,
        "log_start_offset": -1,
        "partition_max_bytes": 1000,
    }
    return encode_request_body(
        ApiKey.FETCH,
        version,
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1000,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[{"topic": "t", "partitions": [partition]}],
        forgotten_topics_data=[],
        rack_id="",
    )


@pytest.mark.parametrize("version", range(4, 18))
def test_a_polls_wait_is_written_into_the_request_encoded_once(version: int) -> None:
    _encoded_fetch_request.cache_clear()
    for wait in (0, 1, 249, 250, 299, 500, 2**31 - 1):
        asked = encode_fetch_request(version, "t", 3, 77, max_bytes=1000, max_wait_ms=wait)
        assert asked == _whole(version, 77, wait)
    assert _encoded_fetch_request.cache_info().currsize == 1  # the waits vary, the encoding does not
