"""What one connection may buffer of the requests still arriving (issue 14 item 2).

* Memory: a frame being assembled holds a reservation of its whole size in the proxy-wide
  `RequestMemory`; when it does not fit, reading this connection pauses (`memory`) until it does.
* Before authentication, when the brokers require SASL (`sasl.required`): frames over
  `sasl.max_receive_bytes` (512 KiB, Kafka's `sasl.server.max.receive.size`) are refused by the frame
  splitter's limit, and a frame that takes longer than `sasl.unauthenticated_frame_timeout_s` to arrive
  is refused when the time is up (not when the client leaves).

The connection calls `after_feed()` after every read; when nothing is buffered that costs two attribute
reads and a comparison.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sluice.config.identity_settings import SaslSettings
    from sluice.protocol.frames import FrameSplitter

    from .flow import ReadPauses
    from .request_memory import RequestMemory


class RequestGuard:
    __slots__ = (
        "_loop",
        "_max_frame_bytes",
        "_memory",
        "_on_slow",
        "_pauses",
        "_reserved",
        "_slow_timer",
        "_splitter",
        "_timeout_s",
        "_waiting",
        "_wanted",
        "authenticated",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        splitter: FrameSplitter,
        pauses: ReadPauses,
        memory: RequestMemory,
        sasl: SaslSettings | None,
        on_slow: Callable[[float], None],
    ) -> None:
        """`sasl`: the settings when the brokers require SASL and this connection has not authenticated
        yet (None otherwise). `on_slow(seconds)` refuses a frame that arrived too slowly."""
        self._loop = loop
        self._splitter = splitter
        self._pauses = pauses
        self._memory = memory
        self._on_slow = on_slow
        self._reserved = 0
        self._wanted = 0
        self._waiting = False
        self._slow_timer: asyncio.TimerHandle | None = None
        self._max_frame_bytes = splitter.max_frame_bytes
        self.authenticated = sasl is None
        self._timeout_s = 0.0
        if sasl is not None:
            splitter.max_frame_bytes = min(sasl.max_receive_bytes, splitter.max_frame_bytes)
            self._timeout_s = sasl.unauthenticated_frame_timeout_s

    def after_feed(self) -> None:
        splitter = self._splitter
        need = splitter.pending_frame_bytes
        if need != self._reserved or self._waiting:
            self._account(need)
        if not self.authenticated:
            if splitter.buffered_bytes or splitter.passing_through:
                if self._slow_timer is None:
                    self._slow_timer = self._loop.call_later(self._timeout_s, self._on_slow, self._timeout_s)
            elif self._slow_timer is not None:
                self._slow_timer.cancel()
                self._slow_timer = None

    def sasl_authenticated(self) -> None:
        """The broker accepted the client's SASL exchange: full-size frames, no frame deadline."""
        if self.authenticated:
            return
        self.authenticated = True
        self._splitter.max_frame_bytes = self._max_frame_bytes
        if self._slow_timer is not None:
            self._slow_timer.cancel()
            self._slow_timer = None

    def close(self) -> None:
        """The connection closed: give its reservation back and stop waiting."""
        if self._slow_timer is not None:
            self._slow_timer.cancel()
            self._slow_timer = None
        if self._waiting:
            self._memory.cancel(self)
            self._waiting = False
        if self._reserved:
            reserved, self._reserved = self._reserved, 0
            self._memory.release(reserved)

    def _account(self, need: int) -> None:
        memory = self._memory
        if self._waiting:
            memory.cancel(self)
            self._waiting = False
            self._pauses.discard("memory")
        if self._reserved:
            reserved, self._reserved = self._reserved, 0
            memory.release(reserved)
        if not need:
            return
        if memory.reserve(need):
            self._reserved = need
            return
        self._wanted = need
        self._waiting = True
        self._pauses.add("memory")
        memory.wait(self, need, self._granted)

    def _granted(self) -> None:
        self._waiting = False
        self._reserved = self._wanted
        self._pauses.discard("memory")
