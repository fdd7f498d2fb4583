"""ClientQuotas: charge bytes and CPU time to Kafka's client quotas, and throttle as a broker would.

What is charged (spec 2.7, 3):
* Produce: the request's size, header + body without the 4-byte length, to `producer_byte_rate`;
* Fetch: the response body's size + 4 to `consumer_byte_rate`; the request's `max_bytes` is first capped to
  what the quota window can hold (KAFKA-9677);
* every API: the proxy's own CPU time on the connection to `request_percentage` (a deliberate difference
  from a broker, which charges its handler threads; see docs/quotas.md). SaslHandshake and
  SaslAuthenticate are not charged: a broker's authenticator handles them outside the request quota.

When: a broker reads one request per connection at a time and mutes before reading the next, so a Produce
is charged before the next one is read. A pipelining proxy gets the same effect by charging a Produce as
it forwards it and muting at once, so requests behind it are held, not forwarded unchecked. Fetch and
request time can only be known from the response, and are charged then, as Kafka does.

How the client is held (`quota.throttle_mode`):
* `kip219`: responses leave at once carrying `throttle_time_ms` = the larger of the broker's value and the
  time the connection stays muted; the connection is muted. A throttled Fetch is answered with an empty
  response that keeps the broker's session id, and its bytes are un-charged (`quota.fetch_throttle: empty`),
  or passed with the field set (`pass`).
* `delay`: the response is held for the throttle (bandwidth and request throttles summed, spec 2.9).
* `auto`: `kip219` for request versions whose clients back off, `delay` for older ones.
"""

from __future__ import annotations

import struct

from sluice.config.quota_settings import FetchThrottle, ThrottleMode
from sluice.protocol.apis import api_spec
from sluice.protocol.errors import ProtocolError
from sluice.protocol.fetch import (
    cap_fetch_request,
    empty_fetch_response,
    fetch_request_limits,
    fetch_response_session,
)
from sluice.protocol.headers import RequestHeader, response_header_size
from sluice.protocol.throttle_field import read_throttle_ms, throttle_field_offset
from sluice.quota import QuotaManagers, kip219_throttle_ms, pre_kip219_throttle_ms

from .base import ConnectionInfo, Filter, Frame, InFlight
from .frames import with_body
from .quota_metrics import ThrottleStats

PRODUCE, FETCH = 0, 1
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
_AUTHENTICATION_KEYS = frozenset({SASL_HANDSHAKE, SASL_AUTHENTICATE})
_ALL_API_KEYS = frozenset(range(128))
_INT32 = struct.Struct(">i")
_INT32_MAX = 2**31 - 1


