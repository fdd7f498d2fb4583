"""`sluice quotas import`: the brokers' quotas (QuotaBrokerDouble answers 48/49 like a broker) adopted into
Sluice's store topic (on the mock cluster), with a dry run, conflicts, --overwrite and
--remove-from-brokers."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from doubles.quota_broker import QuotaBrokerDouble
from mock_cluster_process import MockCluster

from sluice.config import load_config
from sluice.proxy.control_plane.client_quota_entity import ClientQuotaEntity
from sluice.proxy.control_plane.quota_state import QuotaState
from sluice.proxy.control_plane.quota_store_service import QuotaStoreService
from sluice.proxy.kafka_client import KafkaClient
from sluice.proxy.tools.quotas import import_quotas
from sluice.quota import DEFAULT

E = ClientQuotaEntity
BROKER_QUOTAS = {
    (("client-id", "pump"),): {"producer_byte_rate": 2097152.0},
    (("user", "alice"),): {"consumer_byte_rate": 1048576.0, "request_percentage": 25.0},
    (("user", None), ("client-id", None)): {"producer_byte_rate": 500000.0},
    (("ip", "broker-host.example"),): {"connection_creation_rate": 5.0},
}


@pytest.fixture(scope="module")
def cluster() -> Iterator[MockCluster]:
    with MockCluster(brokers=1, topics={}) as c:
        yield c


@pytest.fixture
def brokers() -> Iterator[QuotaBrokerDouble]:
    with QuotaBrokerDouble(broker_count=3, quotas=BROKER_QUOTAS) as double:
        yield double


def config(cluster: MockCluster, topic: str, entities: list | None = None):
    return load_config(
        overrides={
            "listen": "127.0.0.1:9092",
            "upstream.bootstrap": cluster.bootstrap,
            "quota": {"store": {"topic": topic}, "entities": entities or []},
        }
    )


async def stored(cluster: MockCluster, topic: str) -> dict:
    cfg = config(cluster, topic)
    client = KafkaClient(cluster.addresses, request_timeout_s=10.0)
    state = QuotaState(cfg.quota)
    service = QuotaStoreService(client, state, cfg.quota.store)
    await service.start()
    try:
        assert service.caught_up
        return state.store.snapshot()
    finally:
        await service.stop()
        await client.stop()


async def run(cluster, brokers, topic, *, dry_run=False, overwrite=False, remove=False, entities=None):
    lines: list[str] = []
    code = await import_quotas(
        config(cluster, topic, entities),
        dry_run,
        overwrite,
        remove,
        brokers=[("127.0.0.1", brokers.port)],
        out=lines.append,
    )
    return code, lines


async def test_dry_run_prints_the_plan_and_writes_nothing(cluster, brokers) -> None:
    code, lines = await run(cluster, brokers, "import-dry", dry_run=True, remove=True)
    assert code == 0
    assert lines[0] == "Client quotas found on the brokers: 5 (cluster of 3 brokers)"
    assert "  client-id 'pump': producer_byte_rate=2097152.0: add to Sluice" in lines
    assert any("skipped: broker-host.example is not a valid IP" in line for line in lines)
    assert "Plan: 4 add, 0 same, 0 update, 0 conflict, 1 skip (dry run: nothing written)" in lines
    assert any("could reach 3 x the quota in total" in line for line in lines)
    assert await stored(cluster, "import-dry") == {}
    assert brokers.alter_requests == []


async def test_import_writes_the_store_and_removes_from_the_brokers(cluster, brokers) -> None:
    code, lines = await run(cluster, brokers, "import-real", remove=True)
    assert code == 0, lines
    assert "Wrote 3 entities to the quota store topic import-real." in lines
    assert await stored(cluster, "import-real") == {
        E(client_id="pump"): {"producer_byte_rate": 2097152.0},
        E(user="alice"): {"consumer_byte_rate": 1048576.0, "request_percentage": 25.0},
        E(user=DEFAULT, client_id=DEFAULT): {"producer_byte_rate": 500000.0},
    }
    assert "Removed 4 quota(s) from the brokers." in lines
    # Only the skipped host-name entity stays on the brokers.
    assert brokers.quotas == {frozenset({("ip", "broker-host.example")}): {"connection_creation_rate": 5.0}}
    # Run again: everything Sluice holds is now "same", nothing left to add.
    code, lines = await run(cluster, brokers, "import-real")
    assert "Plan: 0 add, 0 same, 0 update, 0 conflict, 1 skip" in lines


async def test_conflicts_keep_sluices_value_unless_overwriting(cluster, brokers) -> None:
    file_quota = [{"client_id": "pump", "producer_byte_rate": 1000}]
    code, lines = await run(cluster, brokers, "import-conflict", entities=file_quota)
    assert code == 0
    assert any("kept Sluice's 1000.0 (use --overwrite" in line for line in lines)
    assert E(client_id="pump") not in await stored(cluster, "import-conflict")
    code, lines = await run(cluster, brokers, "import-conflict", entities=file_quota, overwrite=True)
    assert any("replace Sluice's 1000.0 (--overwrite)" in line for line in lines)
    assert (await stored(cluster, "import-conflict"))[E(client_id="pump")] == {
        "producer_byte_rate": 2097152.0
    }


def test_the_command_line(cluster, brokers) -> None:
    # A child process, as an operator runs it (the tool sets up logging for its whole process).
    command = [sys.executable, "-m", "sluice.proxy", "quotas", "import", "--upstream", cluster.bootstrap]
    done = subprocess.run(
        [*command, "--brokers", f"127.0.0.1:{brokers.port}", "--dry-run"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "Plan: 4 add" in done.stdout
    bad = subprocess.run([*command[:-2], "--upstream", "nonsense"], capture_output=True, text=True)
    assert bad.returncode == 2 and "upstream.bootstrap" in bad.stderr
