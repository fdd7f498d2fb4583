"""RecentMessages: a usage message read again on its partition is a repeat; other partitions, other
messages and ones older than what is remembered are not."""

from __future__ import annotations

from sluice.quota.usage_duplicates import RecentMessages


def test_a_message_read_again_on_its_partition_is_a_repeat() -> None:
    recent = RecentMessages()
    assert not recent.repeated(0, b"batch one")
    assert not recent.repeated(0, b"batch two")
    assert recent.repeated(0, b"batch one")
    assert not recent.repeated(1, b"batch one")  # another partition: another instance's log


def test_only_the_last_messages_are_remembered() -> None:
    recent = RecentMessages(remembered=2)
    for value in (b"a", b"b", b"c"):
        assert not recent.repeated(0, value)
    assert not recent.repeated(0, b"a")  # forgotten: three came since
    assert recent.repeated(0, b"c")
