"""BrokerAddressRewrite: clients only learn proxy addresses, so every later connection comes back here."""

from __future__ import annotations

from sluice.protocol.broker_addresses import rewrite_broker_addresses
from sluice.protocol.headers import response_header_size

from ..brokers import BrokerDirectory
from .base import ConnectionInfo, Filter, Frame, InFlight
from .frames import with_body

METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER = 3, 10, 60


class BrokerAddressRewrite(Filter):
    response_api_keys = frozenset({METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER})

    def __init__(self, directory: BrokerDirectory) -> None:
        self._directory = directory

    def on_response(self, conn: ConnectionInfo, request: InFlight, frame: Frame) -> Frame:
        header_size = response_header_size(request.header.api_key, request.header.api_version, frame)
        body = memoryview(frame)[4 + header_size :]
        new_body = rewrite_broker_addresses(
            request.header.api_key, request.header.api_version, body, self._directory.advertise
        )
        return frame if new_body is None else with_body(frame, header_size, new_body)
