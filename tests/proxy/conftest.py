"""Fixtures of the proxy's tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sluice.proxy.data_path import request_pipeline
from sluice.proxy.data_path.filter_chain import FilterChain, runs_tables
from sluice.proxy.data_path.filter_runs import FilterRunsInPython
from sluice.proxy.data_path.request_pipeline import RequestPipeline
from sluice.proxy.filter_api.contract import ConnectionInfo, Filter


class ConnectionFiltersInPython(FilterRunsInPython):
    """filter_chain.ConnectionFilters on the Python runs (the reference of the compiled ones)."""

    __slots__ = ("filters", "may_stream")

    def __init__(self, chain: FilterChain, filters: list[Filter], mute: Callable[[int], None]) -> None:
        super().__init__(mute, *runs_tables(chain, filters))
        self.filters = tuple(filters)
        self.may_stream = chain.may_stream


@pytest.fixture(params=["compiled runs", "python runs"])
def both_runs(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """A test of the chain or the pipeline runs on each twin of their hot loops: the compiled ones, and the
    Python ones they translate (tests/proxy/test_filter_runs.py, tests/proxy/test_pipeline_runs.py)."""
    if request.param == "python runs":

        def for_connection(
            chain: FilterChain, conn: ConnectionInfo, mute: Callable[[int], None]
        ) -> ConnectionFiltersInPython:
            return ConnectionFiltersInPython(chain, [f.create(conn) for f in chain.factories], mute)

        monkeypatch.setattr(FilterChain, "for_connection", for_connection)
        monkeypatch.setattr(request_pipeline, "_forward_plain", RequestPipeline._forward_plain_in_python)
        monkeypatch.setattr(request_pipeline, "_answers_plain", RequestPipeline._answers_plain_in_python)
    return str(request.param)
