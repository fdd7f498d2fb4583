"""An open-loop Produce load generator: a fixed request rate, latency measured from each request's INTENDED
send time (no coordinated omission), as OpenMessaging Benchmark measures it.

Request i is due at ``start + i / rate``, spread round-robin over ``--connections``; it is sent as soon as
it is due whatever has or has not come back, so a slow answer cannot slow the load down and hide its own
delay (a closed-loop generator waits, and its late requests never show how late they would have been).
Its latency is the time from that intended moment to the moment its answer has been read, so any delay
of the generator itself counts against the path too; it is reported separately (`send_lag`) so a
generator that falls behind is visible. Requests due in the first ``--warmup`` seconds are sent but not
counted; those due in the next ``--duration`` seconds are.

One thread, non-blocking sockets and `select` (its timeout has microsecond resolution, where epoll's and
the event loops' timers have milliseconds). Requests are pre-built Produce v7 frames (as wire_load.py's)
with correlation ids cycling per connection; a connection's answers come back in request order, so a
FIFO of intended times per connection pairs each answer with its request. Every answer is length-checked,
every ``--check-every``-th decoded and its error code checked.

Run: ``.venv/bin/python tests/bench/open_loop.py --port P --rate 20000 --record-bytes 1024 --records 16``
(``--tls-ca FILE`` for a TLS listener). Prints one JSON object: latency percentiles in microseconds from
the intended send time (and from the actual send, for comparison), the rate achieved, how many answers
were still missing ``10 s`` after the last request was due (they are counted in the percentiles with the
latency they had reached then, a lower bound).
"""

from __future__ import annotations

import argparse
import itertools
import json
import select
import socket
import ssl
import sys
import time
from array import array
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from latency_histogram import LogLinearHistogram
from wire_load import CLIENT_ID, RequestKind, request_kind

from sluice.protocol.headers import encode_request_header, frame, response_header_size

PERCENTILES = (50, 90, 99, 99.9, 99.99)
_IDS = 1024  # correlation ids cycle through this many pre-built frames per connection
_READ = 1 << 18  # one reused receive buffer: a fresh 256 KiB bytes per call made recv a quarter of the CPU
_GATHER = 64  # frames per write: about 1 MiB of 16 KiB requests
_DRAIN_S = 10.0  # after the last request is due, how long its answers may take before we give up


class _Connection:
    __slots__ = ("answered", "buffer", "frames", "intended", "next_id", "out", "sent", "sock")

    def __init__(self, sock: socket.socket, kind: RequestKind) -> None:
        self.sock = sock
        self.frames = [
            frame(encode_request_header(kind.api_key, kind.version, i, CLIENT_ID) + kind.body)
            for i in range(_IDS)
        ]
        self.next_id = 0
        # Frames due but not yet (fully) written; the first may be the unwritten tail of a frame.
        self.out: deque[bytes | memoryview] = deque()
        self.intended: deque[int] = deque()  # intended send time (ns) of each request in flight, in order
        self.sent: deque[int] = deque()  # actual time its last byte was handed to the kernel
        self.buffer = bytearray()
        self.answered = 0

    def fileno(self) -> int:
        return self.sock.fileno()


def _connect(host: str, port: int, tls_ca: str | None) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if tls_ca:
        context = ssl.create_default_context(cafile=tls_ca)
        sock = context.wrap_socket(sock, server_hostname="localhost")  # handshake here, still blocking
    sock.setblocking(False)
    return sock


