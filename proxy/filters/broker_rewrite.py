"""BrokerAddressRewrite: clients only learn proxy addresses, so every later connection comes back here.

Every response field that names a broker's host and port is rewritten to the listener the proxy advertises
for that node (`BrokerDirectory.advertise`, which opens a listener for a node it has not seen):
* Metadata, FindCoordinator, DescribeCluster: the brokers (or coordinators) a client connects to;
* Produce v10+, Fetch v16+, ShareFetch, ShareAcknowledge: `NodeEndpoints` (KIP-951), the new leader's
  address a broker adds when it answers NOT_LEADER_OR_FOLLOWER (protocol/node_endpoints.py).

An answer in a version newer than this filter can read closes the connection, as the refusal of a request
for a version the clamp never offered (`unoffered_version`, logged as the client's doing): the request
gates refuse such requests on the way in, so only a client of a proxy told `protocol.unvetted_apis: pass`
gets this far (say, ShareAcknowledge v3).

A node the proxy has no listener for is left out of the answer (the client then asks Metadata again).
Every address rewritten or left out outside Metadata counts in `sluice_addresses_rewritten_total{api}`.
The filter declares what it rewrites (`rewrites_addresses`), which is what the ApiVersions clamp offers of
these APIs: nothing newer than this filter can read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, ClassVar

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.broker_addresses import REWRITABLE_MAX_VERSIONS, rewrite_broker_addresses
from sluice.protocol.errors import ProtocolError
from sluice.protocol.headers import RequestHeader, response_header_size
from sluice.protocol.node_endpoints import (
    NODE_ENDPOINTS_FROM,
    NODE_ENDPOINTS_MAX_VERSIONS,
    rewrite_node_endpoints,
)

from ..cluster.brokers import Address, BrokerDirectory
from ..filter_api.contract import TABLE_SIZE, ConnectionInfo, Filter, FilterFactory, Frame, InFlight
from .frames import with_body
from .unadvertised_requests import unoffered_version

_METADATA, _PRODUCE = ApiKey.METADATA, ApiKey.PRODUCE
_REWRITTEN: Mapping[int, int] = {**REWRITABLE_MAX_VERSIONS, **NODE_ENDPOINTS_MAX_VERSIONS}
# Per API key (the index), the first version whose answers may carry NodeEndpoints; -1 for the others.
_ENDPOINTS_FROM = [NODE_ENDPOINTS_FROM.get(key, -1) for key in range(TABLE_SIZE)]


class BrokerAddressRewrite(Filter):
    response_api_keys = frozenset(_REWRITTEN)
    max_versions: ClassVar[Mapping[int, int]] = _REWRITTEN
    rewrites_addresses: ClassVar[Mapping[int, int]] = _REWRITTEN

    __slots__ = ("_counts", "_directory", "_fetch_topics_read")

    def __init__(
        self, conn: ConnectionInfo, directory: BrokerDirectory, counts: list[int], fetch_topics_read: bool
    ) -> None:
        super().__init__(conn)
        self._directory = directory
        self._counts = counts
        self._fetch_topics_read = fetch_topics_read

    def on_response(self, request: InFlight, frame: Frame) -> Frame:
        header = request.header
        key = header.api_key
        first = _ENDPOINTS_FROM[key]
        if first >= 0:
            # Produce and Fetch answers: every one comes here, so the old versions leave at once.
            version = header.api_version
            if version < first:
                return frame
            # Flexible versions: the header is the correlation id and (nearly always) no tagged fields.
            header_size = 5 if frame[8] == 0 else response_header_size(key, version, frame)
            try:
                # remember: ClientQuotas may patch a Produce answer's throttle next, and the usage records
                # (when there are any) read a Fetch answer's topics (frames are views of bytes).
                remember = key == _PRODUCE or self._fetch_topics_read
                new_body, rewritten = rewrite_node_endpoints(
                    key, version, frame, self._directory.advertise, 4 + header_size, remember
                )
            except ProtocolError as exc:
                if exc.reason == "unsupported_version":
                    raise unoffered_version(header, _REWRITTEN[key]) from None
                raise
            if new_body is None:
                return frame
            return self._endpoints_rewritten(key, frame, header_size, new_body, rewritten)
        version = header.api_version
        if version > _REWRITTEN[key]:
            raise unoffered_version(header, _REWRITTEN[key])
        header_size = response_header_size(key, version, frame)
        body = memoryview(frame)[4 + header_size :]
        if key == _METADATA:
            new_body = rewrite_broker_addresses(key, version, body, self._directory.advertise)
        else:
            counted = _Counted(self._directory)
            new_body = rewrite_broker_addresses(key, version, body, counted)
            self._counts[key] += counted.rewritten
        return frame if new_body is None else with_body(frame, header_size, new_body)

    def _endpoints_rewritten(
        self, key: int, frame: Frame, header_size: int, new_body: bytes, rewritten: int
    ) -> bytes:
        """The answer whose NodeEndpoints were rewritten (its new body), counted: both twins' end."""
        self._counts[key] += rewritten
        return with_body(frame, header_size, new_body)


