"""docker-compose.yml and the Grafana dashboard, checked without a Docker engine.

* the compose file's shape: three KRaft brokers that agree on their quorum, Sluice built from this
  repository with its configuration mounted, producers with and without quotas and a consumer under one
  (their client-ids matched against the quota section), Prometheus scraping Sluice's metrics port, Grafana
  provisioned with the dashboard and its data source; every file it mounts exists;
* every Sluice configuration it mounts passes `sluice check-config`;
* the dashboard is valid JSON for Grafana, and every metric it queries is in the /metrics output of a real
  Sluice running the compose file's quota section with throttled producers and a throttled consumer
  (with usage records on, as the compose file's Sluice has them).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer, Producer
from mock_cluster_process import MockCluster
from proxy_process import ProxyProcess

from sluice.config.load import load_config
from sluice.proxy.cli import main as sluice_main

REPO = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
DASHBOARD = json.loads((REPO / "docs/compose/grafana/dashboards/sluice.json").read_text())
SLUICE_CONFIG = REPO / "docs/compose/sluice.yaml"
READER_THROTTLED = 'sluice_throttles_total{client_id="reader",type="Fetch"'
METRIC = re.compile(r"\b(sluice_[a-z0-9_]+)\b")


def mounts(service: str) -> list[tuple[Path, str]]:
    """(file or folder in the repository, path in the container) for each bind mount."""
    result = []
    for volume in SERVICES[service].get("volumes", []):
        source, target = volume.split(":")[:2]
        assert source.startswith("./"), f"{service}: {volume} is not a path in the repository"
        result.append((REPO / source, target))
    return result


def command_text(service: str) -> str:
    command = SERVICES[service].get("command", [])
    return " ".join(command) if isinstance(command, list) else str(command)


def dashboard_exprs() -> list[str]:
    return [target["expr"] for panel in DASHBOARD["panels"] for target in panel["targets"]]


# ---- the compose file ---------------------------------------------------------------------------------


def test_three_kraft_brokers_that_agree_on_their_quorum() -> None:
    brokers = sorted(name for name in SERVICES if name.startswith("kafka-"))
    assert brokers == ["kafka-1", "kafka-2", "kafka-3"]
    node_ids, voters, clusters = set(), set(), set()
    for name in brokers:
        service = SERVICES[name]
        assert service["image"].startswith("apache/kafka:")
        env = service["environment"]
        assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
        assert env["KAFKA_ADVERTISED_LISTENERS"] == f"PLAINTEXT://{name}:9092"
        node_ids.add(env["KAFKA_NODE_ID"])
        voters.add(env["KAFKA_CONTROLLER_QUORUM_VOTERS"])
        clusters.add(env["CLUSTER_ID"])
        assert "healthcheck" in service
    assert node_ids == {1, 2, 3}
    assert voters == {"1@kafka-1:9093,2@kafka-2:9093,3@kafka-3:9093"}
    assert len(clusters) == 1


def test_sluice_is_built_here_and_runs_the_mounted_configuration() -> None:
    sluice = SERVICES["sluice"]
    assert sluice["build"] == "."
    assert (REPO / "Dockerfile").read_text().count('CMD ["run", "--config", "/etc/sluice/sluice.yaml"]') == 1
    assert mounts("sluice") == [(SLUICE_CONFIG, "/etc/sluice/sluice.yaml")]
    config = load_config(SLUICE_CONFIG)
    assert [f"{h.host}:{h.port}" for h in config.upstream_bootstrap] == [f"kafka-{n}:9092" for n in (1, 2, 3)]
    assert config.advertised_host == "sluice"
    assert config.metrics_listen is not None and "9404:9404" in sluice["ports"]


def test_every_service_reference_and_mounted_path_exists() -> None:
    for name, service in SERVICES.items():
        depends = service.get("depends_on", [])
        assert set(depends) <= set(SERVICES), f"{name} depends on an unknown service"
        for source, _target in mounts(name):
            assert source.exists(), f"{name} mounts {source}, which is not in the repository"
    published = [port for service in SERVICES.values() for port in service.get("ports", [])]
    assert len(published) == len(set(published))


def test_clients_with_and_without_quotas_match_the_quota_section() -> None:
    quota = load_config(SLUICE_CONFIG).quota
    quoted = {
        rule.entity.client_id: {key.value for key in rule.values}
        for rule in quota.rules
        if rule.entity.client_id
    }
    clients = {}
    for name in SERVICES:
        found = re.findall(r"client\.id=(\w+)", command_text(name))
        for client_id in found:
            clients[client_id] = name
        assert all("sluice:9092" in command_text(name) for _ in found), f"{name} bypasses Sluice"
    assert quoted["pump"] == quoted["trickle"] == {"producer_byte_rate"}
    assert quoted["reader"] == {"consumer_byte_rate"}
    assert "perf-test" in command_text(clients["pump"]) and "--throughput -1" in command_text(clients["pump"])
    assert "console-consumer" in command_text(clients["reader"])
    assert "free" in clients and "free" not in quoted, "a producer without a quota"


def test_every_sluice_configuration_mounted_passes_check_config(capsys) -> None:
    configs = [
        source for name in SERVICES for source, target in mounts(name) if target.startswith("/etc/sluice/")
    ]
    assert configs
    for path in configs:
        assert sluice_main(["check-config", str(path)]) == 0, capsys.readouterr().err


def test_prometheus_scrapes_sluices_metrics_port() -> None:
    [(config_path, target)] = mounts("prometheus")
    assert target == "/etc/prometheus/prometheus.yml"
    scrape = yaml.safe_load(config_path.read_text())["scrape_configs"]
    targets = [t for job in scrape for group in job["static_configs"] for t in group["targets"]]
    port = load_config(SLUICE_CONFIG).metrics_listen.port
    assert targets == [f"sluice:{port}"]


def test_grafana_is_provisioned_with_the_data_source_and_the_dashboard() -> None:
    folders = dict((target, source) for source, target in mounts("grafana"))
    provisioning = folders["/etc/grafana/provisioning"]
    [datasource] = yaml.safe_load((provisioning / "datasources/prometheus.yml").read_text())["datasources"]
    assert datasource["type"] == "prometheus" and datasource["url"] == "http://prometheus:9090"
    [provider] = yaml.safe_load((provisioning / "dashboards/sluice.yml").read_text())["providers"]
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"
    assert (folders["/var/lib/grafana/dashboards"] / "sluice.json").exists()
    home = SERVICES["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == "/var/lib/grafana/dashboards/sluice.json"
    uids = {panel["datasource"]["uid"] for panel in DASHBOARD["panels"]}
    uids |= {t["datasource"]["uid"] for panel in DASHBOARD["panels"] for t in panel["targets"]}
    assert uids == {datasource["uid"]}


# ---- the dashboard ------------------------------------------------------------------------------------


def test_the_dashboard_has_the_panels_an_operator_needs() -> None:
    assert DASHBOARD["uid"] and DASHBOARD["schemaVersion"] >= 36
    ids = [panel["id"] for panel in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids))
    for panel in DASHBOARD["panels"]:
        assert panel["type"] == "timeseries" and set(panel["gridPos"]) == {"h", "w", "x", "y"}
        assert [t["refId"] for t in panel["targets"]] == [chr(65 + i) for i in range(len(panel["targets"]))]
    exprs = " ".join(dashboard_exprs())
    for needed in (
        'sluice_byte_rate{type="Produce"}',  # throughput by entity ...
        'sluice_quota_bound{type="Produce"}',  # ... against its quota line
        "sluice_throttle_time_ms_total",
        "sluice_connections_active",
        "sluice_usage_messages_sent_total",
    ):
        assert needed in exprs, needed
    rates = next(p for p in DASHBOARD["panels"] if "Produce" in p["title"])
    assert "measured by" in rates["description"].lower(), "the chart says where its rates are measured"
    assert "computed" in rates["description"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[MockCluster]:
    with MockCluster(brokers=3, topics={"demo": 6}) as running:
        yield running


def _scaled_quota() -> dict[str, Any]:
    """The compose file's quota section, rates divided by 100 so a short test run is throttled."""
    quota = yaml.safe_load(SLUICE_CONFIG.read_text())["quota"]
    for entity in quota["entities"]:
        for key in ("producer_byte_rate", "consumer_byte_rate"):
            if key in entity:
                entity[key] //= 100
    return quota


