"""Who may change quotas, with real identities: clients authenticate with SASL/PLAIN through the proxy to
SaslBrokerDouble (the mock cluster speaks no SASL); the principal Sluice read decides, per
`quota.admin_principals`. The proxy's own client (the quota store) authenticates with its own user."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from doubles.sasl_broker import SaslBrokerDouble
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from mock_cluster_process import MockCluster
from proxy_process import ProxyProcess
from rawclient import RawClient

from sluice.protocol.client_quota_codec import (
    ALTER_CLIENT_QUOTAS,
    DESCRIBE_CLIENT_QUOTAS,
    MATCH_EXACT,
    AlterEntry,
    FilterComponent,
    QuotaOp,
    decode_alter_response,
    decode_describe_response,
    encode_alter_request,
    encode_describe_request,
)

USERS = {"admin": "admin-pw-1c2d", "ops": "ops-pw-77ab", "app": "app-pw-0f3e", "sluice": "sluice-pw-9e8d"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[MockCluster]:
    with MockCluster(brokers=1, topics={"t": 1}) as c:
        yield c


@pytest.fixture(scope="module")
def proxy(cluster) -> Iterator[ProxyProcess]:
    with SaslBrokerDouble(cluster.bootstrap, USERS) as upstream:
        config = {
            "client": {"sasl": {"mechanism": "PLAIN", "username": "sluice", "password": USERS["sluice"]}},
            "quota": {
                "store": {"topic": "sasl-store"},
                "admin_principals": {"alter": ["User:admin"], "describe": ["User:ops"]},
            },
        }
        with ProxyProcess(upstream.bootstrap, config, wait_for_brokers=False) as p:
            yield p


def login(proxy: ProxyProcess, user: str) -> RawClient:
    raw = RawClient("127.0.0.1", proxy.port, client_id=f"{user}-tool")
    assert raw.call(SaslHandshakeRequest(mechanism="PLAIN"), 1, SaslHandshakeResponse).error_code == 0
    token = b"\0" + user.encode() + b"\0" + USERS[user].encode()
    assert raw.call(SaslAuthenticateRequest(auth_bytes=token), 1, SaslAuthenticateResponse).error_code == 0
    return raw


def alter_code(raw: RawClient, version: int, name: str) -> int:
    entry = AlterEntry((("client-id", name),), (QuotaOp("producer_byte_rate", 5000.0, False),))
    body = raw.call_body(ALTER_CLIENT_QUOTAS, version, encode_alter_request(version, [entry], False))
    return decode_alter_response(version, body).results[0].error_code


def describe(raw: RawClient, version: int, name: str):
    request = encode_describe_request(version, [FilterComponent("client-id", MATCH_EXACT, name)], True)
    return decode_describe_response(version, raw.call_body(DESCRIBE_CLIENT_QUOTAS, version, request))


@pytest.mark.parametrize("version", [0, 1])
def test_the_principal_read_from_sasl_decides(proxy, version: int) -> None:
    name = f"sasl-{version}"
    with login(proxy, "app") as app:
        assert alter_code(app, version, name) == 31
        denied = describe(app, version, name)
        assert (denied.error_code, denied.error_message, denied.entries) == (
            31,
            "Cluster authorization failed.",
            None,
        )
    with login(proxy, "ops") as ops:
        assert alter_code(ops, version, name) == 31
        assert describe(ops, version, name).entries == ()
    with login(proxy, "admin") as admin:
        assert alter_code(admin, version, name) == 0  # stored through the proxy's own SASL user
        assert dict(describe(admin, version, name).entries[0].values) == {"producer_byte_rate": 5000.0}
    with login(proxy, "ops") as ops:
        assert dict(describe(ops, version, name).entries[0].values) == {"producer_byte_rate": 5000.0}
    assert "sluice-pw" not in proxy.log_path.read_text()
