"""What one connection may buffer and send of the requests still arriving.

* Memory: a frame being assembled holds a reservation of its whole size in the proxy-wide
  `RequestMemory`; when it does not fit, reading this connection pauses (`memory`) until it does.
* Before a connection has proven itself, whatever the brokers' security protocol: its frames may not
  exceed `sasl.max_receive_bytes` (512 KiB, Kafka's `sasl.server.max.receive.size`), refused when their
  length is read, and a frame that takes longer than `sasl.unauthenticated_frame_timeout_s` to arrive is
  refused when the time is up (not when the client leaves). A connection proves itself when the broker
  accepts its SASL exchange (with `sasl.required`), or else when the broker answers its first request
  (every Kafka client sends ApiVersions first), or at once with a TLS client certificate. A PLAINTEXT
  broker reads any request up to `socket.request.max.bytes` (100 MiB) from anyone: eight connections
  each sending the start of a 95 MiB request, never having asked anything, took two brokers down.
* Always: a frame over the cluster's limit (`max_frame_bytes`, or the brokers' smaller
  `socket.request.max.bytes`: proxy/cluster/broker_limits.py) is refused when its length is read.
* A request that counts toward its broker's load (proxy/data_path/broker_load.py) is read only once the
  broker has room for it (reserved when its length is read): until then the connection is not read
  (`broker`), so the proxy does not hold requests the brokers cannot take either.

The connection calls `after_feed()` after every read; when nothing is buffered that costs two attribute
reads and a comparison.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from .broker_load import COUNTED_MIN_BYTES

if TYPE_CHECKING:
    from sluice.config.identity_settings import SaslSettings
    from sluice.protocol.frames import BadFramePrefix, FrameSplitter

    from .broker_load import LoadShare
    from .flow import ReadPauses
    from .request_memory import RequestMemory


class Refusal(NamedTuple):
    """Why a frame's length was refused: the reason logged, and the limit it broke, by name."""

    reason: str
    limit: int
    limit_name: str


class RequestGuard:
    __slots__ = (
        "_broker_turn",
        "_limit_name",
        "_loop",
        "_max_frame_bytes",
        "_memory",
        "_on_slow",
        "_pauses",
        "_reserved",
        "_slow_timer",
        "_splitter",
        "_timeout_s",
        "_unproven_max",
        "_waiting",
        "_wanted",
        "awaiting_answer",
        "load",
        "proven",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        splitter: FrameSplitter,
        pauses: ReadPauses,
        memory: RequestMemory,
        unproven: SaslSettings | None,
        on_slow: Callable[[float], None],
        *,
        proven_by_sasl: bool = True,
        limit_name: str = "max_frame_bytes",
    ) -> None:
        """`unproven`: the limits until this connection proves itself (None: it has, by a TLS client
        certificate); `proven_by_sasl`: it does so by a SASL exchange (sasl.required), else by the broker's
        first answer. `limit_name` names the splitter's own limit in a refusal. `on_slow(seconds)` refuses a
        frame that arrived too slowly."""
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
        self._limit_name = limit_name
        # Its share of its broker's load, once connected (proxy/data_path/broker_load.py): a counted request
        # is read only once its broker has room for it; until then this connection is not read (`broker`).
        self.load: LoadShare | None = None
        self._broker_turn: asyncio.Future[None] | None = None
        self.proven = unproven is None
        self.awaiting_answer = not self.proven and not proven_by_sasl
        self._timeout_s = 0.0
        self._unproven_max = 0
        if unproven is not None:
            self._unproven_max = min(unproven.max_receive_bytes, splitter.max_frame_bytes)
            splitter.max_frame_bytes = self._unproven_max
            self._timeout_s = unproven.unauthenticated_frame_timeout_s

    def after_feed(self) -> None:
        splitter = self._splitter
        need = splitter.pending_frame_bytes
        if need >= COUNTED_MIN_BYTES and self.load is not None and not self._room(need):
            return  # not read until its broker has room for it; its memory is reserved then
        if need != self._reserved or self._waiting:
            self._account(need)
        if not self.proven:
            if splitter.buffered_bytes or splitter.passing_through:
                if self._slow_timer is None:
                    self._slow_timer = self._loop.call_later(self._timeout_s, self._on_slow, self._timeout_s)
            elif self._slow_timer is not None:
                self._slow_timer.cancel()
                self._slow_timer = None

    def sasl_authenticated(self) -> None:
        """The broker accepted the client's SASL exchange: full-size frames, no frame deadline."""
        self._prove()

    def broker_answered(self) -> None:
        """The broker answered this connection's first request (without sasl.required): it speaks Kafka."""
        self._prove()

    def refusal(self, exc: BadFramePrefix) -> Refusal:
        """What a frame refused for its length broke: the limit before proof, or the cluster's."""
        if not self.proven and exc.length <= self._max_frame_bytes:
            return Refusal("unauthenticated_frame_too_large", self._unproven_max, "sasl.max_receive_bytes")
        return Refusal(exc.reason, self._max_frame_bytes, self._limit_name)

    def _room(self, need: int) -> bool:
        """Whether the frame being read has room at its broker (reserved for it); else wait for it."""
        load = self.load
        assert load is not None
        if self._broker_turn is not None or load.waiting:
            return False  # already waiting (this frame, or a request before it: reading is paused)
        if load.room_for(need):
            return True
        self._pauses.add("broker")
        self._broker_turn = turn = load.wait(need)
        turn.add_done_callback(self._room_granted)
        return False

    def _room_granted(self, turn: asyncio.Future[None]) -> None:
        self._broker_turn = None
        if not turn.cancelled():
            self._pauses.discard("broker")

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

    def _prove(self) -> None:
        self.awaiting_answer = False
        if self.proven:
            return
        self.proven = True
        self._splitter.max_frame_bytes = self._max_frame_bytes
        if self._slow_timer is not None:
            self._slow_timer.cancel()
            self._slow_timer = None

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
