"""Who the client is, end to end: SASL principals read in passing, and TLS (termination, upstream TLS, mTLS).

The librdkafka mock broker speaks no SASL, so the upstream is `SaslBrokerDouble`
(tests/doubles/sasl_broker.py): the broker's side of PLAIN, SCRAM-SHA-256/512 (the `scramp` package) and
OAUTHBEARER, relaying to the mock cluster once a client has authenticated. The proxy never authenticates
anyone itself; it watches.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.helpers import create_ssl_context
from confluent_kafka import Consumer, KafkaError, Producer
from doubles.sasl_broker import SaslBrokerDouble
from kafka import KafkaProducer
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from mock_cluster_process import MockCluster
from proxy_process import ProxyProcess
from rawclient import RawClient
from throttle_harness import metric_value, metric_values
from tls_certs import TestCA

pytestmark = pytest.mark.slow  # end to end: real processes, real clients

REPO = Path(__file__).resolve().parents[2]

TOPIC = "identity"
USERS = {"alice": "alice-pw-7d1c", "bob": "bob-pw-93fa"}
WRONG_PASSWORD = "not-bobs-pw-55e0"
SECRETS = [*USERS.values(), WRONG_PASSWORD]
ALICE_QUOTA = 40_000  # bytes/s, produce
BOB_QUOTA = 10_000_000_000  # never binding (10 GB/s): bob has his own sensor, so his label shows
# Kafka starts at most one re-authentication per second on a connection (KafkaChannel); sooner, the
# SaslHandshake reaches the request handlers, which answer ILLEGAL_SASL_STATE.
REAUTH_INTERVAL_S = 1.1


@pytest.fixture(scope="module")
def cluster() -> Iterator[MockCluster]:
    with MockCluster(brokers=2, topics={TOPIC: 4}) as c:
        yield c


@pytest.fixture(scope="module")
def upstream(cluster) -> Iterator[SaslBrokerDouble]:
    with SaslBrokerDouble(cluster.bootstrap, USERS) as double:
        yield double


@pytest.fixture(scope="module")
def proxy(upstream) -> Iterator[ProxyProcess]:
    quota = {
        "sensor": "token_bucket",
        "window": {"samples": 2, "size_seconds": 1},
        "entities": [
            {"user": "alice", "producer_byte_rate": ALICE_QUOTA},
            {"user": "bob", "producer_byte_rate": BOB_QUOTA},
        ],
    }
    with ProxyProcess(upstream.bootstrap, extra_config={"quota": quota}, wait_for_brokers=False) as p:
        yield p


def sasl_config(proxy_bootstrap: str, user: str, password: str, mechanism: str, **extra) -> dict:
    return {
        "bootstrap.servers": proxy_bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
        **extra,
    }


def produce_confluent(config: dict, count: int = 20, size: int = 1000, seconds: float | None = None) -> int:
    """Produce `count` records and return the bytes acknowledged; or, with `seconds`, produce flat out and
    return the bytes acknowledged within that time (what is still queued then is purged, not counted)."""
    acked = 0
    errors: list[KafkaError] = []

    def delivered(err, msg) -> None:
        nonlocal acked
        if err is None:
            acked += len(msg.value())
        elif err.code() not in (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT):
            errors.append(err)

    producer = Producer({"linger.ms": 5, "error_cb": errors.append, **config})
    payload = b"x" * size
    if seconds is None:
        for _ in range(count):
            producer.produce(TOPIC, payload, on_delivery=delivered)
        producer.flush(30)
    else:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                producer.produce(TOPIC, payload, on_delivery=delivered)
            except BufferError:
                producer.poll(0.05)
            producer.poll(0)
        within = acked
        producer.purge()
        producer.flush(30)
        acked = within
    assert not errors, errors
    return acked


# ---- principals -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("user", "mechanism"),
    [("alice", "PLAIN"), ("bob", "SCRAM-SHA-256"), ("alice", "SCRAM-SHA-512"), ("bob", "PLAIN")],
)
def test_confluent_kafka_principal_becomes_the_user(proxy, upstream, user, mechanism):
    client_id = f"ck-{user}-{mechanism}"
    config = sasl_config(proxy.bootstrap, user, USERS[user], mechanism, **{"client.id": client_id})
    assert produce_confluent(config) == 20_000
    event = proxy.wait_for_event("sasl_authenticated", user=user, mechanism=mechanism, client_id=client_id)
    assert "previous_user" not in event
    assert user in upstream.authenticated


@pytest.mark.parametrize(("user", "mechanism"), [("alice", "SCRAM-SHA-512"), ("bob", "PLAIN")])
def test_aiokafka_principal_becomes_the_user(proxy, user, mechanism):
    async def produce() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=proxy.bootstrap,
            client_id=f"aio-{user}-{mechanism}",
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism=mechanism,
            sasl_plain_username=user,
            sasl_plain_password=USERS[user],
        )
        await producer.start()
        try:
            for _ in range(10):
                await producer.send_and_wait(TOPIC, b"y" * 500)
        finally:
            await producer.stop()

    asyncio.run(produce())
    proxy.wait_for_event(
        "sasl_authenticated", user=user, mechanism=mechanism, client_id=f"aio-{user}-{mechanism}"
    )
    # The user's own quota sensor exists once the user has produced, labelled with the user.
    bound = {"alice": ALICE_QUOTA, "bob": BOB_QUOTA}[user]
    assert metric_value(proxy.metrics_text(), "sluice_quota_bound", type="Produce", user=user) == bound


def connect_with_the_wrong_password(proxy) -> list[KafkaError]:
    """Bob with WRONG_PASSWORD over PLAIN, until the client reports an error (or 15 s pass): its errors."""
    errors: list[KafkaError] = []
    producer = Producer(
        {
            **sasl_config(proxy.bootstrap, "bob", WRONG_PASSWORD, "PLAIN"),
            "client.id": "wrong-pw",
            "error_cb": errors.append,
        }
    )
    deadline = time.monotonic() + 15  # a loaded machine may take longer than one poll to report it
    while not errors and time.monotonic() < deadline:
        producer.poll(0.5)
    producer.flush(0)
    return errors


def test_wrong_password_fails_with_the_brokers_error_and_leaves_no_principal(proxy, upstream):
    errors = connect_with_the_wrong_password(proxy)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    assert any("Invalid username or password" in e.str() for e in errors), errors  # the broker's words
    failed = proxy.wait_for_event("sasl_failed", mechanism="PLAIN")
    assert failed["error_code"] == 58
    authenticated = [e for e in proxy.events() if e.get("event") == "sasl_authenticated"]
    assert all(e["peer"] != failed["peer"] for e in authenticated)
    assert "bob" in upstream.failed


def test_a_quota_on_alice_throttles_alice_and_not_bob_with_the_same_client_id(proxy):
    seconds = 6.0
    shared = {"client.id": "shared-app", "batch.size": 16384, "queue.buffering.max.kbytes": 1024}
    alice = produce_confluent(
        sasl_config(proxy.bootstrap, "alice", USERS["alice"], "PLAIN", **shared), seconds=seconds
    )
    bob = produce_confluent(
        sasl_config(proxy.bootstrap, "bob", USERS["bob"], "PLAIN", **shared), seconds=seconds
    )
    text = proxy.metrics_text()
    # alice: a burst of 2 x 1 s x Q, then Q/s; bob is not limited at all.
    assert alice <= ALICE_QUOTA * (seconds + 2) * 1.25, alice
    assert bob > 4 * alice, (alice, bob)
    assert metric_value(text, "sluice_throttle_time_ms_total", type="Produce", user="alice") > 0
    assert metric_values(text, "sluice_quota_tokens", type="Produce", user="bob")  # bob is measured ...
    assert (
        metric_value(text, "sluice_throttle_time_ms_total", type="Produce", user="bob") == 0
    )  # ... not held


def authenticate_plain(raw: RawClient, user: str, password: str) -> int:
    """SaslHandshake v1 + SaslAuthenticate v1 with PLAIN; the broker's error code."""
    handshake = raw.call(SaslHandshakeRequest(mechanism="PLAIN"), 1, SaslHandshakeResponse)
    assert handshake.error_code == 0
    token = b"\0" + user.encode() + b"\0" + password.encode()
    return raw.call(SaslAuthenticateRequest(auth_bytes=token), 1, SaslAuthenticateResponse).error_code


