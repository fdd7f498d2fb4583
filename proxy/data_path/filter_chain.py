"""The filter chain: what every connection shares (`FilterChain`), and one connection's run of it
(`ConnectionFilters`, whose runs over a request and an answer are filter_runs.FilterRuns), routing each
frame only to the filters that asked for its API key.

Routing tables are lists indexed by API key, computed once per proxy as tuples of filter positions and
turned into tuples of one connection's filter instances when it opens; a frame whose API no filter wants
meets an empty tuple and is passed on as it is. Every key outside the table (negative, or beyond any API
Kafka defines) shares one more slot, `BEYOND_TABLE`: a filter that names it sees them all, so such a key
cannot slip past the filters that must see every request (the gate, which refuses it) or every response.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from sluice.protocol.api_vetting import vetted_max_versions

from ..filter_api.contract import (
    BEYOND_TABLE,
    EVERY_API_KEY,
    TABLE_SIZE,
    ChainVersions,
    ConnectionInfo,
    Filter,
    FilterFactory,
)
from .filter_runs import ChainOutcome, Deferred, FilterGroups, FilterRuns

__all__ = ["ChainOutcome", "ConnectionFilters", "Deferred", "FilterChain", "runs_tables"]

_Positions = tuple[int, ...]
# FilterRuns' routing tables (filter_runs.py): request, response and CPU response groups, then the CPU flags
# and check.
RunsTables = tuple[bytes, FilterGroups, bytes, FilterGroups, bytes, FilterGroups, bytes, Callable[[], object]]


def _never() -> bool:
    return False


class FilterChain:
    """The factories of one proxy, in chain order, and what they declare together."""

    __slots__ = (
        "_body_readers",
        "_by_request_key",
        "_by_response_key",
        "_cpu_adds_response_filters",
        "_cpu_response_key",
        "factories",
        "versions",
    )

    def __init__(self, factories: Sequence[FilterFactory]) -> None:
        self.factories: tuple[FilterFactory, ...] = tuple(factories)
        classes = [f.filter_class for f in self.factories]
        self._by_request_key = _index([c.request_api_keys for c in classes])
        self._by_response_key = _index([c.response_api_keys for c in classes])
        # Per API key, the factories whose filters may read the request's body; a request none of them
        # reads now may be passed through as it arrives. A factory that keeps FilterFactory's
        # reads_body_now always reads it, so that key never streams and is not asked about per request.
        self._body_readers: list[tuple[FilterFactory, ...] | None] = []
        request_groups = self._by_request_key
        for key in EVERY_API_KEY:
            positions = request_groups.groups[request_groups.group_of[key]]
            readers = tuple(self.factories[i] for i in positions if key not in classes[i].head_only_api_keys)
            always = any(type(f).reads_body_now is FilterFactory.reads_body_now for f in readers)
            self._body_readers.append(None if always else readers)
        # While a filter needs CPU time it sees every response (CPU is charged whatever the API).
        self._cpu_response_key = _index(
            [
                EVERY_API_KEY if _may_need_cpu(f) else c.response_api_keys
                for f, c in zip(self.factories, classes, strict=True)
            ]
        )
        # Per API key, 1 where that adds filters to its responses: only there is the live check asked
        # (the filters needing CPU time already read Produce and Fetch answers, which then skip it).
        responses, cpu_responses = self._by_response_key, self._cpu_response_key
        self._cpu_adds_response_filters = bytes(
            responses.groups[responses.group_of[key]] != cpu_responses.groups[cpu_responses.group_of[key]]
            for key in range(TABLE_SIZE + 1)
        )
        # The ApiVersions clamp: the lowest maximum any filter declares, per API.
        versions: dict[int, int] = {}
        for factory, cls in zip(self.factories, classes, strict=True):
            if cls is Filter and type(factory) is not FilterFactory:
                raise TypeError(f"{type(factory).__name__} does not name its filter_class")
            for key, version in cls.max_versions.items():
                versions[int(key)] = min(version, versions.get(int(key), version))
        # Per API, the newest version whose addresses a filter rewrites. Two filters rewriting the same API
        # could not both be right about what the other leaves (which of them rewrites which field, up to
        # which version): a chain that tried is refused, not resolved by taking one of them.
        rewrites: dict[int, int] = {}
        for cls in classes:
            for key, version in cls.rewrites_addresses.items():
                if int(key) in rewrites:
                    raise TypeError(f"two filters rewrite the broker addresses of api key {int(key)}")
                rewrites[int(key)] = version
        self.versions = ChainVersions(versions, rewrites, vetted_max_versions(rewrites))
        for factory in self.factories:
            factory.chain_built(self.versions)

    def may_stream(self, key: int) -> bool:
        """Whether no filter reads the body of a request of API `key` now (live: quotas come and go)."""
        readers = self._body_readers[key if 0 <= key < TABLE_SIZE else BEYOND_TABLE]
        return readers is not None and not any(f.reads_body_now(key) for f in readers)

    def cpu_time_needed(self) -> Callable[[], object]:
        """A cheap, live check: whether any filter needs the connection's CPU time right now (its result
        true or false)."""
        askers = [f.cpu_time_check() for f in self.factories if _may_need_cpu(f)]
        if not askers:
            return _never
        if len(askers) == 1:
            return askers[0]
        return lambda: any(ask() for ask in askers)

    def for_connection(self, conn: ConnectionInfo, mute: Callable[[int], None]) -> ConnectionFilters:
        """The connection's own filters; `mute(ms)` mutes it (what Forward, Answer and Respond ask for)."""
        return ConnectionFilters(self, [f.create(conn) for f in self.factories], mute)


