"""The SASL test-double broker on its own: real clients authenticate straight to it (no proxy) and their
records reach the mock cluster behind it; raw requests pin Kafka's server-side SASL states."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from doubles.sasl_broker import SaslBrokerDouble
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from mock_cluster_process import MockCluster
from rawclient import RawClient
from tls_certs import TestCA

USERS = {"alice": "alice-pw-7f3a", "bob": "bob-pw-91c2", "carol": "carol-pw-55d0"}
PARTITIONS = 3
RECORDS = 30
SCRAM = ["SCRAM-SHA-256", "SCRAM-SHA-512"]
PLAIN_FAILED = "Authentication failed: Invalid username or password"
SCRAM_FAILED = "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"
UNSUPPORTED_VERSION, UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED = (
    35,
    33,
    34,
    58,
)
SASL_HANDSHAKE, API_VERSIONS, SASL_AUTHENTICATE = 17, 18, 36


@pytest.fixture(scope="module")
def cluster() -> Iterator[MockCluster]:
    with MockCluster(brokers=3) as mock:
        yield mock


@pytest.fixture
def double(cluster: MockCluster) -> Iterator[SaslBrokerDouble]:
    with SaslBrokerDouble(cluster.bootstrap, USERS) as broker:
        yield broker


@pytest.fixture
def topic(cluster: MockCluster) -> str:
    name = f"sasl-double-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(name, PARTITIONS)
    return name


def _values(tag: str) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(RECORDS)]


def _confluent_conf(bootstrap: str, mechanism: str, user: str, password: str, **extra: Any) -> dict[str, Any]:
    conf = {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }
    return conf | extra


def _confluent_produce(conf: dict[str, Any], topic: str, values: list[bytes]) -> None:
    producer = Producer(conf)
    errors: list[KafkaError | None] = []
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % PARTITIONS, on_delivery=lambda e, _m: errors.append(e))
    assert producer.flush(20) == 0
    assert errors == [None] * len(values)


def _confluent_consume(conf: dict[str, Any], topic: str, count: int) -> list[bytes]:
    consumer = Consumer(conf | {"group.id": f"g-{uuid.uuid4()}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    seen: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(seen) < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                seen.append(message.value())
    finally:
        consumer.close()
    return seen


def _failing_confluent_producer(conf: dict[str, Any], topic: str) -> list[KafkaError]:
    """Errors a producer reports (error_cb) while it cannot authenticate, up to the first SASL error."""
    errors: list[KafkaError] = []
    producer = Producer(conf | {"error_cb": errors.append})
    producer.produce(topic, b"never")
    deadline = time.monotonic() + 15
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
        producer.poll(0.05)
    producer.purge()
    producer.flush(0)
    return errors


# ---------------------------------------------------------------- confluent-kafka (librdkafka)


@pytest.mark.parametrize("mechanism", ["PLAIN", *SCRAM])
def test_confluent_kafka_produces_and_consumes_as_alice(
    double: SaslBrokerDouble, topic: str, mechanism: str
) -> None:
    conf = _confluent_conf(double.bootstrap, mechanism, "alice", USERS["alice"])
    _confluent_produce(conf, topic, _values(mechanism))
    assert sorted(_confluent_consume(conf, topic, RECORDS)) == sorted(_values(mechanism))
    assert double.authenticated and set(double.authenticated) == {"alice"}
    assert double.failed == []


def test_confluent_kafka_oauthbearer_with_an_unsecured_jwt_authenticates_its_subject(
    double: SaslBrokerDouble, topic: str
) -> None:
    conf = {
        "bootstrap.servers": double.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": "principal=bob",
    }
    _confluent_produce(conf, topic, _values("oauth"))
    assert sorted(_confluent_consume(conf, topic, RECORDS)) == sorted(_values("oauth"))
    assert double.authenticated and set(double.authenticated) == {"bob"}


@pytest.mark.parametrize(
    ("mechanism", "message"),
    [("PLAIN", PLAIN_FAILED), *((m, SCRAM_FAILED.format(m)) for m in SCRAM)],
)
def test_a_wrong_password_fails_with_kafkas_message_and_names_the_user(
    double: SaslBrokerDouble, topic: str, mechanism: str, message: str
) -> None:
    errors = _failing_confluent_producer(
        _confluent_conf(double.bootstrap, mechanism, "alice", "not-the-password"), topic
    )
    authentication = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert authentication, errors
    assert message in authentication[0].str()
    assert double.authenticated == []
    assert double.failed and set(double.failed) == {"alice"}


def test_an_unknown_user_fails_like_a_wrong_password(double: SaslBrokerDouble, topic: str) -> None:
    errors = _failing_confluent_producer(_confluent_conf(double.bootstrap, "PLAIN", "mallory", "x"), topic)
    assert any(PLAIN_FAILED in e.str() for e in errors)
    assert set(double.failed) == {"mallory"}


def test_an_unknown_oauthbearer_subject_gets_kafkas_json_error(double: SaslBrokerDouble, topic: str) -> None:
    conf = {
        "bootstrap.servers": double.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": "principal=mallory",
    }
    errors = _failing_confluent_producer(conf, topic)
    assert any('{"status":"invalid_token"}' in e.str() for e in errors), errors
    assert double.authenticated == []
    assert set(double.failed) == {"mallory"}


def test_confluent_kafka_re_authenticates_within_the_session_lifetime(
    cluster: MockCluster, topic: str
) -> None:
    with SaslBrokerDouble(cluster.bootstrap, USERS, session_lifetime_ms=1500) as double:
        producer = Producer(_confluent_conf(double.bootstrap, "SCRAM-SHA-256", "alice", USERS["alice"]))
        errors: list[KafkaError | None] = []
        # librdkafka re-authenticates before the session ends; a producer that kept using an expired
        # session would see its connection closed and its deliveries retried.
        started = time.monotonic()
        while time.monotonic() - started < 2.5:
            producer.produce(topic, b"x", on_delivery=lambda e, _m: errors.append(e))
            producer.poll(0.05)
        assert producer.flush(20) == 0
        assert errors and set(errors) == {None}
        assert len(double.authenticated) > double.connections  # some connection authenticated twice
        assert set(double.authenticated) == {"alice"}
        assert double.failed == []


# ---------------------------------------------------------------- aiokafka


@pytest.mark.parametrize("mechanism", ["PLAIN", *SCRAM])
async def test_aiokafka_produces_and_consumes_as_bob(
    double: SaslBrokerDouble, topic: str, mechanism: str
) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    conf: dict[str, Any] = {
        "bootstrap_servers": double.bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "bob",
        "sasl_plain_password": USERS["bob"],
    }
    values = _values(f"aio-{mechanism}")
    producer = AIOKafkaProducer(**conf)
    await producer.start()
    try:
        for i, value in enumerate(values):
            await producer.send_and_wait(topic, value, partition=i % PARTITIONS)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **conf)
    await consumer.start()
    seen: list[bytes] = []
    try:
        async with asyncio.timeout(30):
            async for message in consumer:
                seen.append(message.value)
                if len(seen) == len(values):
                    break
    finally:
        await consumer.stop()
    assert sorted(seen) == sorted(values)
    assert double.authenticated and set(double.authenticated) == {"bob"}


async def test_aiokafka_with_a_wrong_password_cannot_start(
    double: SaslBrokerDouble, caplog: pytest.LogCaptureFixture
) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaConnectionError

    producer = AIOKafkaProducer(
        bootstrap_servers=double.bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="bob",
        sasl_plain_password="wrong",
        request_timeout_ms=5000,
    )
    with caplog.at_level(logging.ERROR, logger="aiokafka"), pytest.raises(KafkaConnectionError):
        await producer.start()
    await producer.stop()
    assert PLAIN_FAILED in caplog.text
    assert double.authenticated == []
    assert set(double.failed) == {"bob"}


# ---------------------------------------------------------------- TLS


def test_sasl_over_tls_with_a_test_ca(cluster: MockCluster, topic: str, tmp_path: Path) -> None:
    ca = TestCA(tmp_path)
    cert, key = ca.issue("broker", common_name="localhost")
    with SaslBrokerDouble(cluster.bootstrap, USERS, tls=ca.server_context(cert, key)) as double:
        conf = _confluent_conf(
            double.bootstrap,
            "SCRAM-SHA-512",
            "carol",
            USERS["carol"],
            **{"security.protocol": "SASL_SSL", "ssl.ca.location": str(ca.ca_path)},
        )
        _confluent_produce(conf, topic, _values("tls"))
        assert sorted(_confluent_consume(conf, topic, RECORDS)) == sorted(_values("tls"))
        assert double.authenticated and set(double.authenticated) == {"carol"}


async def test_aiokafka_over_tls(cluster: MockCluster, topic: str, tmp_path: Path) -> None:
    from aiokafka import AIOKafkaProducer

    ca = TestCA(tmp_path)
    cert, key = ca.issue("broker", common_name="localhost")
    with SaslBrokerDouble(cluster.bootstrap, USERS, tls=ca.server_context(cert, key)) as double:
        producer = AIOKafkaProducer(
            bootstrap_servers=double.bootstrap,
            security_protocol="SASL_SSL",
            ssl_context=ca.client_context(),
            sasl_mechanism="PLAIN",
            sasl_plain_username="bob",
            sasl_plain_password=USERS["bob"],
        )
        await producer.start()
        try:
            metadata = await producer.send_and_wait(topic, b"over tls", partition=0)
        finally:
            await producer.stop()
        assert metadata.offset >= 0
        assert set(double.authenticated) == {"bob"}


def test_a_plaintext_client_cannot_talk_to_a_tls_listener(cluster: MockCluster, tmp_path: Path) -> None:
    ca = TestCA(tmp_path)
    cert, key = ca.issue("broker", common_name="localhost")
    with SaslBrokerDouble(cluster.bootstrap, USERS, tls=ca.server_context(cert, key)) as double:
        host, port = double.bootstrap.split(":")
        with RawClient(host, int(port)) as client:
            client.send(ApiVersionsRequest(), 0)
            assert client.is_closed_by_peer()
        assert double.authenticated == []


# ---------------------------------------------------------------- legacy framing (SaslHandshake v0)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_kafka_python_authenticates_with_raw_tokens_after_handshake_v0(
    cluster: MockCluster, topic: str, mechanism: str
) -> None:
    from kafka import KafkaProducer

    with SaslBrokerDouble(cluster.bootstrap, USERS, sasl_handshake_max_version=0) as double:
        # No api_version pin: the double answers ApiVersions v3+ as Kafka does, so kafka-python's probe
        # works, learns SaslHandshake v0 only, and sends SaslBytesRequest tokens.
        producer = KafkaProducer(
            bootstrap_servers=double.bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism=mechanism,
            sasl_plain_username="carol",
            sasl_plain_password=USERS["carol"],
        )
        try:
            metadata = producer.send(topic, b"legacy", partition=1).get(timeout=20)
        finally:
            producer.close()
        assert metadata.offset >= 0
        assert double.authenticated and set(double.authenticated) == {"carol"}


def test_raw_legacy_plain_token_then_kafka_requests(cluster: MockCluster) -> None:
    with (
        SaslBrokerDouble(cluster.bootstrap, USERS, sasl_handshake_max_version=0) as double,
        _raw_client(double) as client,
    ):
        handshake = client.call(SaslHandshakeRequest(mechanism="PLAIN"), 0, SaslHandshakeResponse)
        assert handshake.error_code == 0
        token = b"\0alice\0" + USERS["alice"].encode()
        client.sock.sendall(struct.pack(">i", len(token)) + token)  # no Kafka header
        assert client.receive_frame() == b"\0\0\0\0"  # PLAIN's empty answer, raw
        assert double.authenticated == ["alice"]
        metadata = client.call(MetadataRequest(topics=[]), 1, MetadataResponse)
        assert {b.port for b in metadata.brokers} == set(double.listeners.values())


def test_raw_legacy_failure_just_closes(cluster: MockCluster) -> None:
    with SaslBrokerDouble(cluster.bootstrap, USERS, sasl_handshake_max_version=0) as double:
        with _raw_client(double) as client:
            client.call(SaslHandshakeRequest(mechanism="PLAIN"), 0, SaslHandshakeResponse)
            token = b"\0alice\0wrong"
            client.sock.sendall(struct.pack(">i", len(token)) + token)
            assert client.is_closed_by_peer()
        assert double.failed == ["alice"]


# ---------------------------------------------------------------- raw: Kafka's server-side states


def _raw_client(double: SaslBrokerDouble) -> RawClient:
    host, port = double.bootstrap.split(":")
    return RawClient(host, int(port))


def _plain(client: RawClient, user: str, password: str, version: int = 1) -> Any:
    handshake = client.call(SaslHandshakeRequest(mechanism="PLAIN"), 1, SaslHandshakeResponse)
    assert handshake.error_code == 0
    token = f"\0{user}\0{password}".encode()
    return client.call(SaslAuthenticateRequest(auth_bytes=token), version, SaslAuthenticateResponse)


def test_api_versions_advertises_the_sasl_apis_next_to_the_mocks(double: SaslBrokerDouble) -> None:
    with _raw_client(double) as client:
        response = client.call(ApiVersionsRequest(), 2, ApiVersionsResponse)
    versions = {entry.api_key: (entry.min_version, entry.max_version) for entry in response.api_keys}
    assert versions[SASL_HANDSHAKE] == (0, 1)
    assert versions[SASL_AUTHENTICATE] == (0, 2)
    assert versions[API_VERSIONS] == (0, 2)  # the mock's own entries pass through
    assert 0 in versions and 1 in versions  # Produce, Fetch


def test_api_versions_v3_is_refused_in_v0_so_clients_fall_back(double: SaslBrokerDouble) -> None:
    with _raw_client(double) as client:
        client.send(ApiVersionsRequest(client_software_name="raw", client_software_version="1"), 3)
        frame = client.receive_frame()
        response = ApiVersionsResponse[0].decode(frame[8:])  # header v0: the correlation id only
        assert response.error_code == UNSUPPORTED_VERSION
        assert [(e.api_key, e.min_version, e.max_version) for e in response.api_keys] == [
            (API_VERSIONS, 0, 2)
        ]
        # Still before authentication: the client may retry with a version the mock speaks.
        assert client.call(ApiVersionsRequest(), 2, ApiVersionsResponse).error_code == 0


def test_an_unsupported_mechanism_gets_the_enabled_list_then_a_close(double: SaslBrokerDouble) -> None:
    with _raw_client(double) as client:
        response = client.call(SaslHandshakeRequest(mechanism="GSSAPI"), 1, SaslHandshakeResponse)
        assert response.error_code == UNSUPPORTED_SASL_MECHANISM
        assert response.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
        assert client.is_closed_by_peer()


@pytest.mark.parametrize(
    ("request_", "version"),
    [(MetadataRequest(topics=[]), 1), (SaslAuthenticateRequest(auth_bytes=b"\0a\0b"), 1)],
)
def test_anything_but_versions_or_handshake_before_authentication_closes(
    double: SaslBrokerDouble, request_: Any, version: int
) -> None:
    with _raw_client(double) as client:
        client.send(request_, version)
        assert client.is_closed_by_peer()
    assert double.authenticated == []


def test_a_second_api_versions_after_the_first_closes(double: SaslBrokerDouble) -> None:
    with _raw_client(double) as client:
        client.call(ApiVersionsRequest(), 2, ApiVersionsResponse)
        client.send(ApiVersionsRequest(), 2)
        assert client.is_closed_by_peer()


def test_after_authentication_metadata_points_at_the_doubles_listeners(
    cluster: MockCluster, double: SaslBrokerDouble
) -> None:
    with _raw_client(double) as client:
        response = _plain(client, "alice", USERS["alice"])
        assert (response.error_code, response.error_message, response.session_lifetime_ms) == (0, None, 0)
        metadata = client.call(MetadataRequest(topics=[]), 1, MetadataResponse)
    assert sorted((b.node_id, b.port) for b in metadata.brokers) == sorted(double.listeners.items())
    assert {b.host for b in metadata.brokers} == {"127.0.0.1"}
    assert not {b.port for b in metadata.brokers} & {port for _, port in cluster.addresses}


def test_a_failed_authentication_answers_58_with_kafkas_message_then_closes(double: SaslBrokerDouble) -> None:
    with _raw_client(double) as client:
        response = _plain(client, "alice", "wrong", version=2)
        assert (response.error_code, response.error_message) == (SASL_AUTHENTICATION_FAILED, PLAIN_FAILED)
        assert client.is_closed_by_peer()
    assert double.failed == ["alice"]


def test_plain_with_another_authorization_id_fails(double: SaslBrokerDouble) -> None:
    with _raw_client(double) as client:
        client.call(SaslHandshakeRequest(mechanism="PLAIN"), 1, SaslHandshakeResponse)
        token = b"bob\0alice\0" + USERS["alice"].encode()
        response = client.call(SaslAuthenticateRequest(auth_bytes=token), 1, SaslAuthenticateResponse)
        assert response.error_code == SASL_AUTHENTICATION_FAILED
        assert "authorization id that is different from username" in response.error_message


def test_without_a_session_lifetime_a_new_handshake_is_an_illegal_state(double: SaslBrokerDouble) -> None:
    with _raw_client(double) as client:
        _plain(client, "alice", USERS["alice"])
        handshake = client.call(SaslHandshakeRequest(mechanism="PLAIN"), 1, SaslHandshakeResponse)
        assert handshake.error_code == ILLEGAL_SASL_STATE
        token = b"\0alice\0" + USERS["alice"].encode()
        again = client.call(SaslAuthenticateRequest(auth_bytes=token), 1, SaslAuthenticateResponse)
        assert again.error_code == ILLEGAL_SASL_STATE
        # Kafka answers these like any request: the connection carries on.
        assert client.call(MetadataRequest(topics=[]), 1, MetadataResponse).brokers
    assert double.authenticated == ["alice"]


def test_re_authentication_with_a_session_lifetime(cluster: MockCluster) -> None:
    with (
        SaslBrokerDouble(cluster.bootstrap, USERS, session_lifetime_ms=60_000) as double,
        _raw_client(double) as client,
    ):
        assert _plain(client, "alice", USERS["alice"]).session_lifetime_ms == 60_000
        assert _plain(client, "alice", USERS["alice"], version=2).session_lifetime_ms == 60_000
        assert double.authenticated == ["alice", "alice"]
        assert client.call(MetadataRequest(topics=[]), 1, MetadataResponse).brokers
        # Kafka starts at most one re-authentication per second; sooner, the handshake is an ordinary
        # request on an authenticated connection, which Kafka refuses without closing.
        too_soon = client.call(SaslHandshakeRequest(mechanism="PLAIN"), 1, SaslHandshakeResponse)
        assert too_soon.error_code == ILLEGAL_SASL_STATE
        assert client.call(MetadataRequest(topics=[]), 1, MetadataResponse).brokers


def test_re_authentication_cannot_change_the_principal(cluster: MockCluster) -> None:
    with (
        SaslBrokerDouble(cluster.bootstrap, USERS, session_lifetime_ms=60_000) as double,
        _raw_client(double) as client,
    ):
        _plain(client, "alice", USERS["alice"])
        changed = _plain(client, "bob", USERS["bob"])
        assert changed.error_code == SASL_AUTHENTICATION_FAILED
        assert (
            changed.error_message
            == "Cannot change principals during re-authentication from User.alice: User.bob"
        )
        assert client.is_closed_by_peer()
    assert double.authenticated == ["alice"]


def test_re_authentication_with_another_mechanism_is_closed_at_the_next_token(cluster: MockCluster) -> None:
    with (
        SaslBrokerDouble(cluster.bootstrap, USERS, session_lifetime_ms=60_000) as double,
        _raw_client(double) as client,
    ):
        _plain(client, "alice", USERS["alice"])
        handshake = client.call(SaslHandshakeRequest(mechanism="SCRAM-SHA-256"), 1, SaslHandshakeResponse)
        assert handshake.error_code == 0  # Kafka answers the handshake, then fails the first token
        client.send(SaslAuthenticateRequest(auth_bytes=b"n,,n=alice,r=abc"), 1)
        assert client.is_closed_by_peer()
    assert double.authenticated == ["alice"]


def test_session_lifetime_is_sent_from_authenticate_v1_only(cluster: MockCluster) -> None:
    with SaslBrokerDouble(cluster.bootstrap, USERS, session_lifetime_ms=60_000) as double:
        sizes = {}
        for version in (0, 1):
            with _raw_client(double) as client:
                client.call(SaslHandshakeRequest(mechanism="PLAIN"), 1, SaslHandshakeResponse)
                token = b"\0alice\0" + USERS["alice"].encode()
                client.send(SaslAuthenticateRequest(auth_bytes=token), version)
                frame = client.receive_frame()
                sizes[version] = len(frame)
                if version == 1:
                    assert SaslAuthenticateResponse[1].decode(frame[8:]).session_lifetime_ms == 60_000
    # v0 body: error code, null message, empty bytes (8 bytes); v1 adds the int64 session lifetime.
    assert sizes == {0: 4 + 4 + 8, 1: 4 + 4 + 8 + 8}


def test_a_request_after_the_session_expired_closes_the_connection(cluster: MockCluster) -> None:
    with (
        SaslBrokerDouble(cluster.bootstrap, USERS, session_lifetime_ms=100) as double,
        _raw_client(double) as client,
    ):
        _plain(client, "alice", USERS["alice"])
        time.sleep(0.3)  # the session's 100 ms lifetime passing is the event
        client.send(MetadataRequest(topics=[]), 1)
        assert client.is_closed_by_peer()


def test_bad_input_closes_only_that_connection(double: SaslBrokerDouble) -> None:
    with _raw_client(double) as bad, _raw_client(double) as good:
        _plain(good, "alice", USERS["alice"])
        bad.sock.sendall(struct.pack(">i", -5))
        assert bad.is_closed_by_peer()
        assert good.call(MetadataRequest(topics=[]), 1, MetadataResponse).brokers


def _unsecured_jwt(claims: dict[str, Any]) -> bytes:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none'})}.{part(claims)}.".encode()


def test_oauthbearer_error_challenge_then_failure_on_the_acknowledgement(double: SaslBrokerDouble) -> None:
    expired = _unsecured_jwt({"sub": "alice", "exp": time.time() - 60})
    with _raw_client(double) as client:
        client.call(SaslHandshakeRequest(mechanism="OAUTHBEARER"), 1, SaslHandshakeResponse)
        token = b"n,,\x01auth=Bearer " + expired + b"\x01\x01"
        challenge = client.call(SaslAuthenticateRequest(auth_bytes=token), 1, SaslAuthenticateResponse)
        assert (challenge.error_code, challenge.auth_bytes) == (0, b'{"status":"invalid_token"}')
        final = client.call(SaslAuthenticateRequest(auth_bytes=b"\x01"), 1, SaslAuthenticateResponse)
        assert (final.error_code, final.error_message) == (
            SASL_AUTHENTICATION_FAILED,
            '{"status":"invalid_token"}',
        )
        assert client.is_closed_by_peer()
    assert double.failed == ["alice"]


def test_oauthbearer_accepts_a_valid_unsecured_jwt_with_an_empty_answer(double: SaslBrokerDouble) -> None:
    jwt = _unsecured_jwt({"sub": "carol", "exp": time.time() + 600})
    with _raw_client(double) as client:
        client.call(SaslHandshakeRequest(mechanism="OAUTHBEARER"), 1, SaslHandshakeResponse)
        token = b"n,a=carol,\x01auth=Bearer " + jwt + b"\x01\x01"
        response = client.call(SaslAuthenticateRequest(auth_bytes=token), 1, SaslAuthenticateResponse)
        assert (response.error_code, response.auth_bytes) == (0, b"")
    assert double.authenticated == ["carol"]