def _metric_names(exposition: str) -> set[str]:
    return {line.split("{")[0].split(" ")[0] for line in exposition.splitlines() if line and line[0] != "#"}


def test_every_metric_the_dashboard_queries_is_in_a_running_sluices_output(cluster: MockCluster) -> None:
    usage = yaml.safe_load(SLUICE_CONFIG.read_text())["usage"]
    with ProxyProcess(cluster.bootstrap, extra_config={"quota": _scaled_quota(), "usage": usage}) as proxy:
        for client_id in ("free", "pump"):  # pump passes its quota's first burst and is throttled
            producer = Producer(
                {"bootstrap.servers": proxy.bootstrap, "client.id": client_id, "batch.size": 16384}
            )
            for i in range(200):
                producer.produce("demo", b"x" * 1000, key=str(i).encode())
            producer.flush(10)
            producer.purge()
        consumer = Consumer(
            {"bootstrap.servers": proxy.bootstrap, "group.id": str(uuid.uuid4()), "client.id": "reader"}
            | {"auto.offset.reset": "earliest"}
        )
        consumer.subscribe(["demo"])
        deadline = time.monotonic() + 20
        while (
            "reader" not in proxy.metrics_text().split("sluice_throttles_total")[-1]
            and time.monotonic() < deadline
        ):
            consumer.consume(100, timeout=0.5)
        consumer.close()
        exposition = proxy.metrics_text()
    names = _metric_names(exposition)
    assert READER_THROTTLED in exposition
    assert 'sluice_throttles_total{client_id="pump",type="Produce"' in exposition
    queried = {name for expr in dashboard_exprs() for name in METRIC.findall(expr)}
    assert queried <= names, sorted(queried - names)
