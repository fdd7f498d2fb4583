"""QuotaAdmin: Sluice answers DescribeClientQuotas (48) and AlterClientQuotas (49) itself.

In the chain with `quota.admin: proxy` (the default):

* A describe is answered at once from the quotas in force (proxy/control_plane/quota_admin.py does the work).
* An alter is decided at once; if it changes anything, the request is deferred while the store topic is
  written, and answered when the write is acknowledged (or failed), so an alter is never acknowledged
  before it is stored. The connection's requests behind it wait, as behind a broker.
* ApiVersions answers advertise both APIs (v0-1), even when the brokers lack them.
* Right after start-up, both wait until the store topic has been read (`ready`).

With `quota.admin: broker` this filter is not in the chain: the requests go to the brokers untouched.
A malformed request is a protocol error on that connection, as any malformed frame.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import ClassVar

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.api_versions_clamp import advertise_apis
from sluice.protocol.client_quota_codec import MAX_VERSION
from sluice.protocol.headers import RequestHeader, encode_response
from sluice.proxy.control_plane.quota_admin_errors import REQUEST_TIMED_OUT, ApiError

from ..control_plane.quota_admin import AlterCall, QuotaAdministration, StoreRecord
from ..filter_api.contract import (
    Answer,
    ConnectionInfo,
    Defer,
    Filter,
    FilterFactory,
    Frame,
    InFlight,
    RequestEffect,
    RequestFrame,
    whole,
)
from ..observability.log import get_logger
from .frames import with_body

_log = get_logger("sluice.quota_admin")
_DESCRIBE, _ALTER = ApiKey.DESCRIBE_CLIENT_QUOTAS, ApiKey.ALTER_CLIENT_QUOTAS
ADVERTISED: dict[int, tuple[int, int]] = {_DESCRIBE: (0, MAX_VERSION), _ALTER: (0, MAX_VERSION)}
# ApiVersions answers always use response header v0: just the correlation id.
_API_VERSIONS_HEADER = 4

StoreWriter = Callable[[Sequence[StoreRecord]], Awaitable[int]]


class QuotaAdmin(Filter):
    request_api_keys = frozenset({_DESCRIBE, _ALTER})
    response_api_keys = frozenset({ApiKey.API_VERSIONS})
    max_versions: ClassVar[Mapping[int, int]] = {_DESCRIBE: MAX_VERSION, _ALTER: MAX_VERSION}

    __slots__ = ("_pending", "_shared")

    def __init__(self, conn: ConnectionInfo, shared: QuotaAdminFactory) -> None:
        super().__init__(conn)
        self._shared = shared
        # correlation id -> the answer body of an alter whose store write is under way
        self._pending: dict[int, asyncio.Future[bytes]] = {}

    def on_request(self, header: RequestHeader, frame: RequestFrame) -> RequestEffect:
        ready = self._shared.ready
        if ready is not None and not ready.is_set():
            # Just started: answer once the store has been read, so stored quotas are not missed.
            read: asyncio.Future[bool] = asyncio.ensure_future(ready.wait())
            return Defer(read)
        version, correlation_id = header.api_version, header.correlation_id
        if header.api_key == _ALTER:
            pending = self._pending.pop(correlation_id, None)
            if pending is not None:  # resumed: the store write is over, its answer is ready
                return Answer(encode_response(_ALTER, version, correlation_id, pending.result()))
        body = memoryview(whole(frame))[4 + header.size :]
        admin, user = self._shared.admin, self.conn.user
        if header.api_key == _DESCRIBE:
            answer = admin.describe(version, body, user)
        else:
            call = admin.alter(version, body, user)
            if call.answer is None:
                future = asyncio.ensure_future(self._shared.store(call, self.conn.peer, user))
                self._pending[correlation_id] = future
                return Defer(future)
            answer = call.answer
        return Answer(encode_response(header.api_key, version, correlation_id, answer))

    def on_response(self, request: InFlight, frame: Frame) -> Frame:
        body = memoryview(frame)[4 + _API_VERSIONS_HEADER :]
        new_body = advertise_apis(request.header.api_version, body, ADVERTISED)
        return frame if new_body is None else with_body(frame, _API_VERSIONS_HEADER, new_body)


class QuotaAdminFactory(FilterFactory):
    """Shared by every connection: the quota administration and the store writer."""

    filter_class = QuotaAdmin

    def __init__(
        self, admin: QuotaAdministration, write: StoreWriter, ready: asyncio.Event | None = None
    ) -> None:
        self.admin = admin
        self._write = write
        self.ready = ready
        # One alter at a time per instance, from building its records to applying them, so the next one
        # builds on it (Kafka's controller serialises alters the same way).
        self._one_at_a_time = asyncio.Lock()

    def create(self, conn: ConnectionInfo) -> QuotaAdmin:
        return QuotaAdmin(conn, self)

    async def store(self, call: AlterCall, peer: str, user: str) -> bytes:
        """Write an alter's records, then make its answer: success only once the store acknowledged."""
        async with self._one_at_a_time:
            records = call.refresh()
            try:
                offset = await self._write(records)
            except Exception as exc:  # every failure becomes the answer's error, never a false success
                _log.warning("quota_alter_not_stored", peer=peer, user=user, error=str(exc))
                return call.finish(ApiError(REQUEST_TIMED_OUT, f"{exc}; nothing was changed"))
            _log.info("quota_altered", peer=peer, user=user, entities=len(records), offset=offset)
            return call.finish(None, offset)
