"""`sluice quotas describe|alter`, kafka-configs.sh without Java, end to end: through the real proxy in front
of the mock cluster (Sluice answers the quota APIs), against QuotaBrokerDouble (a broker answering them),
with SASL through the proxy to SaslBrokerDouble and with TLS to the proxy's listener.

Each command runs as an operator runs it, in its own process (`python -m sluice.proxy quotas ...`)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from doubles.quota_broker import QuotaBrokerDouble
from doubles.sasl_broker import SaslBrokerDouble
from mock_cluster_process import MockCluster
from proxy_process import ProxyProcess
from tls_certs import TestCA

pytestmark = pytest.mark.slow
USERS = {"admin": "admin-pw-51aa", "app": "app-pw-9c0d", "sluice": "sluice-pw-3e7f"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[MockCluster]:
    with MockCluster(brokers=3, topics={"qc": 3}) as c:
        yield c


@pytest.fixture(scope="module")
def proxy(cluster: MockCluster) -> Iterator[ProxyProcess]:
    with ProxyProcess(cluster.bootstrap, {"quota": {"store": {"topic": "quotas-cli-store"}}}) as p:
        yield p


def quotas(
    bootstrap: str, action: str, *args: str, config: Path | None = None
) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "sluice.proxy", "quotas", action, "--bootstrap-server", bootstrap, *args]
    if config is not None:
        command += ["--command-config", str(config)]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def lines(done: subprocess.CompletedProcess) -> list[str]:
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


PUMP = ("--entity-type", "clients", "--entity-name", "pump")
DEFAULTS = ("--entity-type", "users", "--entity-default", "--entity-type", "clients", "--entity-default")


def test_the_kafka_configs_session_through_sluice(proxy: ProxyProcess) -> None:
    at = proxy.bootstrap
    assert lines(quotas(at, "alter", *PUMP, "--add-config", "producer_byte_rate=2097152")) == [
        "Completed updating config for client pump."
    ]
    assert lines(quotas(at, "describe", *PUMP)) == [
        "Quota configs for client-id 'pump' are producer_byte_rate=2097152.0"
    ]
    assert lines(
        quotas(at, "alter", *DEFAULTS, "--add-config", "consumer_byte_rate=10485760,request_percentage=50")
    ) == ["Completed updating default config for users in the cluster."]
    assert lines(quotas(at, "describe", *DEFAULTS)) == [
        "Quota configs for the default user-principal, the default client-id are "
        "consumer_byte_rate=1.048576E7, request_percentage=50.0"
    ]
    ip = ("--entity-type", "ips", "--entity-name", "10.1.2.3")
    assert lines(quotas(at, "alter", *ip, "--add-config", "connection_creation_rate=20")) == [
        "Completed updating config for ip 10.1.2.3."
    ]
    # Every client-id entity (a type without a name), then every quota (no type at all), then as JSON.
    assert lines(quotas(at, "describe", "--entity-type", "clients")) == [
        "Quota configs for client-id 'pump' are producer_byte_rate=2097152.0"
    ]
    assert sorted(lines(quotas(at, "describe"))) == [
        "Quota configs for client-id 'pump' are producer_byte_rate=2097152.0",
        "Quota configs for ip '10.1.2.3' are connection_creation_rate=20.0",
        "Quota configs for the default user-principal, the default client-id are "
        "consumer_byte_rate=1.048576E7, request_percentage=50.0",
    ]
    described = json.loads(quotas(at, "describe", "--json").stdout)
    assert {"entity": {"client-id": "pump"}, "quotas": {"producer_byte_rate": 2097152.0}} in described
    assert {
        "entity": {"user": None, "client-id": None},
        "quotas": {"consumer_byte_rate": 10485760.0, "request_percentage": 50.0},
    } in described
    assert lines(quotas(at, "alter", *PUMP, "--delete-config", "producer_byte_rate")) == [
        "Completed updating config for client pump."
    ]
    assert lines(quotas(at, "describe", *PUMP)) == []


def test_a_refused_alter_prints_kafkas_message_and_exits_2(proxy: ProxyProcess) -> None:
    alice = ("--entity-type", "users", "--entity-name", "alice")
    refused = quotas(proxy.bootstrap, "alter", *alice, "--add-config", "producer_byte_rate=10000.5")
    assert refused.returncode == 2
    assert refused.stdout == ""
    assert refused.stderr.strip() == (
        f"sluice quotas alter: refused by {proxy.bootstrap}: INVALID_REQUEST: "
        "producer_byte_rate cannot be a fractional value."
    )
    as_json = quotas(proxy.bootstrap, "alter", *alice, "--add-config", "producer_byte_rate=10000.5", "--json")
    assert as_json.returncode == 2
    assert json.loads(as_json.stdout) == {
        "error": "INVALID_REQUEST",
        "message": "producer_byte_rate cannot be a fractional value.",
    }
    # kafka-configs.sh's own check: deleting a key that is not set stops before anything is sent.
    missing = quotas(proxy.bootstrap, "alter", *alice, "--delete-config", "consumer_byte_rate")
    assert (missing.returncode, missing.stderr.strip()) == (2, "Invalid config(s): consumer_byte_rate")
    assert lines(quotas(proxy.bootstrap, "describe", *alice)) == []


def test_bad_command_lines_and_an_unreachable_server(proxy: ProxyProcess, tmp_path: Path) -> None:
    no_name = quotas(
        proxy.bootstrap, "alter", "--entity-type", "clients", "--add-config", "producer_byte_rate=1"
    )
    assert no_name.returncode == 2
    assert "--entity-name or --entity-default must be specified" in no_name.stderr
    wrong_type = quotas(proxy.bootstrap, "describe", "--entity-type", "topics")
    assert wrong_type.returncode == 2 and "Invalid entity type topics" in wrong_type.stderr
    properties = tmp_path / "bad.properties"
    properties.write_text("security.protocol=SASL_SSL\nssl.keystore.password=secret-pw-0001\n")
    bad = quotas(proxy.bootstrap, "describe", config=properties)
    assert bad.returncode == 2 and "ssl.keystore.password" in bad.stderr
    assert "secret-pw-0001" not in bad.stderr + bad.stdout
    closed = quotas("127.0.0.1:1", "describe")
    assert closed.returncode == 1
    assert (
        closed.stderr.count("\n") == 1 and "127.0.0.1:1" in closed.stderr and "Traceback" not in closed.stderr
    )


def test_against_a_broker_that_answers_the_quota_apis() -> None:
    held = {(("client-id", "pump"),): {"producer_byte_rate": 2097152.0}}
    with QuotaBrokerDouble(broker_count=1, quotas=held) as broker:
        at = broker.bootstrap
        assert lines(quotas(at, "describe")) == [
            "Quota configs for client-id 'pump' are producer_byte_rate=2097152.0"
        ]
        assert lines(quotas(at, "alter", *PUMP, "--add-config", "consumer_byte_rate=1000")) == [
            "Completed updating config for client pump."
        ]
        assert lines(quotas(at, "describe", *PUMP)) == [
            "Quota configs for client-id 'pump' are consumer_byte_rate=1000.0, producer_byte_rate=2097152.0"
        ]


def test_a_broker_without_the_quota_apis_is_named(cluster: MockCluster) -> None:
    done = quotas(cluster.bootstrap, "describe")
    assert done.returncode == 1
    assert "does not offer DescribeClientQuotas" in done.stderr and "Traceback" not in done.stderr


def test_sasl_from_a_command_config(cluster: MockCluster, tmp_path: Path) -> None:
    with SaslBrokerDouble(cluster.bootstrap, USERS) as upstream:
        config = {
            "client": {"sasl": {"mechanism": "PLAIN", "username": "sluice", "password": USERS["sluice"]}},
            "quota": {"store": {"topic": "quotas-cli-sasl"}, "admin_principals": {"alter": ["User:admin"]}},
        }
        with ProxyProcess(upstream.bootstrap, config, wait_for_brokers=False) as proxy:
            admin = tmp_path / "admin.properties"
            admin.write_text(
                "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'username="admin" password="{USERS["admin"]}";\n'
            )
            app = tmp_path / "app.properties"
            app.write_text(
                f"security.protocol=SASL_PLAINTEXT\nsasl.username=app\nsasl.password={USERS['app']}\n"
            )
            add = ("--add-config", "producer_byte_rate=5000")
            assert lines(quotas(proxy.bootstrap, "alter", *PUMP, *add, config=admin)) == [
                "Completed updating config for client pump."
            ]
            refused = quotas(proxy.bootstrap, "alter", *PUMP, *add, config=app)
            assert refused.returncode == 2
            assert "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr
            assert USERS["app"] not in refused.stderr + refused.stdout


def test_tls_from_a_command_config(cluster: MockCluster, tmp_path: Path) -> None:
    ca = TestCA(tmp_path / "ca")
    cert, key = ca.issue("proxy", common_name="localhost", dns=["localhost"])
    tls = {"listener": {"cert": str(cert), "key": str(key)}}
    config = {"tls": tls, "quota": {"store": {"topic": "quotas-cli-tls"}}}
    with ProxyProcess(cluster.bootstrap, config) as proxy:
        at = f"localhost:{proxy.port}"
        trusted = tmp_path / "tls.properties"
        trusted.write_text(f"security.protocol=SSL\nssl.ca.location={ca.ca_path}\n")
        assert lines(
            quotas(at, "alter", *PUMP, "--add-config", "producer_byte_rate=7000", config=trusted)
        ) == ["Completed updating config for client pump."]
        untrusted = quotas(at, "describe")  # plaintext to a TLS listener: no answer it can read
        assert untrusted.returncode == 1 and "Traceback" not in untrusted.stderr
