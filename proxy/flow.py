"""Reading pauses with reasons, so one resume cannot undo another party's pause.

A client socket may be paused at once because its upstream is still connecting, because the upstream's
write buffer is full (back-pressure), because a throttle muted it, or because the proxy is shutting down.
Reading resumes only when every reason is gone.
"""

from __future__ import annotations

import asyncio


class ReadPauses:
    __slots__ = ("_reasons", "_transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._reasons: set[str] = set()

    @property
    def paused(self) -> bool:
        return bool(self._reasons)

    def add(self, reason: str) -> None:
        if not self._reasons and not self._transport.is_closing():
            self._transport.pause_reading()
        self._reasons.add(reason)

    def discard(self, reason: str) -> None:
        if reason not in self._reasons:
            return
        self._reasons.discard(reason)
        if not self._reasons and not self._transport.is_closing():
            self._transport.resume_reading()

    def __contains__(self, reason: str) -> bool:
        return reason in self._reasons
