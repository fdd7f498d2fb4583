"""Fixtures of the proxy's tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sluice.proxy.data_path.filter_chain import FilterChain, runs_tables
from sluice.proxy.data_path.filter_runs import FilterRunsInPython
from sluice.proxy.filter_api.contract import ConnectionInfo, Filter


class ConnectionFiltersInPython(FilterRunsInPython):
    """filter_chain.ConnectionFilters on the Python runs (the reference of the compiled ones)."""

    __slots__ = ("filters", "may_stream")

    def __init__(self, chain: FilterChain, filters: list[Filter], mute: Callable[[int], None]) -> None:
        super().__init__(mute, *runs_tables(chain, filters))
        self.filters = tuple(filters)
        self.may_stream = chain.may_stream


@pytest.fixture(params=["compiled runs", "python runs"])
def both_filter_runs(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """A test of the chain runs on each twin of FilterRuns (tests/proxy/test_filter_runs.py)."""
    if request.param == "python runs":

        def for_connection(
            chain: FilterChain, conn: ConnectionInfo, mute: Callable[[int], None]
        ) -> ConnectionFiltersInPython:
            return ConnectionFiltersInPython(chain, [f.create(conn) for f in chain.factories], mute)

        monkeypatch.setattr(FilterChain, "for_connection", for_connection)
    return str(request.param)