def test_reauthentication_renews_the_user_and_a_refused_one_changes_nothing(cluster):
    """KIP-368: a new exchange on an authenticated connection. Kafka refuses a different principal."""
    with (
        SaslBrokerDouble(cluster.bootstrap, USERS, session_lifetime_ms=60_000) as reauth,
        ProxyProcess(reauth.bootstrap, wait_for_brokers=False) as p,
        RawClient("127.0.0.1", p.port, client_id="reauth") as raw,
    ):
        assert authenticate_plain(raw, "alice", USERS["alice"]) == 0
        raw.call(MetadataRequest(topics=[]), 1, MetadataResponse)
        time.sleep(REAUTH_INTERVAL_S)  # the second Kafka makes a connection wait: the time is the event
        assert authenticate_plain(raw, "alice", USERS["alice"]) == 0  # re-authenticated
        raw.call(MetadataRequest(topics=[]), 1, MetadataResponse)
        time.sleep(REAUTH_INTERVAL_S)  # the second Kafka makes a connection wait: the time is the event
        assert authenticate_plain(raw, "bob", USERS["bob"]) == 58  # "Cannot change principals ..."
        p.wait_for_event("sasl_failed", mechanism="PLAIN")
        events = [e for e in p.events() if e.get("event") == "sasl_authenticated"]
    assert [e["user"] for e in events] == ["alice", "alice"]
    assert len({e["peer"] for e in events}) == 1
    assert reauth.authenticated == ["alice", "alice"]


