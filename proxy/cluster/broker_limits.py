"""What the brokers accept, learned from them: the `broker_limits` service.

Once discovery knows the brokers, the proxy's own Kafka client asks each one (DescribeConfigs, BROKER
resource) for two of its settings:

* `socket.request.max.bytes` (Kafka's default 100 MiB): the largest request the broker reads; a larger
  one makes it drop the connection. The smallest any broker gives caps every client request (with
  `max_frame_bytes`): a request the cluster would refuse is refused by the proxy, before it is read;
* `queued.max.request.bytes` (Kafka's default -1, no bound): the bytes of requests a broker holds before it
  stops reading. When a broker sets it and `upstream.max_in_flight_bytes_per_broker` is not configured,
  the smallest value any broker gives bounds the bytes in flight toward each broker
  (proxy/data_path/broker_load.py).

`message.max.bytes` is not used: it bounds each record batch, not a request, which may carry a batch for
many partitions (and a topic may raise it with max.message.bytes).

A broker that cannot answer (no DescribeConfigs, as librdkafka's mock cluster; an ACL refusing the
proxy's principal DESCRIBE_CONFIGS on the cluster) is logged once (`broker_limits_unknown`) and the
configured values stand. With `upstream.learn_limits: false` nothing is asked.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable

from ..kafka_client import KafkaClient, KafkaClientError
from ..observability.log import get_logger

_log = get_logger("sluice.broker_limits")

REQUEST_MAX = "socket.request.max.bytes"
QUEUED_MAX = "queued.max.request.bytes"
NAMES = (REQUEST_MAX, QUEUED_MAX)
# How often brokers not asked yet (new, or not yet known) are looked for.
RECHECK_S = 5.0
ASK_TIMEOUT_S = 10.0


class BrokerLimits:
    """A service: ask every broker, once, what it accepts; report the cluster's smallest values."""

    name = "broker_limits"

    def __init__(
        self,
        client: KafkaClient,
        brokers: Callable[[], Iterable[int]],
        on_request_max: Callable[[int], None],
        on_queued_max: Callable[[int], None],
    ) -> None:
        """`brokers()`: the node ids known now; `on_request_max(bytes)` and `on_queued_max(bytes)` are
        told the smallest values learned so far (queued: only positive ones)."""
        self._client = client
        self._brokers = brokers
        self._on_request_max = on_request_max
        self._on_queued_max = on_queued_max
        self._asked: set[int] = set()
        self.request_max: dict[int, int] = {}
        self.queued_max: dict[int, int] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            for node in self._brokers():
                if node not in self._asked:
                    await self.ask(node)
            await asyncio.sleep(RECHECK_S)

    async def ask(self, node: int) -> None:
        """Ask broker `node` (once: a broker that cannot answer is not asked again)."""
        self._asked.add(node)
        try:
            values = await self._client.broker_configs(node, NAMES, timeout_s=ASK_TIMEOUT_S)
        except KafkaClientError as exc:
            _log.warning("broker_limits_unknown", node_id=node, error=str(exc))
            return
        learned: dict[str, int] = {}
        for name, value in values.items():
            if value is not None:  # absent
                with contextlib.suppress(ValueError):  # not a number
                    learned[name] = int(value)
        request_max = learned.get(REQUEST_MAX)
        if request_max is not None and request_max > 0:
            self.request_max[node] = request_max
            self._on_request_max(min(self.request_max.values()))
        queued_max = learned.get(QUEUED_MAX)
        if queued_max is not None and queued_max > 0:
            self.queued_max[node] = queued_max
            self._on_queued_max(min(self.queued_max.values()))
        fields = {name.replace(".", "_"): value for name, value in learned.items()}
        _log.info("broker_limits_learned", node_id=node, **fields)
