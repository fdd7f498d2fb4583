"""UnadvertisedRequests: a request for an API or version the proxy did not offer closes its connection.

A well-behaved client only uses what ApiVersions offered it; one that asks for more might get an answer
the proxy cannot read, with broker addresses in it. A broker treats a request for an API it does not
serve, or a version outside the range it supports, as invalid and closes that connection (Kafka's
SocketServer: "Received request api key ... which is not enabled"); the proxy does the same for what its
clamp hid or capped, on that connection only: the requests read before it are answered first, and it is
logged (`protocol_error`, side client, reason `unadvertised_api_version`) and counted. ApiVersions itself is
never refused: Kafka accepts every version of it and answers an unknown one with UNSUPPORTED_VERSION.

Produce, Fetch and ShareFetch are not checked here: every client sends them all the time, and a filter more
on their way would cost each of them its call. ClientQuotas, which reads every one of them anyway, refuses
a version beyond the chain's (`unoffered_version`, the same refusal), whatever `protocol.unvetted_apis`
says: no filter could handle it.

In the chain only with `protocol.unvetted_apis: hide` (the default). The check reads the header alone,
so a large request still streams through as it arrives.
"""

from __future__ import annotations

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.errors import ProtocolError
from sluice.protocol.headers import RequestHeader
from sluice.protocol.schema_table import KNOWN_APIS

from ..filter_api.contract import (
    EVERY_API_KEY,
    TABLE_SIZE,
    UNOFFERED_VERSION,
    ChainVersions,
    ConnectionInfo,
    Filter,
    FilterFactory,
    RequestFrame,
)

# Every API key, those outside the routing table too (none of them is ever offered), but the three below.
_CHECKED_KEYS = EVERY_API_KEY - {ApiKey.API_VERSIONS, ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.SHARE_FETCH}


class UnadvertisedRequests(Filter):
    request_api_keys = _CHECKED_KEYS
    head_only_api_keys = _CHECKED_KEYS

    __slots__ = ("_newest",)

    def __init__(self, conn: ConnectionInfo, newest: list[int]) -> None:
        super().__init__(conn)
        self._newest = newest

    def on_request(self, header: RequestHeader, frame: RequestFrame) -> RequestFrame:
        key = header.api_key
        newest = self._newest[key] if 0 <= key < TABLE_SIZE else -1
        if header.api_version <= newest:
            return frame
        raise unoffered_version(header, newest)


def unoffered_version(header: RequestHeader, newest: int) -> ProtocolError:
    """The error that refuses a request for a version newer than `newest` (-1: the API was not offered)."""
    known = KNOWN_APIS.get(header.api_key)
    name = known.name if known is not None else f"api key {header.api_key}"
    offer = f"the proxy offers up to v{newest}" if newest >= 0 else "the proxy does not offer it"
    return ProtocolError(UNOFFERED_VERSION, f"{name} v{header.api_version}: {offer}")


class UnadvertisedRequestsFactory(FilterFactory):
    filter_class = UnadvertisedRequests

    def __init__(self) -> None:
        # Per API key (the list index), the newest version offered; -1: none.
        self.newest = [-1] * TABLE_SIZE

    def chain_built(self, versions: ChainVersions) -> None:
        for key in range(TABLE_SIZE):
            self.newest[key] = versions.newest_vetted_offer(key)

    def create(self, conn: ConnectionInfo) -> UnadvertisedRequests:
        return UnadvertisedRequests(conn, self.newest)