class OpenLoop:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.kind = request_kind("produce", args.topic, args.partition, args.record_bytes, args.records)
        self.frame_bytes = len(self._one_frame())
        self.conns = [
            _Connection(_connect(args.host, args.port, args.tls_ca), self.kind)
            for _ in range(args.connections)
        ]
        # Raw samples (ns) while the load runs, histograms after it: one array append per sample keeps the
        # generator's own CPU, which it shares with the path it measures, as small as it can be.
        self.from_intended = array("q")
        self.from_sent = array("q")
        self.send_lag = array("q")
        self._inbox = bytearray(_READ)
        self._inbox_view = memoryview(self._inbox)
        self.errors = 0
        self.failures: list[str] = []
        self.checked = 0

    def _one_frame(self) -> bytes:
        k = self.kind
        return frame(encode_request_header(k.api_key, k.version, 0, CLIENT_ID) + k.body)

    def run(self) -> dict[str, Any]:
        args = self.args
        interval = 1e9 / args.rate
        start = time.perf_counter_ns() + 50_000_000
        window_start = start + int(args.warmup * 1e9)
        total = int((args.warmup + args.duration) * args.rate)
        counted_from = int(args.warmup * args.rate)
        conns = self.conns
        n_conns = len(conns)
        i = 0
        drain_deadline = start + int((args.warmup + args.duration + _DRAIN_S) * 1e9)
        while True:
            now = time.perf_counter_ns()
            # Everything due by now goes out now, late or not: the schedule never waits for answers.
            due_any = False
            while i < total:
                due = start + int(i * interval)
                if due > now:
                    break
                conn = conns[i % n_conns]
                conn.out.append(conn.frames[conn.next_id])
                conn.next_id = (conn.next_id + 1) % _IDS
                conn.intended.append(due if i >= counted_from else -due)  # negative: warm-up, not counted
                if i >= counted_from:
                    if i == counted_from:
                        _mark("window_start")
                    self.send_lag.append(now - due)
                i += 1
                if i == total:
                    _mark("window_end")
                due_any = True
            if due_any:
                for conn in conns:
                    if conn.out:
                        self._flush(conn)
            outstanding = sum(len(c.intended) for c in conns)
            if i >= total and outstanding == 0:
                break
            if now > drain_deadline:
                break
            timeout = max(0.0, (start + int(i * interval) - now) / 1e9) if i < total else 0.5
            writers = [c for c in conns if c.out]
            readable, writable, _ = select.select(conns, writers, [], timeout)
            for conn in writable:
                self._flush(conn)
            for conn in readable:
                self._read(conn)
        # Answers that never came count at least as late as now: a path that cannot keep up shows it.
        missing = 0
        now = time.perf_counter_ns()
        for conn in conns:
            for intended in conn.intended:
                if intended >= 0:
                    self.from_intended.append(now - intended)
                    missing += 1
        seconds = (total - counted_from) / args.rate
        return {
            "rate": args.rate,
            "connections": n_conns,
            "frame_bytes": self.frame_bytes,
            "counted": len(self.from_intended),
            "window_s": seconds,
            "achieved_per_s": round((len(self.from_intended) - missing) / seconds, 1),
            "missing": missing,
            "errors": self.errors,
            "closed_early": 0,
            "failures": self.failures[:5],
            "checked": self.checked,
            "latency_us": _summary(self.from_intended),
            "latency_from_send_us": _summary(self.from_sent),
            "send_lag_us": _summary(self.send_lag),
            "window_start_ns_from_start": window_start - start,
        }

    def _flush(self, conn: _Connection) -> None:
        """Write what is due, without copying the backlog (a path that falls behind must not make the
        generator slower): gathered writes on plain sockets, bounded joins on TLS ones."""
        out, sock = conn.out, conn.sock
        while out:
            pieces = list(itertools.islice(out, _GATHER))
            try:
                if isinstance(sock, ssl.SSLSocket):
                    written = sock.send(b"".join(pieces))
                else:
                    written = sock.sendmsg(pieces)
            except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                return
            attempted = sum(len(p) for p in pieces)
            now = time.perf_counter_ns()
            left = written
            while left:
                first = out[0]
                if len(first) <= left:
                    left -= len(first)
                    out.popleft()
                    conn.sent.append(now)
                else:
                    out[0] = memoryview(first)[left:]
                    left = 0
            if written < attempted:
                return

    def _read(self, conn: _Connection) -> None:
        sock = conn.sock
        while True:
            try:
                n = sock.recv_into(self._inbox_view)
            except (BlockingIOError, ssl.SSLWantReadError):
                return
            if not n:
                raise RuntimeError("the server closed a connection")
            now = time.perf_counter_ns()
            self._answers(conn, self._inbox_view[:n], now)
            # A short read emptied the socket; TLS may still hold decrypted bytes, which select cannot see.
            if n < _READ and not (isinstance(sock, ssl.SSLSocket) and sock.pending()):
                return

    def _answers(self, conn: _Connection, data: memoryview, now: int) -> None:
        buffer = conn.buffer
        buffer += data
        pos, end = 0, len(buffer)
        while end - pos >= 4:
            size = int.from_bytes(buffer[pos : pos + 4], "big")
            if end - pos - 4 < size:
                break
            if conn.answered % self.args.check_every == 0:
                self._check(bytes(buffer[pos : pos + 4 + size]))
            conn.answered += 1
            intended = conn.intended.popleft()
            sent = conn.sent.popleft() if conn.sent else now
            if intended >= 0:
                self.from_intended.append(now - intended)
                self.from_sent.append(max(0, now - sent))
            pos += 4 + size
        del buffer[:pos]

    def _check(self, response: bytes) -> None:
        kind = self.kind
        self.checked += 1
        try:
            offset = 4 + response_header_size(kind.api_key, kind.version, response)
            error = kind.check(response[offset:])
        except Exception as exc:  # an undecodable answer is a failed run, not a crash
            error = -1
            self.failures.append(f"undecodable answer: {exc!r}")
        if error:
            self.errors += 1
            if len(self.failures) < 5:
                self.failures.append(f"error code {error}")

    def close(self) -> None:
        for conn in self.conns:
            conn.sock.close()


def _mark(event: str) -> None:
    """Tell the harness (reading our stdout) that the counted window opens or closes (when its first and
    last requests are due), so it can read the CPU clocks of the processes under test then."""
    print(json.dumps({"event": event}), flush=True)


def _summary(samples: array) -> dict[str, float]:
    h = LogLinearHistogram()
    h.record_all(samples)
    out = {f"p{p:g}": round(h.percentile(p) / 1000, 1) for p in PERCENTILES}
    out["max"] = round(max(h.max, 0) / 1000, 1)
    out["mean"] = round(h.mean / 1000, 1)
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--tls-ca", help="connect with TLS, trusting this CA file (server name: localhost)")
    p.add_argument("--rate", type=float, required=True, help="requests per second, all connections together")
    p.add_argument("--connections", type=int, default=4)
    p.add_argument("--topic", default="latency")
    p.add_argument("--partition", type=int, default=0)
    p.add_argument("--record-bytes", type=int, default=1024)
    p.add_argument("--records", type=int, default=16, help="records per Produce request (one batch)")
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--check-every", type=int, default=1000, help="decode every Nth answer per connection")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    load = OpenLoop(args)
    try:
        result = load.run()
    finally:
        load.close()
    print(json.dumps(result), flush=True)
    return 0 if not result["errors"] and not result["missing"] else 1


if __name__ == "__main__":
    sys.exit(main())
