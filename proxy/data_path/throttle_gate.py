"""ThrottleGate: how one client connection is held back once a quota says so.

Two behaviours, both on a single timer per connection:

* **Mute** (KIP-219, spec 2.8): the response goes out at once; the client's socket is not read and its
  requests are not forwarded until both the throttle deadline has passed and that response has been fully
  written. A client that ignores `throttle_time_ms` (librdkafka) is held all the same.
* **Delay** (pre-KIP-219, spec 2.9): the response itself is held until its deadline; responses behind it
  wait too, so they still leave in request order. The connection stays muted until the held response is
  sent, as a 1.x broker kept it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from .flow import ReadPauses

if TYPE_CHECKING:
    from ..filter_api.contract import Frame

MUTE = "mute"
# How soon to look again when the deadline has passed but a throttled response has not fully left yet;
# doubled each time up to the cap, so a client that stopped reading does not cost 200 wake-ups a second.
_FLUSH_POLL_S = 0.005
_FLUSH_POLL_MAX_S = 1.0


class ThrottleGate:
    __slots__ = (
        "_deadline",
        "_loop",
        "_on_mute_change",
        "_on_unmute",
        "_pauses",
        "_poll_s",
        "_responses_pending",
        "_timer",
        "_timer_at",
        "_to_client",
        "_transport",
        "held_responses",
        "muted",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        transport: asyncio.Transport,
        to_client: Callable[[list[Frame]], None],
        pauses: ReadPauses,
        on_unmute: Callable[[], None],
        on_mute_change: Callable[[int], None],
    ) -> None:
        self._loop = loop
        self._transport = transport  # read only: whether a throttled response has fully left
        self._to_client = to_client
        self._pauses = pauses
        self._on_unmute = on_unmute
        self._on_mute_change = on_mute_change
        self._deadline = 0.0
        # Responses held back, with when each may leave, in request order. The connection reads it (any
        # held, a response it sends queues behind them) for every response: a plain attribute, not a
        # property; only the gate changes it.
        self.held_responses: deque[tuple[float, Frame]] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._poll_s = _FLUSH_POLL_S
        # Throttled requests whose responses have not been sent yet: Kafka unmutes only after they have.
        self._responses_pending = 0
        self.muted = False

    # ---- mute ----------------------------------------------------------------------------------

    def mute_for(self, throttle_ms: int) -> None:
        """Mute from now until `throttle_ms` has passed and every response written so far has left."""
        if throttle_ms <= 0:
            return
        deadline = self._loop.time() + throttle_ms / 1000.0
        if deadline > self._deadline:
            self._deadline = deadline
        if not self.muted:
            self.muted = True
            self._pauses.add(MUTE)
            self._on_mute_change(+1)
        self._wake_at(self._deadline)

    def expect_response(self) -> None:
        """A throttled request went upstream: stay muted at least until its response has been sent."""
        self._responses_pending += 1

    def response_sent(self) -> None:
        self._responses_pending = max(0, self._responses_pending - 1)
        if self.muted and self._responses_pending == 0 and self._loop.time() >= self._deadline:
            self._wake_at(self._loop.time())

    def remaining_ms(self) -> int:
        if not self.muted:
            return 0
        return max(0, round((self._deadline - self._loop.time()) * 1000))

    def _unmute(self) -> None:
        self.muted = False
        self._pauses.discard(MUTE)
        self._on_mute_change(-1)
        self._on_unmute()

    # ---- delay ---------------------------------------------------------------------------------

    def hold_response(self, frame: Frame, delay_ms: int) -> None:
        """Send `frame` after `delay_ms` (0: as soon as the responses ahead of it have gone)."""
        release_at = self._loop.time() + delay_ms / 1000.0 if delay_ms > 0 else 0.0
        self.held_responses.append((release_at, frame))
        if delay_ms > 0:
            self.mute_for(delay_ms)
        self._wake_at(max(self.held_responses[0][0], self._loop.time()))

    def flush_held(self) -> None:
        """Send every held response now (shutdown, or the broker went away: an answer beats a delay)."""
        self._release_due_responses(float("inf"))

    def _release_due_responses(self, now: float) -> None:
        due: list[Frame] = []
        while self.held_responses and self.held_responses[0][0] <= now:
            due.append(self.held_responses.popleft()[1])
        if due and not self._transport.is_closing():
            self._to_client(due)

    # ---- the one timer -------------------------------------------------------------------------

    def _wake_at(self, when: float) -> None:
        if self._timer is not None:
            if self._timer_at <= when:
                return
            self._timer.cancel()
        self._timer_at = when
        self._timer = self._loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        now = self._loop.time()
        self._release_due_responses(now)
        if self.held_responses:
            self._wake_at(self.held_responses[0][0])
        if not self.muted:
            return
        if now < self._deadline:
            self._wake_at(self._deadline)
        elif self.held_responses or self._responses_pending or self._transport.get_write_buffer_size() > 0:
            # The throttled response has not fully left yet: Kafka unmutes only after it has.
            self._wake_at(now + self._poll_s)
            self._poll_s = min(self._poll_s * 2, _FLUSH_POLL_MAX_S)
        else:
            self._poll_s = _FLUSH_POLL_S
            self._unmute()

    def close(self) -> None:
        """Stop the timer and forget held responses (flush_held first to send them)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.muted:
            self.muted = False
            self._on_mute_change(-1)
        self.held_responses.clear()