class ClientQuotas(Filter):
    def __init__(
        self,
        managers: QuotaManagers,
        mode: ThrottleMode = ThrottleMode.KIP219,
        fetch_throttle: FetchThrottle = FetchThrottle.EMPTY,
        stats: ThrottleStats | None = None,
    ) -> None:
        self._produce = managers.produce
        self._fetch = managers.fetch
        self._request = managers.request
        self._mode = mode
        self._fetch_throttle = fetch_throttle
        self._stats = stats if stats is not None else ThrottleStats()
        self.request_percentage = self._request.quotas_enabled
        self.request_api_keys = frozenset({PRODUCE, FETCH})
        # The request quota concerns every API; byte quotas only Produce and Fetch.
        self.response_api_keys = _ALL_API_KEYS if self.request_percentage else frozenset({PRODUCE, FETCH})

    # ---- requests -------------------------------------------------------------------------------

    def on_request(self, conn: ConnectionInfo, header: RequestHeader, frame: Frame) -> Frame:
        if header.api_key == PRODUCE:
            if self._produce.quotas_enabled:
                self._charge_produce(conn, header, frame)
            return frame
        if self._fetch.quotas_enabled:
            return self._cap_fetch(conn, header, frame)
        return frame

    def _charge_produce(self, conn: ConnectionInfo, header: RequestHeader, frame: Frame) -> None:
        user, client_id = conn.user, header.client_id
        throttle = self._produce.record_and_get_throttle_ms(user, client_id, len(frame) - 4, conn.now_ms())
        if throttle > 0:
            self._stats.record_quota("Produce", self._produce.resolve(user, client_id).tags, throttle)
            # This request is forwarded; the ones behind it wait. acks=0 has no response: the mute is all.
            conn.throttle_request(throttle)

    def _cap_fetch(self, conn: ConnectionInfo, header: RequestHeader, frame: Frame) -> Frame:
        cap = self._fetch.max_value_in_quota_window(conn.user, header.client_id)
        if cap >= _INT32_MAX:
            return frame
        view = memoryview(frame)[4 + header.size :]
        try:
            limits = fetch_request_limits(header.api_version, view)
        except ProtocolError as exc:
            if exc.reason != "unsupported_version":
                raise
            return frame  # newer than Sluice knows: forwarded uncapped rather than refused
        if limits is None or limits[1] <= cap:
            return frame
        body = bytearray(view)
        cap_fetch_request(header.api_version, body, cap)
        return with_body(frame, header.size, bytes(body))

    # ---- responses ------------------------------------------------------------------------------

    def _delays(self, header: RequestHeader) -> bool:
        """Whether this request is answered the pre-KIP-219 way (hold the response)."""
        if self._mode is ThrottleMode.KIP219:
            return False
        if self._mode is ThrottleMode.DELAY:
            return True
        spec = api_spec(header.api_key)
        return spec is not None and not spec.client_throttles(header.api_version)

    def on_response(self, conn: ConnectionInfo, request: InFlight, frame: Frame) -> Frame:
        header = request.header
        key, user, client_id = header.api_key, conn.user, header.client_id
        if key in _AUTHENTICATION_KEYS:
            conn.take_cpu_ns()  # spent authenticating: dropped, not charged to the request after it
            return frame
        now = conn.now_ms()
        request_throttle = 0
        if self.request_percentage:
            request_throttle = self._request.record_request_time_ns(user, client_id, conn.take_cpu_ns(), now)
            if request_throttle > 0:
                self._stats.record_quota(
                    "Request", self._request.resolve(user, client_id).tags, request_throttle
                )
        fetch_throttle = fetch_size = 0
        header_size = -1
        if key == FETCH and self._fetch.quotas_enabled:
            header_size = response_header_size(key, header.api_version, frame)
            # FetchResponse.sizeOf: the body as serialised, + 4 (spec 2.7).
            fetch_size = len(frame) - 4 - header_size + 4
            fetch_throttle = self._fetch.record_and_get_throttle_ms(user, client_id, fetch_size, now)
            if fetch_throttle > 0:
                self._stats.record_quota("Fetch", self._fetch.resolve(user, client_id).tags, fetch_throttle)

        # A Produce was charged as it was forwarded: its response carries that throttle (as a broker's
        # would), or what is left of the connection's mute if that is longer.
        muted_ms = max(conn.mute_remaining_ms(), request.throttle_ms)
        delays = self._delays(header)
        if delays:
            throttle = pre_kip219_throttle_ms(muted_ms, fetch_throttle, request_throttle)
        else:
            throttle = kip219_throttle_ms(muted_ms, fetch_throttle, request_throttle)
        if throttle <= 0:
            return frame
        if header_size < 0:
            header_size = response_header_size(key, header.api_version, frame)
        told = False
        if key == FETCH and fetch_throttle + request_throttle > 0 and not delays and self._empty_fetches:
            told, frame = self._empty_fetch(frame, header, header_size, throttle, fetch_size, user, now)
        if not told:
            patched = self._patch_throttle_field(frame, header, header_size, throttle)
            if patched is not None:
                told, frame = True, patched
        if told:
            self._stats.record_response(key, throttle)
        if delays:
            conn.delay_response(throttle)
        else:
            conn.mute_for(throttle)
        return frame

    @property
    def _empty_fetches(self) -> bool:
        return self._fetch_throttle is FetchThrottle.EMPTY

    def _empty_fetch(
        self,
        frame: Frame,
        header: RequestHeader,
        header_size: int,
        throttle: int,
        size: int,
        user: str,
        now: int,
    ) -> tuple[bool, Frame]:
        """Kafka's answer to a throttled fetch: no data, not charged, the broker's session id kept (8.4).

        The client re-reads the same offsets after the throttle. A broker error answer is passed on as it
        is (with the throttle patched in), since its error matters more than the throttle.
        """
        body = memoryview(frame)[4 + header_size :]
        try:
            error, session_id = fetch_response_session(header.api_version, body)
            brokers_throttle = read_throttle_ms(FETCH, header.api_version, body) or 0
        except ProtocolError as exc:
            if exc.reason != "unsupported_version":
                raise
            return False, frame
        if error != 0:
            return False, frame
        if size:
            self._fetch.unrecord(user, header.client_id, size, now)
        empty = empty_fetch_response(header.api_version, max(throttle, brokers_throttle), session_id)
        return True, with_body(frame, header_size, empty)

    @staticmethod
    def _patch_throttle_field(
        frame: Frame, header: RequestHeader, header_size: int, throttle: int
    ) -> bytes | None:
        """The frame with `throttle_time_ms` raised to `throttle`, or None if nothing was written (no such
        field in this version, a version newer than Sluice knows, or the broker's own value is larger)."""
        view = memoryview(frame)
        start = 4 + header_size
        try:
            offset = throttle_field_offset(header.api_key, header.api_version, view[start:])
        except ProtocolError as exc:
            if exc.reason != "unsupported_version":
                raise
            return None
        if offset is None:
            return None
        at = start + offset
        if _INT32.unpack_from(view, at)[0] >= throttle:
            return None  # the broker throttles longer than we do: its value stands
        return b"".join((view[:at], _INT32.pack(throttle), view[at + 4 :]))
