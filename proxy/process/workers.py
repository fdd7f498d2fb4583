"""`sluice run --workers N`: N proxy processes on the same listeners, one per core, sharing quotas.

One Python process uses one core. With `--workers N` the command forks N workers before any event loop
exists; each is a whole proxy that binds the bootstrap and broker ports with SO_REUSEPORT, so the kernel
spreads client connections over them. They hold one quota between them exactly as a fleet of separate
processes does: through the usage topic (`fleet.enabled`, docs/fleet.md), which is why N > 1 with quotas
configured requires it. Worker i serves its metrics on the metrics port + i (a scrape must know whose
numbers it reads), and has its own instance id (the default one ends in its pid).

The parent only supervises: SIGTERM or SIGINT is passed to every worker and the parent exits once they
have, with the worst exit code. A worker that dies on its own is started again after a pause, unless it
failed on its configuration (exit 2, which stops them all) or keeps dying (5 times in a minute).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import time
from collections.abc import Callable

from sluice.config.errors import ConfigError
from sluice.config.model import HostPort, ProxyConfig

from ..observability.log import get_logger

_log = get_logger("sluice.workers")
EXIT_CONFIG_ERROR = 2
RESTART_PAUSE_S = 1.0
MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0


def check_workers(config: ProxyConfig, workers: int) -> None:
    """ConfigError when N workers could not hold the configured quotas together."""
    if workers < 1:
        raise ConfigError("--workers", workers, "a number of processes, at least 1")
    if workers > 1 and config.quota.rules and not config.fleet.enabled:
        raise ConfigError(
            "fleet.enabled",
            False,
            f"true (with usage.enabled) for --workers {workers}: workers share quotas through the usage "
            f"topic; without it each would enforce every quota on its own ({workers} x the quota)",
        )
    if workers > 1 and config.metrics_listen is not None and config.metrics_listen.port + workers - 1 > 65535:
        raise ConfigError("metrics.listen", str(config.metrics_listen), "a port with room for one per worker")


def worker_config(config: ProxyConfig, index: int) -> ProxyConfig:
    """Worker `index`'s configuration: its own metrics port, everything else shared."""
    metrics = config.metrics_listen
    if metrics is None or index == 0:
        return config
    return dataclasses.replace(config, metrics_listen=HostPort(metrics.host, metrics.port + index))


def run_workers(config: ProxyConfig, workers: int, serve: Callable[[ProxyConfig], int]) -> int:
    """Fork `workers` processes running `serve(worker_config)` with SO_REUSEPORT; supervise until done."""
    children: dict[int, int] = {}  # pid -> worker index
    restarts: list[float] = []
    stopping = False
    worst = 0

    def spawn(index: int) -> None:
        pid = os.fork()
        if pid == 0:  # the worker
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            code = 1
            try:
                code = serve(worker_config(config, index))
            finally:
                os._exit(code)
        children[pid] = index
        _log.info("worker_started", worker=index, pid=pid)

    def stop_all(signum: int = signal.SIGTERM, _frame: object = None) -> None:
        nonlocal stopping
        stopping = True
        for pid in list(children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop_all)
    signal.signal(signal.SIGINT, stop_all)
    for index in range(workers):
        spawn(index)
    while children:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        if pid not in children:  # not one of the workers
            continue
        index = children.pop(pid)
        code = os.waitstatus_to_exitcode(status)
        worst = max(worst, code if code >= 0 else 1)
        if stopping:
            continue
        _log.error("worker_exited", worker=index, pid=pid, code=code)
        now = time.monotonic()
        restarts[:] = [t for t in restarts if now - t < RESTART_WINDOW_S]
        if code == EXIT_CONFIG_ERROR or len(restarts) >= MAX_RESTARTS:
            stop_all()
            continue
        restarts.append(now)
        time.sleep(RESTART_PAUSE_S)
        if not stopping:
            spawn(index)
    return worst
