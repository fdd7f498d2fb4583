"""Usage messages written twice: delivery to the usage topic is at least once.

A publisher's produce retried after a lost connection may write its messages again (docs/usage-records.md);
both copies carry the same instance, interval and rows. A reader that charges or counts both adds bytes
that were admitted once, so readers drop a message equal to one they read recently on the same partition.
One instance's messages stay on one partition in order and a retry re-sends what the failed produce held,
so its copies follow the originals within the publisher's buffer (`usage.buffer_batches`, default 300);
`RecentMessages` remembers more than that per partition. The parts of a split batch differ in their rows
and are kept. Sans-IO.
"""

from __future__ import annotations

import hashlib
from collections import deque

# Messages remembered per partition: more than a publisher's default buffer can hold.
DEFAULT_REMEMBERED = 1_024


class RecentMessages:
    """Whether a usage message was read already, among the last `remembered` of its partition."""

    __slots__ = ("_order", "_remembered", "_seen")

    def __init__(self, remembered: int = DEFAULT_REMEMBERED) -> None:
        self._remembered = remembered
        self._seen: dict[int, set[bytes]] = {}
        self._order: dict[int, deque[bytes]] = {}

    def repeated(self, partition: int, value: bytes) -> bool:
        """True for a message equal to one of the last `remembered` read on `partition`; else remembers
        it and returns False."""
        digest = hashlib.blake2b(value, digest_size=16).digest()
        seen = self._seen.setdefault(partition, set())
        if digest in seen:
            return True
        order = self._order.setdefault(partition, deque())
        seen.add(digest)
        order.append(digest)
        if len(order) > self._remembered:
            seen.discard(order.popleft())
        return False
