"""When each Produce on one connection was forwarded, until its answer is matched to it (its round trip).

Answers come in request order, so the pending entries form a queue: an answer takes the entries before its
own off as well, which is where a Produce with acks=0 (which gets no answer) leaves. At most `MAX_PENDING`
are kept, so a connection that only sends acks=0 keeps nothing more. Sans-IO: the caller passes the time.
"""

from __future__ import annotations

from collections import deque

MAX_PENDING = 256


class RoundTripClock:
    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending: deque[tuple[int, int]] = deque(maxlen=MAX_PENDING)  # (correlation id, sent ms)

    def sent(self, correlation_id: int, now_ms: int) -> None:
        self._pending.append((correlation_id, now_ms))

    def answered(self, correlation_id: int) -> int | None:
        """When the request answered now was sent, or None if it was not timed."""
        pending = self._pending
        while pending:
            sent_id, sent_ms = pending.popleft()
            if sent_id == correlation_id:
                return sent_ms
        return None
