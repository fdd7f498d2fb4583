"""ClientQuotas: charge bytes and CPU time to Kafka's client quotas, and throttle as a broker would.

What is charged (spec 2.7, 3):
* Produce: the request's size, header + body without the 4-byte length, to `producer_byte_rate`;
* Fetch: the response body's size + 4 to `consumer_byte_rate`; the request's `max_bytes` is first capped to
  what the quota window can hold (KAFKA-9677). A share group's ShareFetch (KIP-932) likewise, as Kafka
  charges it, except that a throttled one keeps its records (below);
* every API: the proxy's own CPU time on the connection to `request_percentage` (the wall time of its
  passes over the connection's reads, timed as a broker times its handler threads; a proxy cannot see a
  broker's: see docs/quotas.md). SaslHandshake, SaslAuthenticate
  and ApiVersions are not charged and create no sensor: a broker's authenticator answers them outside the
  request quota on SASL listeners (spec 3), and charging the one request any client sends before it logs
  in would let a client cycling client-ids make a sensor per id. Their CPU time is dropped, not carried over.

A Produce, Fetch or ShareFetch of a version beyond the chain's was never offered and is refused
(`unoffered_version`, as the request gate refuses other APIs): one comparison, on the path every one of
them takes anyway; no filter could read it (TopicQuotas stops at Produce v12).

When: a broker reads one request per connection at a time and mutes before reading the next, so a Produce
is charged before the next one is read. A pipelining proxy gets the same effect by charging a Produce as
it forwards it and muting at once, so requests behind it are held, not forwarded unchecked. Fetch and
request time can only be known from the response, and are charged then, as Kafka does.

How the client is held (`quota.throttle_mode`):
* `kip219`: responses leave at once carrying `throttle_time_ms` = the larger of the broker's value and the
  time the connection stays muted; the connection is muted. A throttled Fetch is answered with an empty
  response that keeps the broker's session id, and its bytes are un-charged (`quota.fetch_throttle: empty`),
  or passed with the field set (`pass`). A throttled ShareFetch is always passed with the field set: its
  records were acquired for this consumer when the broker answered, and an empty answer would leave them
  locked until the acquisition lock times out, then count a delivery that never happened (which is what
  a broker's empty answer does: docs/quotas.md).
* `delay`: the response is held for the throttle (bandwidth and request throttles summed, spec 2.9).
* `auto`: `kip219` for request versions whose clients back off, `delay` for older ones.

Who is held (`quota.mute_scope`): `entity` (the default) shuts the throttled entity's gate
(`proxy/data_path/entity_gate.py`), so a Produce of the same entity on any connection waits for it and is
charged only when let in: one quota however many connections. A Produce that waited longer than its
client's `timeout_ms` is answered REQUEST_TIMED_OUT instead, uncharged (its client has sent it again).
`connection` mutes only the connection, as Kafka does.

Why this module is long: the three client quotas (bytes in, bytes out, CPU time) meet in one response
path, with Kafka's two ways to hold a client and its empty answer to a throttled Fetch; the entity gate's
own logic is in proxy/data_path/entity_gate.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import operator
import struct
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, ClassVar

from sluice.config.quota_settings import FetchThrottle, MuteScope, ThrottleMode
from sluice.protocol.api_keys import ApiKey
from sluice.protocol.apis import api_spec
from sluice.protocol.errors import ProtocolError
from sluice.protocol.fetch import (
    FETCH_MAX_VERSION,
    cap_fetch_request,
    empty_fetch_response,
    fetch_request_limits,
    fetch_response_session,
)
from sluice.protocol.frames import FrameHead
from sluice.protocol.headers import RequestHeader, response_header_size
from sluice.protocol.share_fetch import (
    SHARE_FETCH_MAX_VERSION,
    cap_share_fetch_request,
    share_fetch_request_limits,
)
from sluice.protocol.throttle_field import (
    THROTTLE_PATCHABLE_MAX_VERSIONS,
    read_throttle_ms,
    throttle_field_at,
)
from sluice.quota import (
    ClientQuotaManager,
    QuotaManagers,
    QuotaRules,
    kip219_throttle_ms,
    pre_kip219_throttle_ms,
)
from sluice.quota.managers import NANOS_TO_PERCENTAGE_PER_SECOND, RequestQuotaManager
from sluice.quota.sensor import INACTIVE_SENSOR_EXPIRATION_MS, WindowQuotaSensor
from sluice.quota.throttle import to_int32

from ..data_path.entity_gate import TIMED_OUT, EntityGates, produce_deadline_ms, timed_out_answer
from ..filter_api.contract import (
    Answer,
    ChainVersions,
    ConnectionInfo,
    Defer,
    Filter,
    FilterFactory,
    Forward,
    Frame,
    InFlight,
    RequestEffect,
    RequestFrame,
    Respond,
    whole,
)
from ..observability.quota_metrics import ThrottleStats
from .frames import with_body
from .unadvertised_requests import unoffered_version

_PRODUCE, _FETCH, _SHARE_FETCH = ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.SHARE_FETCH
_FETCHES = frozenset({_FETCH, _SHARE_FETCH})  # charged to consumer_byte_rate
_UNCHARGED_KEYS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE, ApiKey.API_VERSIONS})
_INT32 = struct.Struct(">i")
_enabled_bits = operator.attrgetter("enabled_bits")
_INT32_MAX = 2**31 - 1
_TOUCHED_LIMIT = 64


class ClientQuotas(Filter):
    # Produce is charged on the way in, Fetch capped; responses carry throttles. While a request_percentage
    # quota is configured the factory needs CPU time, so the chain shows this filter every response.
    request_api_keys = frozenset({ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.SHARE_FETCH})
    response_api_keys = frozenset({ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.SHARE_FETCH})
    # A Produce is charged its size, read from the header and len(frame): a large one may stream through.
    head_only_api_keys = frozenset({ApiKey.PRODUCE})
    max_versions: ClassVar[Mapping[int, int]] = {
        **THROTTLE_PATCHABLE_MAX_VERSIONS,
        ApiKey.FETCH: FETCH_MAX_VERSION,
        ApiKey.SHARE_FETCH: SHARE_FETCH_MAX_VERSION,
    }

    __slots__ = (
        "_all_rules",
        "_fetch",
        "_fetch_cap",
        "_fetch_rules",
        "_fetch_throttle",
        "_fetch_touched",
        "_gates",
        "_mode",
        "_newest",
        "_produce",
        "_produce_rules",
        "_produce_touched",
        "_request",
        "_request_checked",
        "_request_rules",
        "_request_touched",
        "_stats",
        "_touched",
        "_turn",
        "_turn_rank",
    )

    def __init__(self, conn: ConnectionInfo, shared: ClientQuotasFactory) -> None:
        super().__init__(conn)
        managers = shared.managers
        self._produce = managers.produce
        self._fetch = managers.fetch
        self._request = managers.request
        # The managers' live rules, read per request (an attribute read each, on the hot path): a quota
        # added or removed at run time counts from the next request.
        self._produce_rules = managers.produce.rules
        self._fetch_rules = managers.fetch.rules
        self._request_rules = managers.request.rules
        # A mutation quota's mute shows in Produce and Fetch answers too.
        self._all_rules = (
            self._produce_rules,
            self._fetch_rules,
            self._request_rules,
            managers.controller_mutation.rules,
        )
        self._newest = shared.newest
        self._mode = shared.mode
        self._fetch_throttle = shared.fetch_throttle
        self._stats = shared.stats
        # The entity gates every connection shares (made at the first connection, on the event loop);
        # None for Kafka's per-connection mute only.
        self._gates = shared.gates()
        # This connection's place in its entity's queue, while its Produce waits for the gate, and its rank
        # there: when it was last let in (or opened), so the entity's connections are served in turn.
        self._turn: asyncio.Future[object] | None = None
        self._turn_rank = conn.now_ms()
        # (quota type, user, client-id) -> the rules version its throttle series were made for.
        self._touched: dict[tuple[str, str, str | None], int] = {}
        # The last (user, client-id, rules version) touched for Produce bytes, request time and Fetch bytes,
        # each in `_touched` (dropped when it is cleared): a client's requests and answers, one entity under
        # the same rules, are told apart from it by one comparison, with no key to look up in `_touched`.
        self._produce_touched: tuple[str, str | None, int] | None = None
        self._request_touched: tuple[str, str | None, int] | None = None
        self._fetch_touched: tuple[str, str | None, int] | None = None
        # The last charge of request time: (ms, user, client-id, rules version, throttle) (on_response).
        self._request_checked: tuple[int, str, str | None, int, int] | None = None
        # The last Fetch cap: (consumer_byte_rate rules version, user, client-id, cap). A consumer sends
        # its Fetch requests as one entity under the same rules, so each finds its cap here instead of
        # resolving the entity again; a quota set or removed bumps the version, SASL re-authentication
        # changes the user, and a request may name another client-id: each makes it resolve again.
        self._fetch_cap: tuple[int, str, str | None, float] | None = None

    # ---- requests -------------------------------------------------------------------------------

    def on_request(self, header: RequestHeader, frame: RequestFrame) -> RequestEffect:
        # A version beyond the chain's was never offered, and some filter could not read it (TopicQuotas
        # reads Produce up to v12): refused here, where every Produce, Fetch and ShareFetch passes anyway.
        key = header.api_key
        if header.api_version > self._newest[key]:
            raise unoffered_version(header, self._newest[key])
        if key == _PRODUCE:
            if self._produce_rules.enabled_bits:
                return self._charge_produce(header, frame)
            if self._turn is not None:
                self._leave_gate(header)  # the quota went while this request waited: it goes on, uncharged
            return frame
        if self._fetch_rules.enabled_bits:
            return self._cap_fetch(header, whole(frame))
        return frame

    def _touch(
        self, kind: str, manager: ClientQuotaManager, rules: QuotaRules, user: str, client_id: str | None
    ) -> None:
        """The entity's throttle series exist from its first charge on, not only once it is throttled
        (`rules`: the manager's, bound once per connection)."""
        key = (kind, user, client_id)
        version = rules.version
        touched = self._touched
        if touched.get(key) != version:
            if len(touched) >= _TOUCHED_LIMIT:
                touched.clear()  # a connection that changes client-id per request: bounded, re-touched
                # they name entries just cleared
                self._produce_touched = self._request_touched = self._fetch_touched = None
            touched[key] = version
            self._stats.touch(kind, manager.tags_for(user, client_id))

    def _throttled(
        self,
        kind: str,
        manager: ClientQuotaManager,
        user: str,
        client_id: str | None,
        throttle: int,
        now: int,
    ) -> None:
        """A charge of `kind` throttled the entity: counted in its throttle series (and usage records)."""
        self._stats.record_quota(kind, manager.tags_for(user, client_id), throttle, now, (user, client_id))

    def _charge_produce(self, header: RequestHeader, frame: RequestFrame) -> RequestEffect:
        conn = self.conn
        user, client_id = conn.user, header.client_id
        now = conn.now_ms()
        touched = (user, client_id, self._produce_rules.version)
        if touched != self._produce_touched:
            self._touch("Produce", self._produce, self._produce_rules, user, client_id)
            self._produce_touched = touched
        gates = self._gates
        shut_gates = 0
        if gates is not None:
            shut_gates = len(gates.shut)  # one per entity throttled now: none is the common case
            turn, self._turn = self._turn, None
            if turn is not None:
                if not turn.cancelled() and turn.result() is TIMED_OUT:
                    gate_shut_ms = gates.shut_for_ms(self._gate_key(user, client_id), now)
                    return self._timed_out(header, whole(frame), gate_shut_ms)
                # Otherwise the gate let this request in: charge it now.
            elif type(frame) is not FrameHead and (shut_gates or now != conn.read_ms()):
                # (A large Produce already on its way as it arrives cannot wait: it is charged now, and the
                # throttle it earns, on the entity's shared sensor, shuts the gate that much longer.)
                # Read in this same ms with no entity throttled (the common case), a request can neither
                # have outlived its timeout (1 ms at least) nor wait: its deadline is not read at all.
                deadline = produce_deadline_ms(header, frame, conn.read_ms())
                if deadline is not None and now >= deadline:
                    # Held (behind a mute, or behind one that timed out) past its client's timeout: the
                    # client sent it again, or will; forwarding it would charge a copy nobody waits for,
                    # and hand the broker a gap in an idempotent producer's sequence.
                    gate_shut_ms = gates.shut_for_ms(self._gate_key(user, client_id), now)
                    return self._timed_out(header, frame, gate_shut_ms)
                # With no entity throttled there is no gate to wait at (and no key to make).
                if shut_gates:
                    turn = gates.wait(self._gate_key(user, client_id), now, deadline, self._turn_rank)
                    if turn is not None:
                        self._turn = turn
                        return Defer(turn)  # the entity is throttled: wait, uncharged, on every connection
        throttle = self._produce.record_and_get_throttle_ms(user, client_id, len(frame) - 4, now)
        return self._produce_charged(frame, user, client_id, throttle, now, shut_gates)

    def _produce_charged(
        self, frame: RequestFrame, user: str, client_id: str | None, throttle: int, now: int, shut_gates: int
    ) -> RequestEffect:
        """A Produce charged `throttle`: the entity's gate told, and the request forwarded."""
        gates = self._gates
        if gates is not None:
            if throttle > 0 or shut_gates:  # else there is no gate to shut or to open
                gates.admitted(self._gate_key(user, client_id), throttle, now)
            self._turn_rank = now
        if throttle <= 0:
            return frame
        self._throttled("Produce", self._produce, user, client_id, throttle, now)
        # This request is forwarded; the ones behind it wait. acks=0 has no response: the mute is all.
        return Forward(frame, throttle)

    def _gate_key(self, user: str, client_id: str | None) -> tuple[int, object]:
        # The tags of the sensor the entity is charged to: entities sharing a quota share its gate.
        return (_PRODUCE, self._produce.tags_for(user, client_id))

    def _leave_gate(self, header: RequestHeader) -> None:
        turn, self._turn = self._turn, None
        gates = self._gates
        if gates is not None and turn is not None and not turn.cancelled() and turn.result() is None:
            # It was let in: the next waiter's turn comes now rather than after the resume grace.
            gates.admitted(self._gate_key(self.conn.user, header.client_id), 0, self.conn.now_ms())

    def _timed_out(self, header: RequestHeader, frame: Frame, gate_shut_ms: int) -> Answer:
        self._stats.gate_timeouts += 1
        return timed_out_answer(header, frame, gate_shut_ms)

    def _cap_fetch(self, header: RequestHeader, frame: Frame) -> Frame:
        user, client_id, version = self.conn.user, header.client_id, self._fetch_rules.version
        last = self._fetch_cap
        if last is not None and last[0] == version and last[1] is user and last[2] == client_id:
            cap = last[3]
        else:
            cap = self._fetch.max_value_in_quota_window(user, client_id)
            self._fetch_cap = (version, user, client_id, cap)
        if cap >= _INT32_MAX:
            return frame
        share = header.api_key == _SHARE_FETCH
        view = memoryview(frame)[4 + header.size :]
        if share:
            limits: tuple[int, int] | None = share_fetch_request_limits(header.api_version, view)
        else:
            limits = fetch_request_limits(header.api_version, view)  # a version it reads (on_request)
        if limits is None or limits[1] <= cap:
            return frame
        body = bytearray(view)
        (cap_share_fetch_request if share else cap_fetch_request)(header.api_version, body, cap)
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

    def on_response(self, request: InFlight, frame: Frame) -> Frame | Respond:
        if not request.throttle_ms:
            for rules in self._all_rules:
                if rules.enabled_bits:
                    break
            else:
                return frame  # no quota configured at all: nothing to charge, no mute to tell
        conn = self.conn
        header = request.header
        key, user, client_id = header.api_key, conn.user, header.client_id
        if key in _UNCHARGED_KEYS:
            conn.take_cpu_ns()  # dropped, not charged to the request after it
            # The next charge of this pass then brings no CPU time, yet is this pass's first: it records.
            self._request_checked = None
            return frame
        charges_request = self._request_rules.enabled_bits != 0
        charges_fetch = key in _FETCHES and self._fetch_rules.enabled_bits != 0
        muted_ms = conn.mute_remaining_ms()
        if muted_ms < request.throttle_ms:
            muted_ms = request.throttle_ms
        if not (charges_request or charges_fetch or muted_ms):
            return frame  # nothing to charge, nothing to tell (no quota of these keys is configured)
        now = conn.now_ms()
        request_throttle = 0
        if charges_request:
            cpu_ns = conn.take_cpu_ns()
            checked = self._request_checked
            if (
                cpu_ns
                or checked is None
                or checked[0] != now
                or checked[1] is not user
                or checked[2] != client_id
                or checked[3] != self._request_rules.version
            ):
                version = self._request_rules.version
                touched = (user, client_id, version)
                if touched != self._request_touched:
                    self._touch("Request", self._request, self._request_rules, user, client_id)
                    self._request_touched = touched
                request_throttle = self._request.record_request_time_ns(user, client_id, cpu_ns, now)
                self._request_checked = (now, user, client_id, version, request_throttle)
                usage = self._stats.usage
                if usage is not None and cpu_ns:
                    usage.usage(user, client_id).cpu_time_ns += cpu_ns
            else:
                # Most answers of a read take no CPU time of their own: a pass's is measured once, after
                # it, and goes to the first answer charged after it, so each pass's first charge records.
                # Recording 0 on the sensor the answer before it in this pass charged, at the same ms and
                # with the same rules (nothing else runs in a pass), would return that answer's throttle.
                request_throttle = checked[4]
            if request_throttle > 0:
                self._throttled("Request", self._request, user, client_id, request_throttle, now)
        fetch_throttle = fetch_size = 0
        header_size = -1
        if charges_fetch:
            header_size = response_header_size(key, header.api_version, frame)
            # FetchResponse.sizeOf: the body as serialised, + 4 (spec 2.7); ShareFetch is charged alike.
            fetch_size = len(frame) - 4 - header_size + 4
            touched = (user, client_id, self._fetch_rules.version)
            if touched != self._fetch_touched:
                self._touch("Fetch", self._fetch, self._fetch_rules, user, client_id)
                self._fetch_touched = touched
            fetch_throttle = self._fetch.record_and_get_throttle_ms(user, client_id, fetch_size, now)
            if fetch_throttle > 0:
                self._throttled("Fetch", self._fetch, user, client_id, fetch_throttle, now)

        if muted_ms <= 0 and fetch_throttle <= 0 and request_throttle <= 0:
            return frame  # no throttle to tell, in either mode (the common case)
        return self._tell(
            frame, header, user, now, muted_ms, fetch_throttle, request_throttle, header_size, fetch_size
        )

    def _tell(
        self,
        frame: Frame,
        header: RequestHeader,
        user: str,
        now: int,
        muted_ms: int,
        fetch_throttle: int,
        request_throttle: int,
        header_size: int,
        fetch_size: int,
    ) -> Frame | Respond:
        """The answer carrying the throttles on_response found (`header_size` -1 if not read yet)."""
        # A Produce was charged as it was forwarded: its response carries that throttle (as a broker's
        # would), or what is left of the connection's mute if that is longer.
        key = header.api_key
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
        if key == _FETCH and fetch_throttle + request_throttle > 0 and not delays and self._empty_fetches:
            told, frame = self._empty_fetch(frame, header, header_size, throttle, fetch_size, user, now)
        if not told:
            patched = self._patch_throttle_field(frame, header, header_size, throttle)
            if patched is not None:
                told, frame = True, patched
        if told:
            self._stats.record_response(key, throttle)
        if delays:
            return Respond(frame, delay_ms=throttle)
        return Respond(frame, mute_ms=throttle)

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
            brokers_throttle = read_throttle_ms(_FETCH, header.api_version, body) or 0
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
        try:
            # A Produce answer's walk is the one BrokerAddressRewrite made of this frame (response_walks).
            at = throttle_field_at(header.api_key, header.api_version, frame, 4 + header_size)
        except ProtocolError as exc:
            if exc.reason != "unsupported_version":
                raise
            return None
        if at is None:
            return None
        if _INT32.unpack_from(view, at)[0] >= throttle:
            return None  # the broker throttles longer than we do: its value stands
        return b"".join((view[:at], _INT32.pack(throttle), view[at + 4 :]))


class ClientQuotasFactory(FilterFactory):
    """The quota managers and settings every connection's ClientQuotas shares."""

    filter_class = ClientQuotas

    def __init__(
        self,
        managers: QuotaManagers,
        mode: ThrottleMode = ThrottleMode.KIP219,
        fetch_throttle: FetchThrottle = FetchThrottle.EMPTY,
        stats: ThrottleStats | None = None,
        *,
        mute_scope: MuteScope = MuteScope.ENTITY,
    ) -> None:
        self.managers = managers
        self.mode = mode
        self.fetch_throttle = fetch_throttle
        self.stats = stats if stats is not None else ThrottleStats()
        self.mute_scope = mute_scope
        # Per API key, the newest request version let through (the chain's, once it is built).
        self.newest = [-1] * (max(ClientQuotas.request_api_keys) + 1)
        for key in ClientQuotas.request_api_keys:
            self.newest[key] = ClientQuotas.max_versions[key]
        self._gates: EntityGates | None = None
        # The managers' live rules: a quota added or removed at run time counts from the next request.
        self._request_rules = managers.request.rules

    def gates(self) -> EntityGates | None:
        """The entity gates every connection shares (made on the event loop, at the first connection)."""
        if self.mute_scope is MuteScope.CONNECTION:
            return None
        if self._gates is None:
            self._gates = self.stats.gates = EntityGates()
        return self._gates

    def needs_cpu_time(self) -> bool:
        return self._request_rules.enabled_bits != 0  # a request_percentage quota is configured

    def cpu_time_check(self) -> Callable[[], object]:
        # `needs_cpu_time` as a read of the live rules' bits made in C (NO_QUOTAS is 0): no Python frame.
        return partial(_enabled_bits, self._request_rules)

    def chain_built(self, versions: ChainVersions) -> None:
        for key in ClientQuotas.request_api_keys:
            self.newest[key] = versions.max_versions[key]

    def create(self, conn: ConnectionInfo) -> ClientQuotas:
        return ClientQuotas(conn, self)


# The charges of every Produce and Fetch request and answer, compiled where the install has it
# (proxy/filters/_client_quotas.c: each method's common case written out, every other case handed to the
# Python method, its reference, kept here as `on_request_in_python` and `on_response_in_python`).
on_request_in_python = ClientQuotas.on_request
on_response_in_python = ClientQuotas.on_response


def compiled_twins_of(
    on_request: Callable[..., object], on_response: Callable[..., object]
) -> tuple[object, object]:
    """The compiled (on_request, on_response), which hand what they do not write out to these two."""
    from sluice.proxy.filters import _client_quotas  # type: ignore[attr-defined]

    return _client_quotas.bind(  # type: ignore[no-any-return]
        ClientQuotas,
        {
            "on_request": on_request,
            "on_response": on_response,
            "InFlight": InFlight,
            "RequestHeader": RequestHeader,
            "FrameHead": FrameHead,
            "PRODUCE": int(_PRODUCE),
            "uncharged_keys": _UNCHARGED_KEYS,
            "fetch_keys": _FETCHES,
            "response_header_size": response_header_size,
            "ClientQuotaManager": ClientQuotaManager,
            "RequestQuotaManager": RequestQuotaManager,
            "WindowQuotaSensor": WindowQuotaSensor,
            "QuotaRules": QuotaRules,
            "EntityGates": EntityGates,
            "NANOS_TO_PERCENTAGE_PER_SECOND": NANOS_TO_PERCENTAGE_PER_SECOND,
            "INACTIVE_SENSOR_EXPIRATION_MS": INACTIVE_SENSOR_EXPIRATION_MS,
            "INT32_MAX": _INT32_MAX,
            "to_int32": to_int32,
        },
    )


if not TYPE_CHECKING:  # the type checker reads the Python methods; the compiled ones take the same
    with contextlib.suppress(ImportError):  # (built without a C compiler: the Python methods run)
        ClientQuotas.on_request, ClientQuotas.on_response = compiled_twins_of(
            on_request_in_python, on_response_in_python
        )
