"""A share group's ShareFetch (KIP-932) is charged to consumer_byte_rate as Kafka charges it: the answer's
size + 4, the request's max_bytes capped at what the quota window holds, and a throttled answer carries the
throttle (KIP-219 mute) but keeps its records, which the broker already acquired for this consumer.

In process, through ClientQuotas on a manual clock; the ShareFetch bodies are built from Kafka's own schemas
(beside the repository: skipped, saying so, where they are missing), since kafka-python has no ShareFetch.
"""

from __future__ import annotations

import pytest
from kafka_schemas import SHARED_MISSING
from node_endpoint_answers import answer
from schema_codec import decode, encode, message_schema

from sluice.config.quota_settings import ThrottleMode
from sluice.protocol.api_keys import ApiKey
from sluice.protocol.errors import ProtocolError
from sluice.protocol.headers import RequestHeader, encode_request, encode_response, parse_request_header
from sluice.protocol.share_fetch import cap_share_fetch_request, share_fetch_request_limits
from sluice.proxy.data_path.filter_chain import FilterChain
from sluice.proxy.filter_api import InFlight, Respond
from sluice.proxy.filters.client_quotas import ClientQuotasFactory
from sluice.proxy.observability.quota_metrics import ThrottleStats
from sluice.quota import QuotaEntity, QuotaKey, QuotaManagers

pytestmark = pytest.mark.skipif(SHARED_MISSING is not None, reason=SHARED_MISSING or "")

SHARE_FETCH = ApiKey.SHARE_FETCH
CLIENT = "share-consumer"


class Connection:
    def __init__(self) -> None:
        self.now = 1_000_000
        self.peer, self.upstream_peer, self.listener, self.user = "127.0.0.1:1", "127.0.0.1:2", "b", "alice"

    def now_ms(self) -> int:
        return self.now

    def read_ms(self) -> int:
        return self.now

    def take_cpu_ns(self) -> int:
        return 0

    def mute_remaining_ms(self) -> int:
        return 0


def share_fetch_request(version: int, max_bytes: int, min_bytes: int = 1) -> bytes:
    schema = message_schema(SHARE_FETCH, "request", version)
    body = encode(
        schema,
        version,
        {"GroupId": "g", "MemberId": "m-1", "ShareSessionEpoch": 0, "MaxWaitMs": 500, "MinBytes": min_bytes,
         "MaxBytes": max_bytes, "MaxRecords": 500, "BatchSize": 500},
    )  # fmt: skip
    return encode_request(SHARE_FETCH, version, 5, CLIENT, body)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_the_request_limits_are_read_and_capped_in_place(version: int) -> None:
    frame = share_fetch_request(version, max_bytes=1 << 20, min_bytes=5000)
    body = bytearray(frame[4 + parse_request_header(frame).size :])
    assert share_fetch_request_limits(version, body) == (5000, 1 << 20)
    assert cap_share_fetch_request(version, body, 4000.9)
    assert share_fetch_request_limits(version, body) == (4000, 4000)
    assert not cap_share_fetch_request(version, body, 10**12)
    decoded = decode(message_schema(SHARE_FETCH, "request", version), version, bytes(body))
    assert (decoded["MinBytes"], decoded["MaxBytes"], decoded["MemberId"]) == (4000, 4000, "m-1")
    with pytest.raises(ProtocolError):
        share_fetch_request_limits(version, body[:5])


def chain(managers: QuotaManagers) -> FilterChain:
    return FilterChain([ClientQuotasFactory(managers, stats=ThrottleStats())])


def test_a_share_fetch_is_charged_capped_and_throttled_with_its_records_kept() -> None:
    managers = QuotaManagers()
    managers.set_quota(QuotaEntity(client_id=CLIENT), QuotaKey.CONSUMER_BYTE_RATE, 20)
    conn = Connection()
    mutes: list[int] = []
    filters = chain(managers).for_connection(conn, mutes.append)

    request = share_fetch_request(1, max_bytes=1 << 20)
    header = parse_request_header(request)
    capped = filters.on_request(header, request)
    cap = int(managers.fetch.max_value_in_quota_window("alice", CLIENT))
    assert cap < 1 << 20
    assert share_fetch_request_limits(1, memoryview(capped)[4 + header.size :])[1] == cap

    schema, body = answer(SHARE_FETCH, 1, [])  # three topics of small record sets: ~1 kB, over 10 s of quota
    frame = encode_response(SHARE_FETCH, 1, 5, body)
    inflight = InFlight(RequestHeader(SHARE_FETCH, 1, 5, CLIENT, header.size))
    out = filters.on_response(inflight, frame)
    # KIP-219: answered at once (no Respond delay), the connection muted for the throttle.
    assert type(out) is not Respond and len(mutes) == 1 and mutes[0] > 0
    throttled = decode(schema, 1, bytes(memoryview(out)[4 + 5 :]))
    assert throttled["ThrottleTimeMs"] == mutes[0]
    assert throttled["Responses"] == decode(schema, 1, body)["Responses"]  # every record still there
    sensor = managers.fetch.sensor_for("alice", CLIENT, conn.now)
    assert sensor.rate.total(conn.now) == len(body) + 4  # FetchResponse.sizeOf: the body, + 4


@pytest.mark.parametrize("version", [0, 1, 2])
def test_under_throttle_mode_auto_a_share_fetch_is_held_since_no_version_makes_its_client_back_off(
    version: int,
) -> None:
    """Kafka's ShareFetchResponse never says its client throttles itself (shouldClientThrottle is false in
    every version), so `auto` holds the answer for the throttle, as `delay` does, and mutes nothing."""
    managers = QuotaManagers()
    managers.set_quota(QuotaEntity(client_id=CLIENT), QuotaKey.CONSUMER_BYTE_RATE, 20)
    mutes: list[int] = []
    factory = ClientQuotasFactory(managers, ThrottleMode.AUTO, stats=ThrottleStats())
    filters = FilterChain([factory]).for_connection(Connection(), mutes.append)
    schema, body = answer(SHARE_FETCH, version, [])
    frame = encode_response(SHARE_FETCH, version, 5, body)
    out = filters.on_response(InFlight(RequestHeader(SHARE_FETCH, version, 5, CLIENT, 0)), frame)
    assert type(out) is Respond and out.delay_ms > 0
    assert mutes == []
    held = decode(schema, version, bytes(memoryview(out.frame)[4 + 5 :]))
    assert held["ThrottleTimeMs"] == out.delay_ms  # told, as a broker of before KIP-219 tells it
    assert held["Responses"] == decode(schema, version, body)["Responses"]
