"""FilterRuns: one connection's runs of its filters over a request and over an answer, the base of every
connection's ConnectionFilters (proxy/data_path/filter_chain.py, which builds the routing tables).

Two translations of one thing: `FilterRunsInPython`, the reference, and the compiled type of
proxy/data_path/_filter_runs.c, its line-by-line translation, which every connection runs where this install
has it (`FilterRuns`; tests/proxy/test_filter_runs.py holds the two equal). Why compiled: these two loops run
for every request and every answer, and their own work in Python (~0.2 µs each way, beside the filters they
call) is a share of the hot path's Python that calling the filters from C does not add back
(docs/architecture.md, "Compiled readers").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from sluice.protocol.headers import RequestHeader

from ..filter_api.contract import (
    BEYOND_TABLE,
    TABLE_SIZE,
    Answer,
    Close,
    Defer,
    Filter,
    Forward,
    Frame,
    InFlight,
    Pending,
    RequestFrame,
    Respond,
    whole,
)

__all__ = ["ChainOutcome", "Deferred", "FilterGroups", "FilterRuns", "FilterRunsInPython"]

# The filters of one routing group, in chain order.
FilterGroups = tuple[tuple[Filter, ...], ...]


class Deferred(NamedTuple):
    """A request a filter deferred: where it resumes, and what the filters before it left."""

    ready: Pending  # the filter's Defer.ready, or room at its broker
    header: RequestHeader
    original: Frame  # the frame as the client sent it
    frame: Frame  # as the filters before the deferring one left it
    position: int  # the deferring filter's place among the request's filters
    throttle_ms: int


# What running the request filters comes to: an effect, with Defer made a Deferred (where to resume).
ChainOutcome = RequestFrame | Forward | Answer | Close | Deferred


class FilterRunsInPython:
    """The runs, given the routing tables: per API key (its slot, BEYOND_TABLE for keys outside the
    table), `*_groups[*_group[slot]]` are the filters to run. `mute(ms)` mutes the connection: applied at
    once, as each effect asks, so a later filter sees the connection as the earlier ones left it.
    Answers see `cpu_response_groups` instead where `cpu_adds_response_filters[slot]` is 1 and
    `cpu_needed()` says a filter needs the connection's CPU time now."""

    __slots__ = (
        "_cpu_adds_response_filters",
        "_cpu_needed",
        "_cpu_response_group",
        "_cpu_response_groups",
        "_mute",
        "_request_group",
        "_request_groups",
        "_response_group",
        "_response_groups",
    )

    def __init__(
        self,
        mute: Callable[[int], None],
        request_group: bytes,
        request_groups: FilterGroups,
        response_group: bytes,
        response_groups: FilterGroups,
        cpu_response_group: bytes,
        cpu_response_groups: FilterGroups,
        cpu_adds_response_filters: bytes,
        cpu_needed: Callable[[], object],
    ) -> None:
        self._mute = mute
        self._request_group = request_group
        self._request_groups = request_groups
        self._response_group = response_group
        self._response_groups = response_groups
        self._cpu_response_group = cpu_response_group
        self._cpu_response_groups = cpu_response_groups
        self._cpu_adds_response_filters = cpu_adds_response_filters
        self._cpu_needed = cpu_needed

    def on_request(
        self, header: RequestHeader, frame: RequestFrame, deferred: Deferred | None = None
    ) -> ChainOutcome:
        """Run the request filters (or, given `deferred`, go on from the filter that deferred it); the frame
        (or Forward with the throttle earned), an Answer (its throttle includes the earlier filters'), a
        Close, or a Deferred to resume later. One method for both, so the hot path makes one call."""
        key = header.api_key
        filters = self._request_groups[self._request_group[key if 0 <= key < TABLE_SIZE else BEYOND_TABLE]]
        if not filters:
            return frame
        original: RequestFrame = frame
        start, throttle = 0, 0
        if deferred is not None:
            original, frame, start, throttle = (
                deferred.original,
                deferred.frame,
                deferred.position,
                deferred.throttle_ms,
            )
        for f in filters[start:] if start else filters:
            out = f.on_request(header, frame)
            # The common case first, by exact type (the cheapest test): forwarded untouched.
            if type(out) is memoryview:
                frame = out
            elif isinstance(out, Forward):
                frame = out.frame
                if out.throttle_ms > 0:
                    self._mute(out.throttle_ms)
                    throttle = max(throttle, out.throttle_ms)
            elif isinstance(out, Answer):
                if out.throttle_ms > 0:
                    self._mute(out.throttle_ms)
                return out if out.throttle_ms >= throttle else out._replace(throttle_ms=throttle)
            elif isinstance(out, Defer):
                # (A request passing through cannot wait: only a whole frame is deferred.)
                return Deferred(
                    out.ready, header, whole(original), whole(frame), filters.index(f, start), throttle
                )
            elif isinstance(out, Close):
                return out
            else:  # bytes a filter rewrote
                frame = out
        return Forward(frame, throttle) if throttle > 0 else frame

    def on_response(self, request: InFlight, frame: Frame) -> Frame | Respond:
        """Run the response filters; the frame, or Respond with the longest delay asked for (mutes are
        applied as they are asked for)."""
        key = request.header.api_key
        if not 0 <= key < TABLE_SIZE:
            key = BEYOND_TABLE
        if self._cpu_adds_response_filters[key] and self._cpu_needed():
            filters = self._cpu_response_groups[self._cpu_response_group[key]]
        else:
            filters = self._response_groups[self._response_group[key]]
        delay = 0
        for f in filters:
            out = f.on_response(request, frame)
            if isinstance(out, Respond):
                frame = out.frame
                if out.mute_ms > 0:
                    self._mute(out.mute_ms)
                if out.delay_ms > delay:
                    delay = out.delay_ms
            else:
                frame = out
        return Respond(frame, delay) if delay > 0 else frame


if TYPE_CHECKING:  # the type checker reads the Python class; the compiled type has its methods
    FilterRuns = FilterRunsInPython
else:
    try:
        from sluice.proxy.data_path import _filter_runs
    except ImportError:  # built without a C compiler
        FilterRuns = FilterRunsInPython
    else:
        _filter_runs.bind(Forward, Answer, Close, Defer, Respond, Deferred, whole, TABLE_SIZE)
        _filter_runs.bind_fields(InFlight, RequestHeader)
        FilterRuns = _filter_runs.FilterRuns