def test_legacy_framing_after_handshake_v0(cluster):
    """SaslHandshake v0, then the token as a bare length-prefixed frame with no Kafka header."""
    with (
        SaslBrokerDouble(cluster.bootstrap, USERS, sasl_handshake_max_version=0) as old,
        ProxyProcess(old.bootstrap, wait_for_brokers=False) as p,
        RawClient("127.0.0.1", p.port, client_id="legacy") as raw,
    ):
        handshake = raw.call(SaslHandshakeRequest(mechanism="PLAIN"), 0, SaslHandshakeResponse)
        assert handshake.error_code == 0
        token = b"\0alice\0" + USERS["alice"].encode()
        raw.sock.sendall(len(token).to_bytes(4, "big") + token)
        assert raw.receive_frame() == b"\0\0\0\0"  # an empty server token: success
        metadata = raw.call(MetadataRequest(topics=[]), 1, MetadataResponse)
        assert metadata.brokers
        p.wait_for_event("sasl_authenticated", user="alice", mechanism="PLAIN")
    assert old.authenticated == ["alice"]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_kafka_python_with_legacy_framing_through_the_proxy(cluster, mechanism):
    """A broker that offers SaslHandshake v0 only: kafka-python sends its tokens as bare frames."""
    with (
        SaslBrokerDouble(cluster.bootstrap, USERS, sasl_handshake_max_version=0) as old,
        ProxyProcess(old.bootstrap, wait_for_brokers=False) as p,
    ):
        producer = KafkaProducer(
            bootstrap_servers=p.bootstrap,
            client_id=f"kp-legacy-{mechanism}",
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism=mechanism,
            sasl_plain_username="bob",
            sasl_plain_password=USERS["bob"],
        )
        try:
            assert producer.send(TOPIC, b"legacy", partition=0).get(timeout=20).offset >= 0
        finally:
            producer.close()
        p.wait_for_event("sasl_authenticated", user="bob", mechanism=mechanism)
    assert set(old.authenticated) == {"bob"}


def test_oauthbearer_principal_is_the_sub_claim(proxy):
    config = {
        "bootstrap.servers": proxy.bootstrap,
        "client.id": "oauth",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": "principal=alice",
    }
    assert produce_confluent(config, count=5) == 5000
    proxy.wait_for_event("sasl_authenticated", user="alice", mechanism="OAUTHBEARER")


def test_logs_of_whole_authenticated_sessions_hold_no_password(proxy):
    """Every password crosses the proxy here (each user's with each mechanism, PLAIN in the clear, and a
    wrong one), and none reaches its log or its metrics."""
    for user, password in USERS.items():
        for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            client_id = f"secrets-{user}-{mechanism}"
            config = sasl_config(proxy.bootstrap, user, password, mechanism, **{"client.id": client_id})
            produce_confluent(config, count=2)
            proxy.wait_for_event("sasl_authenticated", user=user, mechanism=mechanism, client_id=client_id)
    logged = len(proxy.events())
    connect_with_the_wrong_password(proxy)
    proxy.wait_for_event("sasl_failed", since=logged, mechanism="PLAIN")  # this one, not an earlier test's
    log = proxy.log_path.read_text()
    metrics = proxy.metrics_text()
    assert "sasl_authenticated" in log and "sasl_failed" in log
    for secret in SECRETS:
        assert secret not in log
        assert secret not in metrics


# ---- TLS ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca(tmp_path_factory) -> TestCA:
    return TestCA(tmp_path_factory.mktemp("ca"))


