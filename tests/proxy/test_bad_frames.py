"""Valid requests before a bad frame (issue 14 item 9): requests read in the same chunk as a following bad
length prefix (or a frame whose header cannot be read) are forwarded and answered first; then the
connection closes, with the protocol error logged when it was found."""

from __future__ import annotations

import struct

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from rawclient import RawClient

BAD = {
    "negative_length": (b"\xff\xff\xff\xfe" + b"\x00" * 8, "negative_frame_length"),
    "too_large": (b"\x7f\xff\xff\xff" + b"\x00" * 8, "frame_too_large"),
    # A frame of 5 bytes: long enough to be a frame, too short for a request header.
    "bad_header": (b"\x00\x00\x00\x05\x00\x12\x00\x00\x00", "bad_request_header"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_requests_before_a_bad_frame_are_answered_then_the_connection_closes(proxy, name: str) -> None:
    bad, reason = BAD[name]
    with RawClient("127.0.0.1", proxy.port) as client:
        peer = "{}:{}".format(*client.sock.getsockname()[:2])
        first_id, first = client.encode(ApiVersionsRequest[0](), 0)
        second_id, second = client.encode(MetadataRequest[1](topics=[]), 1)
        client.sock.sendall(first + second + bad)  # one chunk
        answers = [client.receive_frame(), client.receive_frame()]
        assert [struct.unpack_from(">i", frame, 4)[0] for frame in answers] == [first_id, second_id]
        assert client.is_closed_by_peer()
    event = proxy.wait_for_event("protocol_error", peer=peer)
    assert event["reason"] == reason
    closed = proxy.wait_for_event("connection_closed", peer=peer)
    assert closed["cause"] == "protocol_error"


def test_a_bad_frame_alone_still_closes_at_once(proxy) -> None:
    with RawClient("127.0.0.1", proxy.port) as client:
        client.sock.sendall(BAD["negative_length"][0])
        assert client.is_closed_by_peer()
