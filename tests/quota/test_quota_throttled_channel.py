"""Throttled-channel expiry order (spec §2.8, V18)."""

from __future__ import annotations

from kafka_throttled_channel import ThrottledChannel, ThrottleQueue


# V18: ThrottledChannelExpirationTest. Channels made at t = 0 with delays 10, 30, 30, 20 ms.
def test_v18_reaper_releases_one_channel_per_poll_in_deadline_order() -> None:
    queue = ThrottleQueue()
    for key, delay in enumerate((10, 30, 30, 20)):
        queue.add(ThrottledChannel(0, delay, key))
    assert len(queue) == 4
    ended: list[object] = []
    expected = [(10, 1), (20, 2), (30, 3), (30, 4), (30, 4)]  # (clock, cumulative endThrottling calls)
    for clock, cumulative in expected:
        channel = queue.poll(clock)
        if channel is not None:
            ended.append(channel.key)
        assert len(ended) == cumulative
    assert ended == [0, 3, 1, 2]  # the two 30 ms channels in the order they were throttled
    assert len(queue) == 0


def test_v18_remaining_time_goes_negative_after_the_deadline() -> None:
    channels = [ThrottledChannel(0, delay) for delay in (10, 20, 20)]
    assert [[c.remaining_ms(t) for c in channels] for t in (0, 10, 20)] == [
        [10, 20, 20],
        [0, 10, 10],
        [-10, 0, 0],
    ]


def test_nothing_is_released_before_its_deadline() -> None:
    queue = ThrottleQueue()
    queue.add(ThrottledChannel(100, 2100))
    assert queue.next_deadline_ms() == 2200
    assert queue.poll(2199) is None
    assert queue.poll(2200) is not None
    assert queue.next_deadline_ms() is None
