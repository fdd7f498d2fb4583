"""Many raw connections of one client-id producing through the proxy: each sends one Produce (acks=1) and
the next as soon as the answer is back (as a producer with one request in flight does). For measuring
what a quota admits however many connections share it, and how evenly among them (`served`, per
connection). Requests are built, and answers read, by `protocol/`."""

from __future__ import annotations

import selectors
import socket
import struct
import time
from dataclasses import dataclass, field

from sluice.protocol.client_requests import decode_produce, encode_produce_request
from sluice.protocol.headers import encode_request
from sluice.protocol.record_batches import Record, encode_record_batch

PRODUCE = 0
PRODUCE_VERSION = 3
REQUEST_TIMED_OUT = 7


@dataclass
class _Conn:
    sock: socket.socket
    partition: int
    buffer: bytearray = field(default_factory=bytearray)
    correlation_id: int = 0


class ProduceFlood:
    def __init__(
        self,
        port: int,
        connections: int,
        topic: str,
        partitions: int,
        client_id: str,
        record_bytes: int = 2000,
    ) -> None:
        self.port = port
        self.topic = topic
        self.client_id = client_id
        # Requests the quota let through, as their answers came: (monotonic time, bytes charged: frame - 4).
        # Not those the entity gate answered REQUEST_TIMED_OUT (uncharged); a broker's error (the flood
        # sends every partition over one connection, so most answers are NOT_LEADER_OR_FOLLOWER) still
        # means the request was admitted and charged.
        self.acks: list[tuple[float, int]] = []
        self.errors: dict[int, int] = {}  # error code -> answers
        self.served = [0] * connections  # requests let through, per connection
        # One body per partition, built once: encoding a batch (its CRC) per request would make the
        # first round of 2,000 requests take seconds to send.
        batch = encode_record_batch([Record(b"k", b"v" * record_bytes)], now_ms=int(time.time() * 1000))
        self._bodies = [
            encode_produce_request(PRODUCE_VERSION, topic, p, batch, acks=1, timeout_ms=30_000)
            for p in range(partitions)
        ]
        self.started = 0.0  # when every connection has sent its first request
        # When the first answer telling a throttle came: the entity's burst is spent, and from then on what
        # its quota admits is its rate (a measurement starting at a fixed time after `started` may still
        # see the burst when the proxy or this process is starved of CPU).
        self.throttled_at: float | None = None
        # When an answer told a throttle again, `settle_s` or more after the first (see `run`).
        self.held_from: float | None = None
        self._conns = [
            _Conn(socket.create_connection(("127.0.0.1", port)), i % partitions) for i in range(connections)
        ]
        for conn in self._conns:
            conn.sock.setblocking(False)
        self._index = {id(conn): i for i, conn in enumerate(self._conns)}

    def _frame(self, conn: _Conn) -> bytes:
        conn.correlation_id += 1
        body = self._bodies[conn.partition]
        return encode_request(PRODUCE, PRODUCE_VERSION, conn.correlation_id, self.client_id, body)

    def run(
        self,
        seconds: float,
        *,
        from_throttle: bool = False,
        settle_s: float = 0.0,
        throttle_within_s: float = 60.0,
    ) -> None:
        """Flood for `seconds`; with `from_throttle`, for `seconds` after `held_from`: the first answer
        telling a throttle `settle_s` or more after the first such answer (`throttled_at`), which must come
        within `throttle_within_s` (AssertionError otherwise).

        The request `held_from` answers was charged to an empty bucket, so what is admitted from then on is
        what the quota refills. `throttled_at + settle_s` alone is no such point: a proxy starved of CPU
        after the burst lets its waiting requests in late, and the tokens that gathered meanwhile are
        spent at once when it catches up (27 requests in one millisecond, 1.2 s after the first throttle,
        under six busy processes on two cores)."""
        selector = selectors.DefaultSelector()
        sizes: dict[int, int] = {}
        for conn in self._conns:
            frame = self._frame(conn)
            sizes[id(conn)] = len(frame) - 4
            conn.sock.sendall(frame)
            selector.register(conn.sock, selectors.EVENT_READ, conn)
        self.started = time.monotonic()
        deadline = self.started + (throttle_within_s if from_throttle else seconds)
        try:
            while time.monotonic() < deadline:
                for key, _ in selector.select(0.1):
                    conn = key.data
                    data = conn.sock.recv(65536)
                    if not data:
                        raise ConnectionError("the proxy closed a producing connection")
                    conn.buffer += data
                    if len(conn.buffer) < 4:
                        continue
                    length = struct.unpack_from(">i", conn.buffer)[0]
                    if len(conn.buffer) < 4 + length:
                        continue
                    answer = bytes(conn.buffer[8 : 4 + length])  # after the correlation id
                    del conn.buffer[: 4 + length]
                    error = decode_produce(PRODUCE_VERSION, answer, self.topic, conn.partition).error_code
                    if error:
                        self.errors[error] = self.errors.get(error, 0) + 1
                    if error != REQUEST_TIMED_OUT:
                        self.acks.append((time.monotonic(), sizes[id(conn)]))
                        self.served[self._index[id(conn)]] += 1
                    # throttle_time_ms, the last field of a Produce v1-v8 answer
                    if self.held_from is None and struct.unpack_from(">i", answer, len(answer) - 4)[0] > 0:
                        now = time.monotonic()
                        if self.throttled_at is None:
                            self.throttled_at = now
                        if now >= self.throttled_at + settle_s:
                            self.held_from = now
                            if from_throttle:
                                deadline = now + seconds
                    conn.sock.setblocking(True)
                    frame = self._frame(conn)
                    conn.sock.sendall(frame)
                    conn.sock.setblocking(False)
        finally:
            selector.close()
        if from_throttle:
            assert self.held_from is not None, (
                f"within {throttle_within_s} s, no answer told a throttle {settle_s} s or more after the "
                f"first (at {self.throttled_at}; None: none told one)"
            )

    def rate(self, start: float, end: float) -> float:
        """Bytes/s acknowledged between `start` and `end` (monotonic times)."""
        total = sum(size for at, size in self.acks if start <= at < end)
        return total / (end - start)

    def close(self) -> None:
        for conn in self._conns:
            conn.sock.close()
