"""Background services of the proxy, each with a start/stop contract, run by `SluiceServer`.

A service is anything with a `name`, `async start()` and `async stop()`: broker discovery, the idle-sensor
sweep, the metrics endpoint, the proxy's own Kafka client (and, on top of it, the quota store follower and
the usage publisher). `Services` starts them in list order and stops them in the reverse order, so a
service may use any service listed before it (discovery uses the Kafka client) while it runs.

* `start()` returns once the service is ready to be used; a service with a loop of its own starts a task
  and returns (it must not wait for the cluster: an unreachable cluster never stops the proxy starting).
* A `start()` that raises stops start-up: that service is stopped too (it may have half started: bound a
  socket, started a task), then the services already started, in reverse; ServiceStartError names the
  service and the cause.
* `stop()` is called once for each service whose start() was called, even if another one's stop failed
  or hung; each gets `stop_timeout_s`, then the next one stops anyway. A failure to stop is logged, not
  raised. A service that finishes starting after stopping began is stopped as soon as it has.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from .observability.log import get_logger

_log = get_logger("sluice.services")
DEFAULT_STOP_TIMEOUT_S = 10.0


@runtime_checkable
class Service(Protocol):
    """`stop()` must be safe on a service whose `start()` raised part-way: it releases whatever start()
    got as far as acquiring, and nothing else."""

    name: str

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class ServiceStartError(Exception):
    """A service could not start; start-up stopped. `cause` is what its start() raised."""

    def __init__(self, name: str, cause: BaseException) -> None:
        self.name = name
        self.cause = cause
        super().__init__(f"service {name} failed to start: {cause or type(cause).__name__}")


class Services:
    """Starts services in order, stops the started ones in reverse. Each method runs at most once."""

    def __init__(self, services: Sequence[Service], stop_timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> None:
        names = [service.name for service in services]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"service names must be unique: {', '.join(duplicates)}")
        self._services = list(services)
        self._started: list[Service] = []
        self._stop_timeout_s = stop_timeout_s
        self._stopping = False

    @property
    def names(self) -> list[str]:
        return [service.name for service in self._services]

    @property
    def running(self) -> list[str]:
        return [service.name for service in self._started]

    def get(self, name: str) -> Service | None:
        return next((service for service in self._services if service.name == name), None)

    async def start(self) -> None:
        for service in self._services:
            if self._stopping:
                return  # stop() was called while an earlier service started: start nothing more
            try:
                await service.start()
            except Exception as exc:
                _log.error("service_start_failed", service=service.name, error=str(exc) or type(exc).__name__)
                await self._stop_one(service)  # it may have half started (a task, a socket)
                await self.stop()
                raise ServiceStartError(service.name, exc) from exc
            if self._stopping:
                await self._stop_one(service)  # stop() ran while it started, too early to stop it
                return
            self._started.append(service)
            _log.debug("service_started", service=service.name)

    async def stop(self) -> None:
        self._stopping = True
        while self._started:
            await self._stop_one(self._started.pop())

    async def _stop_one(self, service: Service) -> None:
        try:
            await asyncio.wait_for(service.stop(), self._stop_timeout_s)
        except TimeoutError:
            _log.error("service_stop_timeout", service=service.name, timeout_s=self._stop_timeout_s)
        except Exception as exc:
            _log.error("service_stop_failed", service=service.name, error=str(exc) or type(exc).__name__)
        else:
            _log.debug("service_stopped", service=service.name)


async def cancel_and_wait(tasks: list[asyncio.Task[None]]) -> None:
    """A service's stop(): cancel its background tasks, then wait until each has really ended."""
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
