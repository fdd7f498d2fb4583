"""Topic-level produce quotas (seeds/broker-side-topic-quota-v1.txt), throttling instead of dropping."""

from __future__ import annotations

import pytest

from sluice.quota.errors import QuotaConfigError
from sluice.quota.keys import SensorKind
from sluice.quota.topic_quotas import TopicQuotas


def _quotas() -> TopicQuotas:
    quotas = TopicQuotas(1000)
    quotas.set_topics(["a", "b", "c", "d"])
    quotas.set_threshold("a", 300)
    quotas.set_threshold("b", 200)
    return quotas


def test_topics_without_a_threshold_share_what_is_left_equally() -> None:
    quotas = _quotas()
    assert [quotas.threshold(t) for t in "abcd"] == [300, 200, 250, 250]
    assert quotas.implicit_share == 250


def test_the_share_is_recomputed_when_topics_or_thresholds_change() -> None:
    quotas = _quotas()
    quotas.add_topic("e")
    assert quotas.threshold("c") == pytest.approx(500 / 3)
    quotas.set_threshold("b", None)
    assert quotas.threshold("b") == quotas.threshold("c") == 700 / 4
    quotas.remove_topic("e")
    assert quotas.threshold("c") == 700 / 3
    quotas.set_total(2000)
    assert quotas.threshold("c") == 1700 / 3


def test_explicit_thresholds_may_not_exceed_the_total() -> None:
    quotas = _quotas()
    with pytest.raises(QuotaConfigError):
        quotas.set_threshold("c", 600)  # 300 + 200 + 600 > 1000
    assert quotas.threshold("c") == 250  # nothing changed
    quotas.set_threshold("a", 800)  # replacing a's own threshold: 800 + 200 == 1000 is allowed
    assert quotas.threshold("c") == 0
    with pytest.raises(QuotaConfigError):
        quotas.set_total(999)
    assert quotas.total_bytes_per_s == 1000


def test_a_topic_seen_for_the_first_time_joins_the_share() -> None:
    quotas = _quotas()
    quotas.record("new-topic", 1, 0)
    assert "new-topic" in quotas.topics
    assert quotas.threshold("c") == pytest.approx(500 / 3)


def test_set_topics_keeps_topics_with_explicit_thresholds() -> None:
    quotas = _quotas()
    quotas.set_topics(["c"])
    assert quotas.topics == {"a", "b", "c"}
    assert quotas.threshold("c") == 500


def _both_over_setup() -> TopicQuotas:
    # total 1000 B/s, a: 100 B/s, b: 800 B/s. Fresh sensors divide by the 10 s minimum window.
    quotas = TopicQuotas(1000)
    quotas.set_threshold("a", 100)
    quotas.set_threshold("b", 800)
    return quotas


def test_a_topic_over_its_threshold_is_not_throttled_while_the_total_has_headroom() -> None:
    quotas = _both_over_setup()
    assert quotas.record("a", 5000, 0) == 0  # a at 500 B/s > 100, total at 500 B/s <= 1000
    assert quotas.rate("a", 0) == 500


def test_a_topic_within_its_threshold_is_not_throttled_when_the_total_is_over() -> None:
    quotas = _both_over_setup()
    quotas.record("a", 5000, 0)
    assert quotas.record("b", 6000, 0) == 0  # total 1100 B/s > 1000, b at 600 B/s <= 800


def test_both_over_throttles_until_either_is_back_under() -> None:
    quotas = _both_over_setup()
    quotas.record("a", 5000, 0)
    quotas.record("b", 6000, 0)
    # a: 6000 B over 10 s = 600 B/s -> 50,000 ms to reach 100; total: 12,000 B -> 2,000 ms to reach 1000.
    assert quotas.record("a", 1000, 0) == 2000


def test_violating_bytes_are_counted_not_dropped() -> None:
    quotas = _both_over_setup()
    quotas.record("a", 5000, 0)
    quotas.record("b", 6000, 0)
    assert quotas.record("a", 1000, 0) > 0
    assert quotas.rate("a", 0) == 600  # the throttled request's bytes are in the rate


def test_a_request_with_several_topics_takes_the_largest_throttle() -> None:
    quotas = TopicQuotas(1000)
    quotas.set_threshold("a", 100)
    quotas.set_threshold("b", 100)
    quotas.set_threshold("c", 800)
    # c at 1200 B/s needs 5,000 ms, the total at 1200 B/s needs 2,000 ms: the smaller one ends the violation.
    assert quotas.record("c", 12_000, 0) == 2000
    # Now a needs 1,000 ms, b 2,000 ms, the total (14,300 B) 4,300 ms: each topic takes min(own, total),
    # and the request the largest of those.
    assert quotas.record_request([("a", 1100), ("b", 1200)], 0) == 2000


def test_a_topic_with_a_zero_share_is_throttled_whenever_the_total_is_over() -> None:
    quotas = TopicQuotas(1000)
    quotas.set_threshold("a", 1000)
    quotas.add_topic("z")
    assert quotas.threshold("z") == 0
    assert quotas.record("z", 5000, 0) == 0  # total under
    assert quotas.record("z", 6000, 0) == 1000  # total 1100 B/s: the total's throttle


def test_token_bucket_topic_quotas() -> None:
    quotas = TopicQuotas(1000, sensor_kind=SensorKind.TOKEN_BUCKET)  # total B = 11,000
    quotas.set_threshold("a", 100)  # B = 1,100
    assert quotas.record("a", 5000, 0) == 0  # a's bucket is negative, the total's is not
    assert quotas.record("a", 7000, 0) == 1000  # total -1000 tokens -> 1 s; a -10,900 -> 109 s


@pytest.mark.parametrize(
    "action",
    [
        lambda q: q.set_threshold("", 10),
        lambda q: q.set_threshold("a", -1),
        lambda q: q.set_threshold("a", float("nan")),
        lambda q: q.add_topic(5),
        lambda q: q.set_total(0),
    ],
)
def test_bad_input_is_one_typed_error(action: object) -> None:
    with pytest.raises(QuotaConfigError):
        action(_quotas())  # type: ignore[operator]


def test_bad_total_is_one_typed_error() -> None:
    with pytest.raises(QuotaConfigError):
        TopicQuotas(-5)
