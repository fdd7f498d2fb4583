"""The usage plane of one process, built from the `usage` and `fleet` sections: the ledger the filters
record into, the publisher, and (in a fleet) the follower that charges the other instances' usage.

Nothing is built while `usage.enabled` is false: no filter, no service, no cost on the data path.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Protocol

from sluice.config.model import ProxyConfig
from sluice.quota import QuotaManagers
from sluice.quota.broker_fleet import charge_brokers
from sluice.quota.broker_shield import BrokerShield
from sluice.quota.fleet import FleetQuotas
from sluice.quota.usage_ledger import UsageLedger, bounds_in_force
from sluice.quota.usage_records import UsageBatch

from ..cluster.broker_nodes import BrokerNodes
from ..filter_api.contract import FilterFactory
from ..filters.usage_recorder import TopicNames, UsageRecorderFactory, UsageRecording
from ..services import Service
from .fleet_follower import BatchCharge, FleetFollower, UsageConsumer
from .usage_metrics import UsageCollector
from .usage_publisher import UsageProducer, UsagePublisher


class UsageClient(UsageProducer, UsageConsumer, Protocol):
    """The proxy's own Kafka client, as the usage plane uses it."""


def default_instance_id(config: ProxyConfig) -> str:
    """<advertised host>:<listen port>/<pid>: unique per process, also among `--workers` on one port."""
    return f"{config.advertised_host}:{config.listen.port}/{os.getpid()}"


class UsagePlane:
    def __init__(
        self,
        config: ProxyConfig,
        managers: QuotaManagers,
        client: UsageClient,
        topic_names: TopicNames | None = None,
        nodes: BrokerNodes | None = None,
        brokers: Callable[[], BrokerShield | None] | None = None,
    ) -> None:
        """`nodes` tells which broker a connection reaches (the topic rows' broker); `brokers` gives the
        broker shield in force, which in a fleet is charged the other instances' bytes per broker."""
        usage, fleet = config.usage, config.fleet
        self.instance = usage.instance_id or default_instance_id(config)
        self.ledger = UsageLedger(self.instance, max_entities=usage.max_entities)
        self.recording = (
            UsageRecording(self.ledger, topic_names) if topic_names else UsageRecording(self.ledger)
        )
        self._nodes = nodes
        self.publisher = UsagePublisher(client, self.ledger, usage, bounds=bounds_in_force(managers))
        self.fleet: FleetQuotas | None = None
        self.follower: FleetFollower | None = None
        if fleet.enabled:
            self.fleet = FleetQuotas(managers, self.instance, fleet.share, interval_ms=usage.interval_ms)
            self.fleet.install()
            windows = (config.quota.engine.client_window, config.quota.engine.controller_window)
            catch_up_ms = max(w.num_samples * w.window_ms for w in windows)
            also = [self._broker_charge(brokers)] if brokers is not None else []
            self.follower = FleetFollower(client, self.fleet, usage.topic, catch_up_ms=catch_up_ms, also=also)

    def _broker_charge(self, brokers: Callable[[], BrokerShield | None]) -> BatchCharge:
        def charge(batch: UsageBatch, now_ms: int, wall_ms: int) -> int:
            shield = brokers()  # the one in force now: a reload may bring or take it
            return 0 if shield is None else charge_brokers(shield, batch, self.instance, now_ms, wall_ms)

        return charge

    def filters(self) -> list[FilterFactory]:
        return [UsageRecorderFactory(self.recording, self._nodes)]

    def services(self) -> list[Service]:
        """After the Kafka client; the follower last, so it stops first."""
        services: list[Service] = [self.publisher]
        if self.follower is not None:
            services.append(self.follower)
        return services

    def collector(self) -> UsageCollector:
        return UsageCollector(
            self.ledger,
            self.publisher.stats,
            self.fleet,
            self.follower.stats if self.follower is not None else None,
        )
