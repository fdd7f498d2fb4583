"""A test double's own asyncio loop, in a daemon thread, so synchronous tests and client libraries can use
the double while it serves."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class LoopThread(Generic[T]):
    """`start()` runs `open_()` on a fresh loop in a new thread and returns its result once it has run (or
    raises what it raised); the loop then serves until `stop()`, which runs `close()` on it, ends the loop
    and joins the thread. Stopping twice, or before starting, does nothing."""

    def __init__(
        self,
        name: str,
        open_: Callable[[], Awaitable[T]],
        close: Callable[[], Awaitable[None]],
        start_timeout_s: float = 10.0,
        stop_timeout_s: float = 10.0,
    ) -> None:
        self._open = open_
        self._close = close
        self._start_timeout_s = start_timeout_s
        self._stop_timeout_s = stop_timeout_s
        self._opened: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> T:
        self._thread.start()
        try:
            return self._opened.result(self._start_timeout_s)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        loop = self._loop
        if loop is not None and self._thread.is_alive():
            # Also stops a loop that has yet to enter run_forever.
            loop.call_soon_threadsafe(loop.stop)
        if self._thread.is_alive():
            self._thread.join(self._stop_timeout_s)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        try:
            opened = loop.run_until_complete(self._open())
        except BaseException as exc:
            loop.close()
            self._opened.set_exception(exc)
            return
        self._loop = loop
        self._opened.set_result(opened)
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(self._close())
            loop.close()