@contextlib.contextmanager
def tls_both_ways(
    cluster: MockCluster, ca: TestCA, mechanism: str
) -> Iterator[tuple[SaslBrokerDouble, ProxyProcess, dict]]:
    """A SASL broker double on TLS in front of the test broker, the proxy on TLS in front of it, and bob's
    SASL_SSL client configuration for the proxy."""
    proxy_cert, proxy_key = ca.issue("proxy", common_name="localhost")
    broker_cert, broker_key = ca.issue("broker", common_name="localhost")
    with SaslBrokerDouble(cluster.bootstrap, USERS, tls=ca.server_context(broker_cert, broker_key)) as secure:
        extra = {
            "tls": {
                "listener": {"cert": str(proxy_cert), "key": str(proxy_key)},
                "upstream": {"enabled": True, "ca": str(ca.ca_path)},
            }
        }
        with ProxyProcess(secure.bootstrap, extra_config=extra, wait_for_brokers=False) as p:
            config = sasl_config(
                p.bootstrap, "bob", USERS["bob"], mechanism, **{"ssl.ca.location": str(ca.ca_path)}
            )
            config["security.protocol"] = "SASL_SSL"
            yield secure, p, config


def test_sasl_over_tls_both_ways(cluster, ca):
    with tls_both_ways(cluster, ca, "SCRAM-SHA-512") as (secure, p, config):
        assert produce_confluent(config, count=10) == 10_000
        p.wait_for_event("sasl_authenticated", user="bob")

        async def aiokafka_over_tls() -> None:
            producer = AIOKafkaProducer(
                bootstrap_servers=p.bootstrap,
                security_protocol="SASL_SSL",
                ssl_context=create_ssl_context(cafile=str(ca.ca_path)),
                sasl_mechanism="PLAIN",
                sasl_plain_username="alice",
                sasl_plain_password=USERS["alice"],
            )
            await producer.start()
            try:
                await producer.send_and_wait(TOPIC, b"z" * 100)
            finally:
                await producer.stop()

        asyncio.run(aiokafka_over_tls())
        p.wait_for_event("sasl_authenticated", user="alice")
    assert {"alice", "bob"} <= set(secure.authenticated)


def test_large_answers_come_whole_over_tls_both_ways(cluster, ca):
    # Fetch answers of hundreds of kB, each arriving in many pieces of whatever sizes the TLS layer hands
    # over, relayed byte for byte: the records come back as they were sent.
    with tls_both_ways(cluster, ca, "PLAIN") as (_, _, config):
        marker = f"large-{time.monotonic_ns()}-".encode()
        sent = [marker + bytes([i]) * 150_000 for i in range(8)]
        producer = Producer({**config, "partitioner": "murmur2", "message.max.bytes": 2_000_000})
        for value in sent:
            producer.produce(TOPIC, value, key=b"one-partition")
        assert producer.flush(30) == 0
        consumer = Consumer(
            {
                **config,
                "group.id": marker.decode(),
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        consumer.subscribe([TOPIC])
        received: list[bytes] = []
        deadline = time.monotonic() + 60
        try:
            while len(received) < len(sent) and time.monotonic() < deadline:
                message = consumer.poll(1.0)
                if message is not None and message.error() is None and message.value().startswith(marker):
                    received.append(message.value())
        finally:
            consumer.close()
        assert received == sent


@pytest.mark.parametrize(
    ("upstream_tls", "reaches_the_broker"),
    [
        ({}, False),  # the broker's certificate names kafka.internal, not 127.0.0.1: refused
        ({"server_hostname": "kafka.internal"}, True),  # SNI and verification against the right name
        ({"verify": False}, True),  # name not checked; the chain still is
    ],
)
def test_upstream_tls_checks_the_brokers_name_unless_told_otherwise(
    cluster, ca, upstream_tls, reaches_the_broker
):
    broker_cert, broker_key = ca.issue(
        "broker-named", common_name="kafka.internal", dns=["kafka.internal"], ips=[]
    )
    with SaslBrokerDouble(cluster.bootstrap, USERS, tls=ca.server_context(broker_cert, broker_key)) as secure:
        tls = {"upstream": {"enabled": True, "ca": str(ca.ca_path), **upstream_tls}}
        with (
            ProxyProcess(secure.bootstrap, extra_config={"tls": tls}, wait_for_brokers=False) as p,
            RawClient("127.0.0.1", p.port, client_id="tls-name") as raw,
        ):
            if reaches_the_broker:
                answer = raw.call(ApiVersionsRequest[0](), 0, ApiVersionsResponse)
                assert answer.error_code == 0
            else:
                raw.sock.sendall(raw.encode(ApiVersionsRequest[0](), 0)[1])
                assert raw.is_closed_by_peer()
                closed = p.wait_for_event("connection_closed", cause="upstream_unreachable")
                assert "CERTIFICATE_VERIFY_FAILED" in str(closed["tried"])


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        (None, "CN=Carol,OU=payments,O=Acme"),
        (["RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/L", "DEFAULT"], "carol@payments"),
    ],
)
def test_mtls_subject_becomes_the_user(cluster, ca, rules, expected):
    proxy_cert, proxy_key = ca.issue("proxy-mtls", common_name="localhost")
    client_cert, client_key = ca.issue(
        "carol", common_name="Carol", subject_extra={"O": "Acme", "OU": "payments"}, client=True
    )
    listener = {"cert": str(proxy_cert), "key": str(proxy_key), "client_ca": str(ca.ca_path)}
    tls: dict = {"listener": listener}
    if rules is not None:
        tls["principal_mapping_rules"] = rules
    with ProxyProcess(cluster.bootstrap, extra_config={"tls": tls}) as p:
        config = {
            "bootstrap.servers": p.bootstrap,
            "security.protocol": "SSL",
            "ssl.ca.location": str(ca.ca_path),
            "ssl.certificate.location": str(client_cert),
            "ssl.key.location": str(client_key),
        }
        assert produce_confluent(config, count=5) == 5000
        p.wait_for_event("tls_authenticated", user=expected)


