"""ApiVersionsClamp: never let a client pick a version of an API the proxy would have to rewrite but cannot.

The limits come from the chain: every filter declares the newest version of each API it can handle
(`Filter.max_versions`), and the clamp keeps the lowest. APIs no filter names pass untouched, so the proxy
adds no limits of its own to the cluster's. The quota filters are always in the chain (quotas may appear
at run time, after a client has chosen its versions), so their limits always apply.
"""

from __future__ import annotations

from collections.abc import Mapping

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.api_versions_clamp import clamp_api_versions

from .base import ConnectionInfo, Filter, FilterFactory, Frame, InFlight
from .frames import with_body

# ApiVersions answers always use response header v0: just the correlation id.
_HEADER_SIZE = 4


class ApiVersionsClamp(Filter):
    response_api_keys = frozenset({ApiKey.API_VERSIONS})

    __slots__ = ("_max_versions",)

    def __init__(self, conn: ConnectionInfo, max_versions: Mapping[int, int]) -> None:
        super().__init__(conn)
        self._max_versions = max_versions

    def on_response(self, request: InFlight, frame: Frame) -> Frame:
        body = memoryview(frame)[4 + _HEADER_SIZE :]
        new_body = clamp_api_versions(request.header.api_version, body, self._max_versions)
        return frame if new_body is None else with_body(frame, _HEADER_SIZE, new_body)


class ApiVersionsClampFactory(FilterFactory):
    filter_class = ApiVersionsClamp

    def __init__(self) -> None:
        self.max_versions: dict[int, int] = {}

    def chain_built(self, max_versions: Mapping[int, int]) -> None:
        self.max_versions = dict(max_versions)

    def create(self, conn: ConnectionInfo) -> ApiVersionsClamp:
        return ApiVersionsClamp(conn, self.max_versions)
