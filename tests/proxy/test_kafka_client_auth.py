"""The proxy's own client with its own credentials (SASL PLAIN, SCRAM-SHA-256/512) and TLS, against the test
doubles (the mock cluster has neither), CreateTopics against the admin double, and the password kept out of
the proxy's log, whatever happens."""

from __future__ import annotations

import asyncio
import ssl

import pytest
from doubles.admin_broker import AdminBrokerDouble
from doubles.sasl_broker import SaslBrokerDouble
from mock_cluster_process import MockCluster
from proxy_process import ProxyProcess
from tls_certs import TestCA

from sluice.config.client_settings import ClientSasl, Secret
from sluice.config.identity_settings import UpstreamTls
from sluice.proxy.kafka_client import (
    AuthenticationFailed,
    BrokerUnavailable,
    GaveUp,
    KafkaClient,
    KafkaErrorCode,
    Record,
    RetryPolicy,
    TopicCreation,
)
from sluice.proxy.kafka_client.connection import _tls_failure, open_broker_connection
from sluice.proxy.listeners.tls import UpstreamTlsTarget, upstream_context

TOPIC = "secured"
PASSWORD = "s3cret-Pa55word-never-logged"
USERS = {"sluice-proxy": PASSWORD, "alice": "alice-pw"}
FAST_RETRY = RetryPolicy(initial_s=0.02, max_s=0.2)


@pytest.fixture(scope="module")
def cluster():
    with MockCluster(brokers=2, topics={TOPIC: 2}) as c:
        yield c


@pytest.fixture(scope="module")
def sasl_double(cluster):
    with SaslBrokerDouble(cluster.bootstrap, USERS) as double:
        yield double


@pytest.fixture(scope="module")
def ca(tmp_path_factory) -> TestCA:
    return TestCA(tmp_path_factory.mktemp("ca"))


def address(bootstrap: str) -> list[tuple[str, int]]:
    host, _, port = bootstrap.rpartition(":")
    return [(host, int(port))]


def sasl(mechanism: str, password: str = PASSWORD, user: str = "sluice-proxy") -> ClientSasl:
    return ClientSasl(mechanism, user, Secret(password))


async def round_trip(client: KafkaClient, partition: int, payload: bytes) -> None:
    records = [Record(b"k%d" % i, payload + b"%d" % i, (("from", b"sluice"),)) for i in range(20)]
    base = await client.produce(TOPIC, partition, records)
    got = []
    while len(got) < len(records):
        got += (await client.fetch(TOPIC, partition, base + len(got), max_wait_ms=50)).records
    assert [(r.key, r.value, r.headers) for r in got] == [(r.key, r.value, r.headers) for r in records]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_the_proxy_authenticates_as_itself(sasl_double, mechanism) -> None:
    before = len(sasl_double.authenticated)
    client = KafkaClient(address(sasl_double.bootstrap), sasl=sasl(mechanism), retry=FAST_RETRY)
    try:
        await round_trip(client, 0, mechanism.encode())
    finally:
        await client.stop()
    assert set(sasl_double.authenticated[before:]) == {"sluice-proxy"}


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_a_wrong_password_fails_at_once_and_never_shows_the_password(sasl_double, mechanism) -> None:
    wrong = "wrong-" + PASSWORD
    client = KafkaClient(address(sasl_double.bootstrap), sasl=sasl(mechanism, wrong), retry=FAST_RETRY)
    try:
        with pytest.raises(AuthenticationFailed) as caught:
            await asyncio.wait_for(client.metadata(timeout_s=30), 10)  # not retried for 30 s
    finally:
        await client.stop()
    message = str(caught.value)
    assert "sluice-proxy" in message and mechanism in message
    assert PASSWORD not in message and wrong not in message and "wrong-" not in message


async def test_a_mechanism_the_broker_lacks_is_named_with_those_it_has(cluster) -> None:
    with SaslBrokerDouble(cluster.bootstrap, USERS, mechanisms=("PLAIN",)) as double:
        client = KafkaClient(address(double.bootstrap), sasl=sasl("SCRAM-SHA-512"), retry=FAST_RETRY)
        try:
            with pytest.raises(AuthenticationFailed, match=r"does not enable it \(enabled: PLAIN\)"):
                await client.metadata()
        finally:
            await client.stop()


async def test_tls_and_scram_to_the_brokers(cluster, ca) -> None:
    cert, key = ca.issue("broker", common_name="localhost")
    with SaslBrokerDouble(cluster.bootstrap, USERS, tls=ca.server_context(cert, key)) as double:
        tls = UpstreamTlsTarget(upstream_context(UpstreamTls(ca=str(ca.ca_path))), None)
        client = KafkaClient(address(double.bootstrap), tls=tls, sasl=sasl("SCRAM-SHA-256"), retry=FAST_RETRY)
        try:
            await round_trip(client, 1, b"over tls")
        finally:
            await client.stop()
        assert "sluice-proxy" in double.authenticated


