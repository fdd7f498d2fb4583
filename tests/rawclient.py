"""A minimal blocking Kafka client for tests: requests built from kafka-python's generated codecs plus the
request header from `protocol/`, answers returned as decoded objects. For probing the proxy with exact
API versions that no real client lets you choose."""

from __future__ import annotations

import socket
import struct
from typing import Any

from sluice.protocol.headers import encode_request_header, frame, response_header_size


class RawClient:
    def __init__(self, host: str, port: int, client_id: str = "raw-test", timeout_s: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.client_id = client_id
        self._correlation_id = 0

    def encode(self, request: Any, version: int) -> tuple[int, bytes]:
        """The framed request and its correlation id, without sending it (for pipelining)."""
        self._correlation_id += 1
        body = bytes(request.encode(version=version))
        header = encode_request_header(request.API_KEY, version, self._correlation_id, self.client_id)
        return self._correlation_id, frame(header + body)

    def send(self, request: Any, version: int) -> int:
        """Send `request` (a kafka-python request object) at `version`; returns its correlation id."""
        correlation_id, data = self.encode(request, version)
        self.sock.sendall(data)
        return correlation_id

    def receive_frame(self) -> bytes:
        length = struct.unpack(">i", self._read_exactly(4))[0]
        return struct.pack(">i", length) + self._read_exactly(length)

    def encode_body(self, api_key: int, version: int, body: bytes) -> bytes:
        """The framed request around a body built by `protocol/`, without sending it."""
        self._correlation_id += 1
        header = encode_request_header(api_key, version, self._correlation_id, self.client_id)
        return frame(header + body)

    def call_body(self, api_key: int, version: int, body: bytes) -> bytes:
        """Send a request body built by `protocol/`; return the response body (after the response header)."""
        self.sock.sendall(self.encode_body(api_key, version, body))
        data = self.receive_frame()
        assert struct.unpack_from(">i", data, 4)[0] == self._correlation_id
        return data[4 + response_header_size(api_key, version, data) :]

    def call(self, request: Any, version: int, response_class: Any) -> Any:
        correlation_id = self.send(request, version)
        data = self.receive_frame()
        assert struct.unpack_from(">i", data, 4)[0] == correlation_id
        header_size = response_header_size(request.API_KEY, version, data)
        return response_class[version].decode(data[4 + header_size :])

    def _read_exactly(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                raise ConnectionError("closed by peer")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def is_closed_by_peer(self, timeout_s: float = 5.0) -> bool:
        self.sock.settimeout(timeout_s)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
