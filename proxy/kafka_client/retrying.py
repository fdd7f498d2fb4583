"""One call of the proxy's own client, retried within its time budget (Kafka's delivery.timeout.ms idea).

What Kafka marks retriable (a connection refused or lost, a timeout, NOT_LEADER_OR_FOLLOWER, a topic still
being created) is tried again after Kafka's backoff until the budget is spent; then GaveUp names the last
failure. Anything else is raised at once. The budget bounds the whole call, a slow attempt included.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..observability.log import get_logger
from .backoff import RetryPolicy
from .errors import UNKNOWN_TOPIC_OR_PARTITION, GaveUp, KafkaClientError, KafkaErrorCode

_log = get_logger("sluice.kafka_client")
T = TypeVar("T")


async def retrying(
    what: str,
    attempt: Callable[[], Awaitable[T]],
    budget_s: float,
    policy: RetryPolicy,
    *,
    retry_unknown_topic: bool = True,
) -> T:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + budget_s
    backoff = policy.backoff()
    last: BaseException = TimeoutError("no answer in time")
    while True:
        if loop.time() >= deadline:  # (the budget spent while the last backoff slept a little long)
            raise GaveUp(what, budget_s, last)
        try:
            # In the caller's task, not a task of its own as wait_for made (two turns of the loop more).
            # A request cut short here keeps its place on its connection; its late answer is read and dropped.
            async with asyncio.timeout_at(deadline):
                return await attempt()
        except TimeoutError:
            # The attempt the budget cut short tells less than the failure before it, if there was one.
            raise GaveUp(what, budget_s, last) from None
        except KafkaClientError as exc:
            last = exc
            unknown_topic = isinstance(exc, KafkaErrorCode) and exc.code == UNKNOWN_TOPIC_OR_PARTITION
            if not exc.retriable or (unknown_topic and not retry_unknown_topic):
                raise
            delay = backoff.next()
            if loop.time() + delay >= deadline:
                raise GaveUp(what, budget_s, exc) from None
            _log.debug(
                "kafka_client_retry",
                what=what,
                attempt=backoff.attempts,
                delay_s=round(delay, 3),
                error=str(exc),
            )
            await asyncio.sleep(delay)
