"""KIP-599 partition-mutation quotas through the proxy: spec §6 vectors V10, V11, V12 and V19 and the KIP's
worked example, end to end on the wire.

The librdkafka mock cluster has no CreateTopics, DeleteTopics, CreatePartitions or DescribeConfigs, so the
upstream is `AdminBrokerDouble` (tests/doubles/admin_broker.py), a test double answering them with bytes
built by `protocol/`. Each test uses its own client-id, so each has its own token bucket. Requests meant
to happen "at the same t" go on separate connections: a throttle mutes one connection, not the entity.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from doubles.admin_broker import AdminBrokerDouble
from kafka.admin import KafkaAdminClient
from kafka.errors import ThrottlingQuotaExceededError
from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from kafka.protocol.metadata import MetadataRequest
from proxy_process import ProxyProcess
from rawclient import RawClient
from throttle_harness import metric_value

from sluice.protocol.api_keys import ApiKey
from sluice.protocol.headers import response_header_size

pytestmark = pytest.mark.slow  # end to end: real processes, real clients

QUOTA_EXCEEDED, NONE, UNKNOWN_TOPIC, UNKNOWN_TOPIC_ID = 89, 0, 3, 100
MESSAGE = "The throttling quota has been exceeded."
STRICT_CREATE, PERMISSIVE_CREATE = 7, 5
STRICT_DELETE, PERMISSIVE_DELETE = 5, 4
STRICT_PARTITIONS, PERMISSIVE_PARTITIONS = 3, 2
DEFAULT_PARTITIONS = 7  # the double's num.partitions
# Real time passes between requests sent "at once": the bucket refills Q tokens/s, so a throttle read a few
# milliseconds later is a few milliseconds shorter.
SLACK_MS = 150

# Q per client-id; windows of 10 x 1 s, so B = 10 Q (V10-V12: Q 10, B 100; V19: Q 2, B 20).
ENTITIES = {
    "v10": 10,
    "v11": 10,
    "v12": 10,
    "v19-create-strict": 2,
    "v19-create-permissive": 2,
    "v19-delete-strict": 2,
    "v19-delete-permissive": 2,
    "v19-partitions-strict": 2,
    "v19-partitions-permissive": 2,
    "v19-retry": 2,
    "default-count": 10,
    "validate-exempt": 2,
    "metrics": 2,
    "rdkafka-admin": 10,
    "delete-by-id": 2,
    "pipelined": 10,
    "refund": 2,
    "order": 2,
    "random-ids": 2,
    "unknown-names": 2,
}
V19_TOPICS = (
    {"byid-0": 30, "byid-1": 30, "exists-40": 40, "order-a": 5}
    | {f"v19-{kind}-{i}": 30 for kind in ("del-strict", "del-permissive") for i in range(2)}
    | {f"v19-{kind}-{i}": 1 for kind in ("grow-strict", "grow-permissive") for i in range(2)}
)


@pytest.fixture(scope="module")
def broker() -> Iterator[AdminBrokerDouble]:
    with AdminBrokerDouble(num_partitions=DEFAULT_PARTITIONS, topics=V19_TOPICS) as double:
        yield double


def mutation_proxy(
    broker: AdminBrokerDouble, entities: dict[str, float], samples: int, **mutations
) -> ProxyProcess:
    quota = {
        "controller_window": {"samples": samples, "size_seconds": 1},
        "entities": [{"client_id": c, "controller_mutation_rate": q} for c, q in entities.items()],
    }
    if mutations:
        quota["mutations"] = mutations
    # The proxy's own look-up of the broker's limits (a DescribeConfigs at start) is off: these tests count
    # the DescribeConfigs the topic cache sends.
    upstream = {"bootstrap": [broker.bootstrap], "learn_limits": False}
    return ProxyProcess(broker.bootstrap, extra_config={"quota": quota, "upstream": upstream})


@pytest.fixture(scope="module")
def proxy(broker) -> Iterator[ProxyProcess]:
    with mutation_proxy(broker, ENTITIES, samples=10) as p:
        yield p


def client(proxy: ProxyProcess, client_id: str) -> RawClient:
    return RawClient("127.0.0.1", proxy.port, client_id=client_id)


def create(topics: dict[str, int], version: int, client_: RawClient, validate_only: bool = False):
    return client_.call(_create_request(topics, validate_only), version, CreateTopicsResponse)


def _create_request(topics: dict[str, int], validate_only: bool = False) -> CreateTopicsRequest:
    return CreateTopicsRequest(
        topics=[
            CreateTopicsRequest.CreatableTopic(
                name=name, num_partitions=n, replication_factor=1, assignments=[], configs=[]
            )
            for name, n in topics.items()
        ],
        timeout_ms=5000,
        validate_only=validate_only,
    )


def delete(names: list[str], version: int, client_: RawClient):
    request = DeleteTopicsRequest(topic_names=names, timeout_ms=5000)
    return client_.call(request, version, DeleteTopicsResponse)


def grow(counts: dict[str, int], version: int, client_: RawClient):
    request = CreatePartitionsRequest(
        topics=[
            CreatePartitionsRequest.CreatePartitionsTopic(name=name, count=n, assignments=None)
            for name, n in counts.items()
        ],
        timeout_ms=5000,
        validate_only=False,
    )
    return client_.call(request, version, CreatePartitionsResponse)


def errors(response) -> dict[str, int]:
    results = getattr(response, "topics", None) or getattr(response, "responses", None) or response.results
    return {r.name: r.error_code for r in results}


def assert_near(actual_ms: int, expected_ms: int) -> None:
    assert expected_ms - SLACK_MS <= actual_ms <= expected_ms, (actual_ms, expected_ms)


# ---- V10 / V11: strict and permissive, three charges of 90 at one instant ----------------------------


def test_v10_strict_third_charge_refused_with_89_and_8000_ms(proxy, broker):
    with client(proxy, "v10") as a, client(proxy, "v10") as b, client(proxy, "v10") as c:
        first = create({"v10-a": 90}, STRICT_CREATE, a)
        second = create({"v10-b": 90}, STRICT_CREATE, b)
        third = create({"v10-c": 90}, STRICT_CREATE, c)
    assert errors(first) == {"v10-a": NONE} and first.throttle_time_ms == 0  # 100 -> 10
    assert errors(second) == {"v10-b": NONE} and second.throttle_time_ms == 0  # 10 -> -80, accepted
    assert errors(third) == {"v10-c": QUOTA_EXCEEDED}  # -80 < 0: refused, not recorded
    assert third.topics[0].error_message == MESSAGE
    assert_near(third.throttle_time_ms, 8000)
    forwarded = [t.name for _k, _v, r in broker.received for t in r.topics]
    assert "v10-c" not in forwarded  # Sluice answered by itself
    assert broker.topics["v10-a"] == 90 and "v10-c" not in broker.topics


def test_v11_permissive_never_refuses_and_throttles_8000_then_17000_ms(proxy):
    with client(proxy, "v11") as a, client(proxy, "v11") as b, client(proxy, "v11") as c:
        first = create({"v11-a": 90}, PERMISSIVE_CREATE, a)
        second = create({"v11-b": 90}, PERMISSIVE_CREATE, b)
        third = create({"v11-c": 90}, PERMISSIVE_CREATE, c)
    assert [errors(r) for r in (first, second, third)] == [{"v11-a": 0}, {"v11-b": 0}, {"v11-c": 0}]
    assert first.throttle_time_ms == 0
    assert_near(second.throttle_time_ms, 8000)  # -80
    assert_near(third.throttle_time_ms, 17000)  # -170


# ---- V12: the manager end to end over 11 seconds ------------------------------------------------------


def test_v12_refills_then_accepts_across_zero_and_refuses_below_it(proxy):
    with client(proxy, "v12") as a, client(proxy, "v12") as b:
        started = time.monotonic()
        # The vector's timeline: a request each second while the bucket refills (the time is the event).
        for second in range(10):
            time.sleep(max(0.0, started + second - time.monotonic()))
            response = create({f"v12-{second}": 10}, STRICT_CREATE, a)
            assert errors(response) == {f"v12-{second}": NONE} and response.throttle_time_ms == 0
        time.sleep(max(0.0, started + 10 - time.monotonic()))  # the timeline's tenth second
        crossed_at = time.monotonic()
        crossing = create({"v12-big-1": 110}, STRICT_CREATE, a)  # bucket ~100 >= 0: accepted -> -10
        refused = create({"v12-big-2": 110}, STRICT_CREATE, b)  # -10 < 0: refused, 1000 ms
        # One second after the crossing, measured from no earlier than the proxy saw it (the bucket refills
        # 10 tokens/s, so a request a few ms early would still find it just below zero).
        time.sleep(max(0.0, crossed_at + 1.1 - time.monotonic()))  # the refill's second is the event
        again = create({"v12-big-3": 110}, STRICT_CREATE, a)  # refilled to ~0, not < 0: accepted
    assert errors(crossing) == {"v12-big-1": NONE} and crossing.throttle_time_ms == 0
    assert errors(refused) == {"v12-big-2": QUOTA_EXCEEDED}
    assert 0 < refused.throttle_time_ms <= 1000 + SLACK_MS
    assert errors(again) == {"v12-big-3": NONE}


# ---- V19: every API, strict and permissive ------------------------------------------------------------


def test_v19_create_topics_strict_admits_one_refuses_the_other(proxy, broker):
    with client(proxy, "v19-create-strict") as c:
        response = create({"v19-cs-0": 30, "v19-cs-1": 30}, STRICT_CREATE, c)
    assert errors(response) == {"v19-cs-0": NONE, "v19-cs-1": QUOTA_EXCEEDED}  # client order kept
    assert 0 <= response.throttle_time_ms <= 5000  # 20 - 30 = -10 -> 10 / 2 s
    assert ("v19-cs-0" in broker.topics, "v19-cs-1" in broker.topics) == (True, False)


def test_v19_create_topics_permissive_admits_both(proxy):
    with client(proxy, "v19-create-permissive") as c:
        response = create({"v19-cp-0": 30, "v19-cp-1": 30}, PERMISSIVE_CREATE, c)
    assert errors(response) == {"v19-cp-0": NONE, "v19-cp-1": NONE}
    assert_near(response.throttle_time_ms, 20000)  # 20 - 60 = -40 -> 40 / 2 s


def test_v19_delete_topics_charges_current_partition_counts(proxy, broker):
    metadata_before = broker.metadata_requests
    with client(proxy, "v19-delete-strict") as c:
        strict = delete(["v19-del-strict-0", "v19-del-strict-1"], STRICT_DELETE, c)
    with client(proxy, "v19-delete-permissive") as c:
        permissive = delete(["v19-del-permissive-0", "v19-del-permissive-1"], PERMISSIVE_DELETE, c)
    assert errors(strict) == {"v19-del-strict-0": NONE, "v19-del-strict-1": QUOTA_EXCEEDED}
    assert 0 <= strict.throttle_time_ms <= 5000
    assert errors(permissive) == {"v19-del-permissive-0": NONE, "v19-del-permissive-1": NONE}
    assert_near(permissive.throttle_time_ms, 20000)
    assert "v19-del-strict-1" in broker.topics and "v19-del-permissive-1" not in broker.topics
    assert broker.metadata_requests > metadata_before  # the counts came from the proxy's own Metadata


def test_delete_topics_by_id_counts_partitions_found_by_id(proxy, broker):
    ids = [broker.topic_ids["byid-0"], broker.topic_ids["byid-1"]]
    request = DeleteTopicsRequest(
        topics=[DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=uuid.UUID(bytes=i)) for i in ids],
        timeout_ms=5000,
    )
    with client(proxy, "delete-by-id") as c:
        response = c.call(request, 6, DeleteTopicsResponse)
    assert [(r.topic_id.bytes, r.error_code) for r in response.responses] == [
        (ids[0], NONE),
        (ids[1], QUOTA_EXCEEDED),
    ]
    assert 0 < response.throttle_time_ms <= 5000  # 20 - 30 = -10: 5000 ms
    assert "byid-0" not in broker.topics and "byid-1" in broker.topics


def test_random_topic_ids_in_a_loop_do_not_make_the_proxy_list_every_topic_each_time(proxy, broker):
    """A hostile client deletes made-up topic ids in a loop: only an all-topics Metadata answer can name an
    id, so the proxy starts one at most every ALL_TOPICS_INTERVAL_MS (5 s), not one per request."""
    before = broker.metadata_requests
    started = time.monotonic()
    with client(proxy, "random-ids") as c:
        for _ in range(20):
            request = DeleteTopicsRequest(
                topics=[DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=uuid.uuid4())],
                timeout_ms=5000,
            )
            response = c.call(request, 6, DeleteTopicsResponse)
            assert response.responses[0].error_code == UNKNOWN_TOPIC_ID  # forwarded: the broker says so
    elapsed = time.monotonic() - started
    assert broker.metadata_requests - before <= 1 + int(elapsed / 5)


def test_an_unknown_topic_name_is_looked_up_once_within_the_cache_time(proxy, broker):
    before = broker.metadata_requests
    with client(proxy, "unknown-names") as c:
        for _ in range(10):
            assert errors(delete(["no-such-topic"], STRICT_DELETE, c)) == {"no-such-topic": UNKNOWN_TOPIC}
    assert broker.metadata_requests - before == 1


def test_v19_create_partitions_charges_the_increase(proxy):
    with client(proxy, "v19-partitions-strict") as c:
        strict = grow({"v19-grow-strict-0": 31, "v19-grow-strict-1": 31}, STRICT_PARTITIONS, c)
    with client(proxy, "v19-partitions-permissive") as c:
        permissive = grow(
            {"v19-grow-permissive-0": 31, "v19-grow-permissive-1": 31}, PERMISSIVE_PARTITIONS, c
        )
    assert errors(strict) == {"v19-grow-strict-0": NONE, "v19-grow-strict-1": QUOTA_EXCEEDED}
    assert 0 <= strict.throttle_time_ms <= 5000
    assert errors(permissive) == {"v19-grow-permissive-0": NONE, "v19-grow-permissive-1": NONE}
    assert_near(permissive.throttle_time_ms, 20000)


def test_v19_a_client_without_a_quota_is_never_throttled(proxy):
    with client(proxy, "no-quota-here") as c:
        response = create({"free-0": 30, "free-1": 30}, STRICT_CREATE, c)
    assert errors(response) == {"free-0": NONE, "free-1": NONE} and response.throttle_time_ms == 0


def test_v19_retrying_the_refused_topic_after_the_throttle_succeeds(proxy):
    with client(proxy, "v19-retry") as c:
        first = create({"v19-r-0": 30, "v19-r-1": 30}, STRICT_CREATE, c)
        assert errors(first)["v19-r-1"] == QUOTA_EXCEEDED
        # The mute holds this request until the throttle has passed; by then the bucket is back at 0.
        retried = create({"v19-r-1": 30}, STRICT_CREATE, c)
    assert errors(retried) == {"v19-r-1": NONE} and retried.throttle_time_ms == 0


# ---- counting and validate_only -----------------------------------------------------------------------


def test_num_partitions_minus_one_is_charged_the_clusters_default(proxy, broker):
    before = broker.describe_configs_requests
    with client(proxy, "default-count") as c:
        create({"dflt-0": -1}, STRICT_CREATE, c)
        create({"dflt-1": -1}, STRICT_CREATE, c)
    assert broker.describe_configs_requests == before + 1  # learnt once, then cached
    tokens = metric_value(
        proxy.metrics_text(), "sluice_quota_tokens", type="ControllerMutation", client_id="default-count"
    )
    assert 100 - 2 * DEFAULT_PARTITIONS <= tokens < 100 - 2 * DEFAULT_PARTITIONS + 1


def test_validate_only_is_exempt_by_default(proxy):
    with client(proxy, "validate-exempt") as c:
        checked = create({"vo-0": 1000}, STRICT_CREATE, c, validate_only=True)
        real = create({"vo-1": 10}, STRICT_CREATE, c)
    assert errors(checked) == {"vo-0": NONE} and checked.throttle_time_ms == 0
    assert errors(real) == {"vo-1": NONE}  # the bucket (20) was untouched by the 1000


def test_validate_only_charge_counts_like_a_kraft_controller(broker):
    with (
        mutation_proxy(broker, {"vo-charge": 2}, samples=10, validate_only="charge") as p,
        client(p, "vo-charge") as a,
        client(p, "vo-charge") as b,
    ):
        checked = create({"voc-0": 1000}, STRICT_CREATE, a, validate_only=True)
        refused = create({"voc-1": 1}, STRICT_CREATE, b)
    assert errors(checked) == {"voc-0": NONE}
    assert errors(refused) == {"voc-1": QUOTA_EXCEEDED}


def test_num_partitions_override_is_charged_without_asking(broker):
    before = broker.describe_configs_requests
    with mutation_proxy(broker, {"override": 2}, samples=10, num_partitions=5) as p:
        with client(p, "override") as c:
            response = create({"ovr-0": -1}, STRICT_CREATE, c)
        tokens = metric_value(p.metrics_text(), "sluice_quota_tokens", type="ControllerMutation")
    assert errors(response) == {"ovr-0": NONE}
    assert broker.describe_configs_requests == before
    assert 20 - 5 <= tokens < 20 - 5 + 1
    assert broker.topics["ovr-0"] == DEFAULT_PARTITIONS  # the broker used its own default, as it would


def test_a_topic_the_broker_refuses_is_refunded(proxy):
    with client(proxy, "refund") as c:
        exists = create({"exists-40": 40}, STRICT_CREATE, c)  # TOPIC_ALREADY_EXISTS: a broker charges nothing
        after = create({"after-refund": 10}, STRICT_CREATE, c)
    assert errors(exists) == {"exists-40": 36} and exists.throttle_time_ms == 0
    assert errors(after) == {"after-refund": NONE}  # admitted: the bucket is back at 20
    tokens = metric_value(
        proxy.metrics_text(), "sluice_quota_tokens", type="ControllerMutation", client_id="refund"
    )
    assert 10 <= tokens < 11


def test_pipelined_mutations_wait_behind_a_throttled_one(proxy, broker):
    """The mute starts when a request is charged, so a pipelined one behind it is neither forwarded nor
    charged until the throttle is over (permissive, as librdkafka pipelines)."""
    with client(proxy, "pipelined") as c:
        first_id = c.send(_create_request({"pipe-0": 120}), PERMISSIVE_CREATE)  # 100 - 120 = -20: 2000 ms
        second_id = c.send(_create_request({"pipe-1": 1}), PERMISSIVE_CREATE)
        first = c.receive_frame()
        first_at = time.monotonic()
        second = c.receive_frame()
        waited = time.monotonic() - first_at
    assert [int.from_bytes(f[4:8], "big") for f in (first, second)] == [first_id, second_id]
    body = first[4 + response_header_size(ApiKey.CREATE_TOPICS, PERMISSIVE_CREATE, first) :]
    throttle = CreateTopicsResponse[PERMISSIVE_CREATE].decode(body).throttle_time_ms
    assert_near(throttle, 2000)
    assert waited >= 1.8, waited
    assert broker.topics["pipe-0"] == 120 and broker.topics["pipe-1"] == 1


def test_answers_keep_request_order_through_lookups_and_own_answers(proxy, broker):
    """Pipelined on one connection: a DeleteTopics that waits for the proxy's own Metadata look-up, a
    Metadata request behind it, an admitted CreateTopics, and one Sluice refuses by itself. The client
    gets four answers in its own order."""
    with client(proxy, "order") as c:
        ids = [
            c.send(DeleteTopicsRequest(topic_names=["order-a"], timeout_ms=5000), STRICT_DELETE),  # 20 -> 15
            c.send(MetadataRequest(topics=[]), 1),
            c.send(_create_request({"order-b": 30}), STRICT_CREATE),  # 15 >= 0: admitted, -> -15
            c.send(_create_request({"order-c": 1}), STRICT_CREATE),  # -15 < 0: refused by Sluice
        ]
        frames = [c.receive_frame() for _ in ids]
    assert [int.from_bytes(f[4:8], "big") for f in frames] == ids
    refused = frames[3][4 + response_header_size(ApiKey.CREATE_TOPICS, STRICT_CREATE, frames[3]) :]
    assert CreateTopicsResponse[STRICT_CREATE].decode(refused).topics[0].error_code == QUOTA_EXCEEDED
    assert (
        "order-a" not in broker.topics and broker.topics["order-b"] == 30 and "order-c" not in broker.topics
    )


def test_metrics_show_tokens_rate_and_throttle_time_per_entity(proxy):
    with client(proxy, "metrics") as c:
        create({"m-0": 30}, PERMISSIVE_CREATE, c)  # 20 - 30 = -10: 5000 ms
    text = proxy.metrics_text()
    labels = {"client_id": "metrics"}
    assert metric_value(text, "sluice_quota_tokens", type="ControllerMutation", **labels) < 0
    assert metric_value(text, "sluice_mutation_rate", **labels) > 0
    assert metric_value(text, "sluice_throttle_time_ms_total", type="ControllerMutation", **labels) > 4000


# ---- the KIP-599 example ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kip599_proxy(broker) -> Iterator[ProxyProcess]:
    """controller_mutation_rate = 5 with a controller window of 100 samples x 1 s: B = 500."""
    with mutation_proxy(broker, {"kip": 5, "kip-admin": 5}, samples=100) as p:
        yield p


def test_kip599_example_560_partitions_then_12000_ms(kip599_proxy):
    with client(kip599_proxy, "kip") as a, client(kip599_proxy, "kip") as b:
        burst = create({f"kip-{i}": 80 for i in range(7)}, STRICT_CREATE, a)  # 500 -> -60
        refused = create({"kip-7": 1}, STRICT_CREATE, b)
    assert set(errors(burst).values()) == {NONE} and burst.throttle_time_ms == 0
    assert errors(refused) == {"kip-7": QUOTA_EXCEEDED}
    assert_near(refused.throttle_time_ms, 12000)


def test_kip599_example_kafka_python_admin_surfaces_error_89(kip599_proxy):
    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{kip599_proxy.port}", client_id="kip-admin")
    try:
        burst = admin.create_topics(
            {f"kipa-{i}": {"num_partitions": 80, "replication_factor": 1} for i in range(7)}
        )
        assert {t["error_code"] for t in burst["topics"]} == {NONE}
        with pytest.raises(ThrottlingQuotaExceededError):
            admin.create_topics({"kipa-7": {"num_partitions": 1, "replication_factor": 1}})
    finally:
        admin.close()


# ---- librdkafka: permissive versions only (spec 7.2) ----------------------------------------------------


def test_librdkafka_admin_gets_the_throttle_and_the_mute_never_89(proxy, broker):
    throttles: list[float] = []
    admin = AdminClient(
        {
            "bootstrap.servers": f"127.0.0.1:{proxy.port}",
            "client.id": "rdkafka-admin",
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
        }
    )
    # B = 100: 140 partitions take the bucket to -40, a 4,000 ms throttle (CreateTopics v4: permissive).
    admin.create_topics([NewTopic("rdk-0", 140, 1)])["rdk-0"].result(10)
    started = time.monotonic()
    admin.create_topics([NewTopic("rdk-1", 1, 1)])["rdk-1"].result(15)  # muted until the throttle ends
    waited = time.monotonic() - started
    admin.poll(0.5)
    assert broker.topics["rdk-0"] == 140 and broker.topics["rdk-1"] == 1  # never refused
    assert waited >= 3.5, waited
    assert throttles and 3.8 <= max(throttles) <= 4.0, throttles
    versions = {v for k, v, r in broker.received if k == 19 and r.topics[0].name.startswith("rdk-")}
    assert versions and max(versions) < 6, versions  # CreateTopics v6+ would be strict
