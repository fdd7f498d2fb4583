"""BrokerAddressRewrite: clients only learn proxy addresses, so every later connection comes back here."""

from __future__ import annotations

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.broker_addresses import REWRITABLE_MAX_VERSIONS, rewrite_broker_addresses
from sluice.protocol.headers import response_header_size

from ..brokers import BrokerDirectory
from .base import ConnectionInfo, Filter, FilterFactory, Frame, InFlight
from .frames import with_body


class BrokerAddressRewrite(Filter):
    response_api_keys = frozenset({ApiKey.METADATA, ApiKey.FIND_COORDINATOR, ApiKey.DESCRIBE_CLUSTER})
    max_versions = REWRITABLE_MAX_VERSIONS

    __slots__ = ("_directory",)

    def __init__(self, conn: ConnectionInfo, directory: BrokerDirectory) -> None:
        super().__init__(conn)
        self._directory = directory

    def on_response(self, request: InFlight, frame: Frame) -> Frame:
        header_size = response_header_size(request.header.api_key, request.header.api_version, frame)
        body = memoryview(frame)[4 + header_size :]
        new_body = rewrite_broker_addresses(
            request.header.api_key, request.header.api_version, body, self._directory.advertise
        )
        return frame if new_body is None else with_body(frame, header_size, new_body)


class BrokerAddressRewriteFactory(FilterFactory):
    filter_class = BrokerAddressRewrite

    def __init__(self, directory: BrokerDirectory) -> None:
        self._directory = directory

    def create(self, conn: ConnectionInfo) -> BrokerAddressRewrite:
        return BrokerAddressRewrite(conn, self._directory)
