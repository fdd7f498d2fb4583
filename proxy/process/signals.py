"""What each signal does to a running proxy: nothing but SIGKILL ends it without a drain, so a client
never loses a request an operator's signal could have let finish.

* SIGTERM, SIGINT: stop — close the listeners, let forwarded requests get their answers, exit 0.
* SIGHUP: reload the configuration (`SluiceServer.request_reload`: the quotas apply live).
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
import signal
from collections.abc import Callable
from functools import partial

from ..observability.log import get_logger

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
        add(sig, partial(_log.warning, "signal_ignored", signal=sig.name))

    def remove() -> None:
        for sig in installed:
            loop.remove_signal_handler(sig)

    return remove


def _logged(sig: signal.Signals, action: Callable[[], None]) -> Callable[[], None]:
    def handler() -> None:
        _log.info("signal_received", signal=sig.name, action="drain and stop")
        action()

    return handler