def test_unreadable_or_mismatched_tls_files_stop_startup_naming_the_file(tmp_path, ca):
    cert, _key = ca.issue("one", common_name="localhost")
    _other_cert, other_key = ca.issue("two", common_name="localhost")
    cases = [
        ({"cert": str(cert), "key": str(other_key)}, "tls.listener.key", str(other_key)),
        ({"cert": str(tmp_path / "missing.pem"), "key": str(other_key)}, "tls.listener.cert", "missing.pem"),
    ]
    for listener, key, named in cases:
        config = tmp_path / "sluice.yaml"
        config.write_text(
            "listen: 127.0.0.1:19999\nupstream: {bootstrap: 127.0.0.1:9}\n"
            f"tls: {{listener: {{cert: '{listener['cert']}', key: '{listener['key']}'}}}}\n"
        )
        run = subprocess.run(
            [sys.executable, "-m", "sluice.proxy", "run", "--config", str(config)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 2, run.stderr
        assert key in run.stderr and named in run.stderr, run.stderr


def _tls_1_1_client(ca: TestCA) -> ssl.SSLContext:
    """A client that offers only TLS 1.0/1.1, with OpenSSL's security level lowered so that it would
    really use them (at the default level OpenSSL itself refuses, which would prove nothing here)."""
    old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old.load_verify_locations(cafile=ca.ca_path)
    old.minimum_version = ssl.TLSVersion.TLSv1
    old.maximum_version = ssl.TLSVersion.TLSv1_1
    old.set_ciphers("DEFAULT:@SECLEVEL=0")
    return old


def _handshake_with_a_permissive_server(ca: TestCA, client: ssl.SSLContext) -> str:
    """The version `client` gets from a server that accepts TLS 1.0 and up: the control experiment."""
    cert, key = ca.issue("permissive", common_name="localhost")
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    server.minimum_version = ssl.TLSVersion.TLSv1
    server.set_ciphers("DEFAULT:@SECLEVEL=0")
    with socket.create_server(("127.0.0.1", 0)) as listening:

        def accept_one() -> None:
            connection, _ = listening.accept()
            with contextlib.suppress(ssl.SSLError, OSError):
                server.wrap_socket(connection, server_side=True).close()

        acceptor = threading.Thread(target=accept_one, daemon=True)
        acceptor.start()
        with (
            socket.create_connection(listening.getsockname(), timeout=5) as sock,
            client.wrap_socket(sock, server_hostname="localhost") as wrapped,
        ):
            version = wrapped.version()
        acceptor.join(5)
    assert version is not None
    return version


# Python deprecates the old versions too; the client here must offer them to show the proxy refuses them.
@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")
def test_tls_below_1_2_is_refused(cluster, ca):
    old = _tls_1_1_client(ca)
    assert _handshake_with_a_permissive_server(ca, old) == "TLSv1.1"  # this client really speaks 1.1
    proxy_cert, proxy_key = ca.issue("proxy-old", common_name="localhost")
    tls = {"listener": {"cert": str(proxy_cert), "key": str(proxy_key)}}
    with ProxyProcess(cluster.bootstrap, extra_config={"tls": tls}) as p:
        with socket.create_connection(("127.0.0.1", p.port), timeout=5) as sock, pytest.raises(ssl.SSLError):
            old.wrap_socket(sock, server_hostname="localhost").close()
        good = ca.client_context()
        with (
            socket.create_connection(("127.0.0.1", p.port), timeout=5) as sock,
            good.wrap_socket(sock, server_hostname="localhost") as wrapped,
        ):
            assert wrapped.version() in ("TLSv1.2", "TLSv1.3")