def _may_need_cpu(factory: FilterFactory) -> bool:
    return type(factory).needs_cpu_time is not FilterFactory.needs_cpu_time


class _KeyTable(NamedTuple):
    """Per API key, the positions of the filters that want it, as an index into a short list of the
    distinct position sets: a connection then keeps one tuple of filters per distinct set (a handful),
    not one per API key (128 slots, three tables: 3 kB for every connection, idle or not)."""

    group_of: bytes  # API key (BEYOND_TABLE for the others) -> index into `groups`
    groups: tuple[_Positions, ...]


def _index(wanted: list[frozenset[int]]) -> _KeyTable:
    groups: dict[_Positions, int] = {}
    group_of = bytearray()
    for key in range(TABLE_SIZE + 1):
        at = tuple(i for i, keys in enumerate(wanted) if key in keys)
        group_of.append(groups.setdefault(at, len(groups)))
    return _KeyTable(bytes(group_of), tuple(groups))


def _instances(table: _KeyTable, filters: list[Filter]) -> FilterGroups:
    return tuple(tuple(filters[i] for i in at) for at in table.groups)


def runs_tables(chain: FilterChain, filters: list[Filter]) -> RunsTables:
    """FilterRuns' arguments after `mute` for one connection's `filters`: per API key,
    `request_groups[request_group[key]]` are the filters to run (the key -> group map is the chain's,
    shared; only the few distinct groups of filters are the connection's own), and alike for answers."""
    return (
        chain._by_request_key.group_of,
        _instances(chain._by_request_key, filters),
        chain._by_response_key.group_of,
        _instances(chain._by_response_key, filters),
        chain._cpu_response_key.group_of,
        _instances(chain._cpu_response_key, filters),
        chain._cpu_adds_response_filters,
        chain.cpu_time_needed(),
    )


class ConnectionFilters(FilterRuns):
    """One connection's filters, run in chain order (FilterRuns, with this chain's routing tables); the
    effects' mutes are applied at once, so a later filter sees the connection as the earlier ones left it."""

    __slots__ = ("filters", "may_stream")

    def __init__(self, chain: FilterChain, filters: list[Filter], mute: Callable[[int], None]) -> None:
        super().__init__(mute, *runs_tables(chain, filters))
        self.filters = tuple(filters)
        self.may_stream = chain.may_stream
