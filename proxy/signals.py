"""What each signal does to a running proxy: nothing but SIGKILL ends it without a drain (issue 14 item 5).

* SIGTERM, SIGINT: stop — close the listeners, let forwarded requests get their answers, exit 0.
* SIGHUP: reload the configuration, through the handlers registered on the server (issue 11's "Quotas
  managed the Kafka way" adds one); with none registered it is logged as not implemented and ignored.
* SIGQUIT: a status line in the log, and carry on (the JVM prints a thread dump on `kill -3` and carries
  on, so a Kafka operator expects it to be harmless).
* SIGUSR1, SIGUSR2 and the other signals whose default is to terminate (SIGALRM, SIGVTALRM, SIGPROF,
  SIGIO, SIGPWR, SIGXCPU, SIGXFSZ, SIGSTKFLT): logged and ignored. SIGPIPE stays ignored (Python's
  default); a write to a closed socket is an OSError on that connection only.

Fault signals (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGSYS, SIGTRAP) report a crash of the process
itself and keep their default: catching one would resume the faulting code.
"""

from __future__ import annotations

import asyncio
import inspect
import signal
from collections.abc import Callable
from typing import Any

from .log import get_logger

_log = get_logger("sluice.signals")

STOP_SIGNALS = ("SIGTERM", "SIGINT")
RELOAD_SIGNAL = "SIGHUP"
STATUS_SIGNAL = "SIGQUIT"
IGNORED_SIGNALS = (
    "SIGUSR1",
    "SIGUSR2",
    "SIGALRM",
    "SIGVTALRM",
    "SIGPROF",
    "SIGIO",
    "SIGPWR",
    "SIGXCPU",
    "SIGXFSZ",
    "SIGSTKFLT",
)


def _signals(names: tuple[str, ...]) -> list[signal.Signals]:
    # Not every platform has every signal (SIGPWR and SIGSTKFLT are Linux's).
    return [sig for sig in (getattr(signal, name, None) for name in names) if sig is not None]


def install_signal_handlers(
    loop: asyncio.AbstractEventLoop,
    stop: Callable[[], None],
    reload: Callable[[], None],
    status: Callable[[], dict[str, object]],
) -> Callable[[], None]:
    """Route every signal listed above to its action; return the function that removes them again."""
    installed: list[signal.Signals] = []

    def add(sig: signal.Signals, handler: Callable[[], None]) -> None:
        loop.add_signal_handler(sig, handler)
        installed.append(sig)

    for sig in _signals(STOP_SIGNALS):
        add(sig, _logged(sig, stop))
    for sig in _signals((RELOAD_SIGNAL,)):
        add(sig, reload)
    for sig in _signals((STATUS_SIGNAL,)):
        add(sig, lambda: _log.info("status", signal=STATUS_SIGNAL, **status()))
    for sig in _signals(IGNORED_SIGNALS):
        add(sig, lambda name=sig.name: _log.warning("signal_ignored", signal=name))

    def remove() -> None:
        for sig in installed:
            loop.remove_signal_handler(sig)

    return remove


def _logged(sig: signal.Signals, action: Callable[[], None]) -> Callable[[], None]:
    def handler() -> None:
        _log.info("signal_received", signal=sig.name, action="drain and stop")
        action()

    return handler


class ReloadHandlers:
    """What SIGHUP runs. Each handler may return an awaitable; a failing one is logged, never fatal."""

    def __init__(self) -> None:
        self._handlers: list[Callable[[], object]] = []
        self._running: set[asyncio.Future[Any]] = set()

    def add(self, handler: Callable[[], object]) -> None:
        self._handlers.append(handler)

    def run(self) -> None:
        if not self._handlers:
            _log.warning(
                "reload_requested",
                signal=RELOAD_SIGNAL,
                outcome="configuration reload is not implemented yet; the running configuration stays",
            )
            return
        _log.info("reload_requested", signal=RELOAD_SIGNAL, handlers=len(self._handlers))
        for handler in list(self._handlers):
            try:
                result = handler()
            except Exception as exc:
                _reload_failed(exc)
                continue
            if inspect.isawaitable(result):
                task = asyncio.ensure_future(result)
                self._running.add(task)
                task.add_done_callback(self._done)

    def _done(self, task: asyncio.Future[Any]) -> None:
        self._running.discard(task)
        if not task.cancelled() and task.exception() is not None:
            _reload_failed(task.exception())  # type: ignore[arg-type]


def _reload_failed(exc: BaseException) -> None:
    # The type and the key only: a reload error's text could quote a configured secret.
    _log.error("reload_failed", error_type=type(exc).__name__, key=getattr(exc, "key", None))
