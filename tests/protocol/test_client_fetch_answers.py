"""The proxy's own client reads a Fetch answer the same whether it is small and seen before (an idle
follower's long poll is answered with the same bytes poll after poll, decoded once) or not."""

from __future__ import annotations

import pytest

from sluice.protocol.client_requests import FETCH, Fetched, decode_fetch
from sluice.protocol.errors import ProtocolError
from sluice.protocol.message_codec import encode_response_body


def fetch_answer(version: int, high_watermark: int, records: bytes | None) -> bytes:
    return encode_response_body(
        FETCH,
        version,
        throttle_time_ms=0,
        error_code=0,
        session_id=0,
        responses=[
            {
                "topic": "quotas",
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": 0,
                        "high_watermark": high_watermark,
                        "last_stable_offset": high_watermark,
                        "log_start_offset": 0,
                        "aborted_transactions": [],
                        "preferred_read_replica": -1,
                        "records": records,
                    }
                ],
            }
        ],
    )


@pytest.mark.parametrize("version", [5, 11, 12])
def test_a_repeated_answer_reads_the_same_and_a_changed_one_reads_its_change(version: int) -> None:
    empty = fetch_answer(version, 7, None)
    assert decode_fetch(version, empty, "quotas", 0) == Fetched(0, 7, 0, None)
    assert decode_fetch(version, memoryview(empty), "quotas", 0) == Fetched(0, 7, 0, None)  # again
    moved = fetch_answer(version, 8, None)  # the same length, one byte different
    assert len(moved) == len(empty)
    assert decode_fetch(version, moved, "quotas", 0) == Fetched(0, 8, 0, None)
    large = fetch_answer(version, 9, b"\x01" * 2000)  # decoded as it comes
    assert decode_fetch(version, large, "quotas", 0) == Fetched(0, 9, 0, b"\x01" * 2000)
    for _ in range(2):  # a partition the answer lacks is an error each time, not a cached answer
        with pytest.raises(ProtocolError, match="missing_partition"):
            decode_fetch(version, empty, "other", 0)


def test_a_small_answer_seen_before_is_not_decoded_again_and_a_large_one_is_each_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sluice.protocol import client_requests

    decoded: list[int] = []
    generic = client_requests.decode_response_body

    def counting(api_key: int, version: int, body: bytes | memoryview) -> object:
        decoded.append(len(body))
        return generic(api_key, version, body)

    monkeypatch.setattr(client_requests, "decode_response_body", counting)
    client_requests._decode_small_fetch.cache_clear()  # what other tests decoded counts for nothing here
    small, large = fetch_answer(12, 7, None), fetch_answer(12, 9, b"\x01" * 2000)
    for _ in range(3):
        decode_fetch(12, small, "quotas", 0)
        decode_fetch(12, large, "quotas", 0)
    assert decoded == [len(small), len(large), len(large), len(large)]
