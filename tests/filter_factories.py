"""A FilterFactory for tests: each connection's filter made from a filter class, with attributes the test
shares with it set on it (a future to wait on, an event to set), and whether it needs CPU time."""

from __future__ import annotations

from sluice.proxy.filter_api import Filter, FilterFactory


class Factory(FilterFactory):
    def __init__(self, cls: type[Filter], cpu: bool = False, **shared: object) -> None:
        self.filter_class = cls  # type: ignore[misc]
        self._cpu = cpu
        self._shared = shared

    def create(self, conn):  # type: ignore[no-untyped-def]
        made = self.filter_class(conn)
        for name, value in self._shared.items():
            setattr(made, name, value)
        return made

    def needs_cpu_time(self) -> bool:
        return self._cpu