class _Counted:
    """The directory's advertise, counting the addresses it changes or leaves out."""

    __slots__ = ("_directory", "rewritten")

    def __init__(self, directory: BrokerDirectory) -> None:
        self._directory = directory
        self.rewritten = 0

    def __call__(self, node_id: int, host: str, port: int) -> Address | None:
        advertised = self._directory.advertise(node_id, host, port)
        if advertised != (host, port):
            self.rewritten += 1
        return advertised


class BrokerAddressRewriteFactory(FilterFactory):
    filter_class = BrokerAddressRewrite

    def __init__(
        self, directory: BrokerDirectory, counts: list[int] | None = None, *, fetch_topics_read: bool = True
    ) -> None:
        self._directory = directory
        # Addresses rewritten or left out, by API key (ProxyMetrics.addresses_rewritten).
        self.counts = counts if counts is not None else [0] * TABLE_SIZE
        # Whether a filter after this one reads a Fetch answer's topics (the usage records): its walk of a
        # v16+ answer then lists them and keeps them for it; else it only finds where the answer ends.
        self._fetch_topics_read = fetch_topics_read

    def create(self, conn: ConnectionInfo) -> BrokerAddressRewrite:
        return BrokerAddressRewrite(conn, self._directory, self.counts, self._fetch_topics_read)


# The filter's answer method as written here: the reference of the compiled one
# (proxy/filters/_broker_rewrite.c), which hands it what it does not write out (the other APIs, a response
# header with tagged fields, an answer its walk refuses, keywords, a subclass of the filter).
on_response_in_python = BrokerAddressRewrite.on_response


def compiled_on_response_of(on_response: Callable[..., object]) -> object:
    """The compiled on_response, which hands what it does not write out to `on_response`."""
    from sluice.proxy.filters import _broker_rewrite  # type: ignore[attr-defined]

    return _broker_rewrite.bind(
        BrokerAddressRewrite,
        {
            "on_response": on_response,
            "InFlight": InFlight,
            "RequestHeader": RequestHeader,
            "rewrite_node_endpoints": rewrite_node_endpoints,
            "ProtocolError": ProtocolError,
            "PRODUCE": int(_PRODUCE),
            "endpoints_from": _ENDPOINTS_FROM,
        },
    )


# Every Produce and Fetch answer of every connection comes here: compiled where the install has it (a Python
# frame less per answer), else the method above.
if not TYPE_CHECKING:  # the type checker reads the Python method; the compiled one takes the same
    try:
        from sluice.proxy.filters import _broker_rewrite  # noqa: F401 (whether the install has it)
    except ImportError:  # built without a C compiler
        pass
    else:
        BrokerAddressRewrite.on_response = compiled_on_response_of(on_response_in_python)
