"""ApiVersionsClamp: offer clients only API versions the proxy can handle and has vetted.

Two limits meet in each ApiVersions answer:
* the chain's: every filter declares the newest version of each API it can handle (`Filter.max_versions`),
  and the clamp keeps the lowest. The quota filters are always in the chain (quotas may appear at run
  time, after a client has chosen its versions), so their limits always apply;
* the vetting's (protocol/api_vetting.py, with `protocol.unvetted_apis: hide`, the default): only versions
  whose answers Kafka's schemas describe and which carry no broker address, or only addresses a filter
  rewrites (`Filter.rewrites_addresses`). An API with no vetted version is left out of the answer.

With `protocol.unvetted_apis: pass` the vetting is off: APIs no filter names pass untouched. A request for
what the clamp did not offer is refused by UnadvertisedRequests (proxy/filters/unadvertised_requests.py).
"""

from __future__ import annotations

from sluice.config.protocol_settings import UnvettedApis
from sluice.protocol.api_keys import ApiKey
from sluice.protocol.api_versions_clamp import clamp_api_versions

from ..filter_api.contract import ChainVersions, ConnectionInfo, Filter, FilterFactory, Frame, InFlight
from .frames import with_body

# ApiVersions answers always use response header v0: just the correlation id.
_HEADER_SIZE = 4


class ApiVersionsClamp(Filter):
    response_api_keys = frozenset({ApiKey.API_VERSIONS})

    __slots__ = ("_shared",)

    def __init__(self, conn: ConnectionInfo, shared: ApiVersionsClampFactory) -> None:
        super().__init__(conn)
        self._shared = shared

    def on_response(self, request: InFlight, frame: Frame) -> Frame:
        body = memoryview(frame)[4 + _HEADER_SIZE :]
        shared = self._shared
        new_body = clamp_api_versions(
            request.header.api_version, body, shared.max_versions, vetted=shared.vetted
        )
        return frame if new_body is None else with_body(frame, _HEADER_SIZE, new_body)


class ApiVersionsClampFactory(FilterFactory):
    filter_class = ApiVersionsClamp

    def __init__(self, unvetted: UnvettedApis = UnvettedApis.HIDE) -> None:
        self.unvetted = unvetted
        self.max_versions: dict[int, int] = {}
        # Per API key, its newest vetted version (keys missing: none is); None while vetting is off.
        self.vetted: dict[int, int] | None = None

    def chain_built(self, versions: ChainVersions) -> None:
        self.max_versions = dict(versions.max_versions)
        if self.unvetted is UnvettedApis.HIDE:
            self.vetted = dict(versions.vetted)

    def create(self, conn: ConnectionInfo) -> ApiVersionsClamp:
        return ApiVersionsClamp(conn, self)
