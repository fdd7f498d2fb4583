"""Reading pauses with reasons, so one resume cannot undo another party's pause.

A client socket may be paused at once because its upstream is still connecting, because the upstream's
write buffer is full (back-pressure), because a throttle muted it, or because the proxy is shutting down.
Reading resumes only when every reason is gone.

While a request is passed through as it arrives, pausing for a mute, a deferral or shutdown would cut it
in half: the broker would hold a partial request until the pause ends. `hold_open` makes such reasons wait
for the end of that request (`frame_ended`); back-pressure still pauses at once, as in any relay.
"""

from __future__ import annotations

import asyncio


class ReadPauses:
    __slots__ = ("_at_once", "_reasons", "_transport", "_waiting")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._reasons: set[str] = set()
        # While held open: the reasons that still pause at once; the others wait in `_waiting`.
        self._at_once: frozenset[str] | None = None
        self._waiting: set[str] = set()

    @property
    def paused(self) -> bool:
        return bool(self._reasons)

    def add(self, reason: str) -> None:
        if self._at_once is not None and reason not in self._at_once:
            self._waiting.add(reason)
            return
        # Every new reason pauses (a no-op when paused already): uvloop may still be reading after an
        # earlier pause (data that came with the connection), and a later reason must stop it all the same.
        if reason not in self._reasons and not self._transport.is_closing():
            self._transport.pause_reading()
        self._reasons.add(reason)

    def discard(self, reason: str) -> None:
        self._waiting.discard(reason)
        if reason not in self._reasons:
            return
        self._reasons.discard(reason)
        if not self._reasons and not self._transport.is_closing():
            self._transport.resume_reading()

    def reassert(self) -> None:
        """Pause again if paused: uvloop ignores a pause made in `connection_made` and starts reading when
        it returns (call this just after, with `call_soon`)."""
        if self._reasons and not self._transport.is_closing():
            self._transport.pause_reading()

    def hold_open(self, at_once: frozenset[str]) -> None:
        """A request is being passed through: only `at_once` reasons pause reading until `frame_ended`."""
        self._at_once = at_once

    def frame_ended(self) -> None:
        """The request passed through has ended: the reasons that waited for it pause reading now."""
        self._at_once = None
        waiting, self._waiting = self._waiting, set()
        for reason in waiting:
            self.add(reason)

    def __contains__(self, reason: str) -> bool:
        return reason in self._reasons or reason in self._waiting