async def test_a_broker_certificate_from_another_ca_is_refused_at_once(cluster, ca, tmp_path) -> None:
    cert, key = ca.issue("broker2", common_name="localhost")
    other = TestCA(tmp_path / "other")
    with SaslBrokerDouble(cluster.bootstrap, USERS, tls=ca.server_context(cert, key)) as double:
        tls = UpstreamTlsTarget(upstream_context(UpstreamTls(ca=str(other.ca_path))), None)
        client = KafkaClient(address(double.bootstrap), tls=tls, sasl=sasl("PLAIN"), retry=FAST_RETRY)
        try:
            # As Kafka's SslAuthenticationException: not retried, so well inside the 30 s budget.
            with pytest.raises(AuthenticationFailed) as caught:
                await asyncio.wait_for(client.metadata(timeout_s=30), 10)
        finally:
            await client.stop()
        assert "TLS handshake failed" in str(caught.value) and "CERTIFICATE_VERIFY_FAILED" in str(
            caught.value
        )
        assert double.authenticated == []


async def test_create_topic_sends_partitions_replication_and_compaction() -> None:
    with AdminBrokerDouble(num_partitions=3) as broker:
        client = KafkaClient(address(broker.bootstrap), retry=FAST_RETRY)
        try:
            configs = {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"}
            outcome = await client.create_topic(
                "quota-store", partitions=1, replication_factor=1, configs=configs
            )
            assert outcome is TopicCreation.CREATED
            assert broker.topics["quota-store"] == 1
            assert broker.topic_configs["quota-store"] == configs
            usage = await client.create_topic("usage", partitions=2, configs={"retention.ms": "86400000"})
            assert usage is TopicCreation.CREATED and broker.topic_configs["usage"] == {
                "retention.ms": "86400000"
            }
            # There already: nothing sent, nothing changed.
            sent = len(broker.received)
            assert await client.create_topic("quota-store", partitions=5) is TopicCreation.EXISTED
            assert len(broker.received) == sent and broker.topics["quota-store"] == 1
            # Refused by the broker: Kafka's error, raised at once.
            with pytest.raises(KafkaErrorCode) as caught:
                await client.create_topic("too-replicated", replication_factor=3)
            assert caught.value.name == "INVALID_REPLICATION_FACTOR" and not caught.value.retriable
            assert "larger than the number of brokers" in str(caught.value)
        finally:
            await client.stop()


def test_the_proxy_discovers_brokers_with_its_own_credentials_and_never_logs_them(cluster, ca) -> None:
    cert, key = ca.issue("broker3", common_name="localhost")
    with SaslBrokerDouble(cluster.bootstrap, USERS, tls=ca.server_context(cert, key)) as double:
        tls = {"upstream": {"enabled": True, "ca": str(ca.ca_path)}}
        good = {"sasl": {"mechanism": "SCRAM-SHA-512", "username": "sluice-proxy", "password": PASSWORD}}
        with ProxyProcess(double.bootstrap, {"tls": tls, "client": good}, log_level="debug") as proxy:
            event = proxy.wait_for_event("brokers_discovered")
            assert len(event["brokers"]) == 2
            log = proxy.log_path.read_text()
        assert "sluice-proxy" in double.authenticated
        assert PASSWORD not in log
        wrong = "not-" + PASSWORD
        bad = {"sasl": {"mechanism": "PLAIN", "username": "sluice-proxy", "password": wrong}}
        with ProxyProcess(
            double.bootstrap, {"tls": tls, "client": bad}, log_level="debug", wait_for_brokers=False
        ) as proxy:
            failure = proxy.wait_for_event("discovery_failed")
            assert "Invalid username or password" in failure["error"]
            log = proxy.log_path.read_text()
        assert PASSWORD not in log and wrong not in log


class HandshakeCutter:
    """A "broker" that ends each TLS handshake with a close_notify alert and closes: a broker shutting down
    (or a load balancer letting go), not a certificate problem. The loop reports SSLZeroReturnError."""

    CLOSE_NOTIFY = bytes([21, 3, 3, 0, 2, 1, 0])  # an alert record: level warning, close_notify

    def __init__(self) -> None:
        self.attempts = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> tuple[str, int]:
        self.server = await asyncio.start_server(self._cut, "127.0.0.1", 0)
        return "127.0.0.1", self.server.sockets[0].getsockname()[1]

    async def _cut(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.attempts += 1
        await reader.read(65536)  # the ClientHello
        writer.write(self.CLOSE_NOTIFY)
        writer.close()


async def test_a_handshake_cut_short_is_a_lost_connection_and_retried(ca) -> None:
    cutter = HandshakeCutter()
    host, port = await cutter.start()
    tls = UpstreamTlsTarget(upstream_context(UpstreamTls(ca=str(ca.ca_path))), None)
    try:
        with pytest.raises(BrokerUnavailable, match="TLS handshake cut short"):
            await open_broker_connection(host, port, client_id="t", tls=tls, sasl=None, timeout_s=5)
        client = KafkaClient([(host, port)], tls=tls, retry=FAST_RETRY)
        try:
            with pytest.raises(GaveUp) as caught:
                await client.metadata(timeout_s=1.0)
        finally:
            await client.stop()
        assert isinstance(caught.value.last, BrokerUnavailable)
        assert cutter.attempts >= 3  # the first try, and the client's retries after it
    finally:
        assert cutter.server is not None
        cutter.server.close()


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ssl.SSLEOFError(8, "EOF occurred in violation of protocol"), BrokerUnavailable),
        (ssl.SSLZeroReturnError(6, "TLS/SSL connection has been closed (EOF)"), BrokerUnavailable),
        (ssl.SSLCertVerificationError(1, "certificate verify failed"), AuthenticationFailed),
    ],
)
def test_which_tls_failures_are_retried(error: ssl.SSLError, expected: type) -> None:
    assert type(_tls_failure("broker:9093", error)) is expected
