"""ApiVersionsClamp: never let a client pick a version of an API the proxy would have to rewrite but cannot.

Only the APIs whose answers Sluice rewrites are capped; every other API's range passes untouched, so the
proxy adds no limits of its own to the cluster's.
"""

from __future__ import annotations

from collections.abc import Mapping

from sluice.protocol.api_versions_clamp import clamp_api_versions
from sluice.protocol.broker_addresses import REWRITABLE_MAX_VERSIONS

from .base import ConnectionInfo, Filter, Frame, InFlight
from .frames import with_body

API_VERSIONS = 18
# ApiVersions answers always use response header v0: just the correlation id.
_HEADER_SIZE = 4


class ApiVersionsClamp(Filter):
    response_api_keys = frozenset({API_VERSIONS})

    def __init__(self, max_versions: Mapping[int, int] = REWRITABLE_MAX_VERSIONS) -> None:
        self._max_versions = dict(max_versions)

    def on_response(self, conn: ConnectionInfo, request: InFlight, frame: Frame) -> Frame:
        body = memoryview(frame)[4 + _HEADER_SIZE :]
        new_body = clamp_api_versions(request.header.api_version, body, self._max_versions)
        return frame if new_body is None else with_body(frame, _HEADER_SIZE, new_body)
