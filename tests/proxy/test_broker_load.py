"""The limit on bytes in flight toward each broker (proxy/data_path/broker_load.py): configured, or learned
from the brokers' queued.max.request.bytes, or 256 MiB. How requests wait for it: test_request_pipeline.py."""

from __future__ import annotations

from sluice.proxy.data_path.broker_load import DEFAULT_MAX_IN_FLIGHT_BYTES, BrokerLoads

MIB = 1 << 20


def test_the_limit_is_configured_or_learned_from_the_brokers() -> None:
    learned = BrokerLoads(None)
    assert learned.limit == DEFAULT_MAX_IN_FLIGHT_BYTES
    share = learned.share("broker:9092")
    learned.learned(8 * MIB)  # queued.max.request.bytes: loads already made follow it
    assert learned.limit == 8 * MIB and share._load.limit == 8 * MIB
    configured = BrokerLoads(MIB)
    configured.learned(8 * MIB)
    assert configured.share("broker:9092")._load.limit == MIB  # the configuration wins
