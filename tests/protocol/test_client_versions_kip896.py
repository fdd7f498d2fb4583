"""The proxy's own Kafka client never asks a Kafka 4 broker for a version KIP-896 removed: every version it
may send lies inside what the 2026 trunk's schemas still define (Kafka's own, beside the repository: skipped,
saying so, where they are missing), and against a broker offering exactly those ranges it finds a version of
every API it uses."""

from __future__ import annotations

import pytest
from kafka_schemas import SHARED, SHARED_MISSING, load_schema, parse_versions

from sluice.protocol.client_requests import (
    API_VERSIONS,
    API_VERSIONS_VERSION,
    CLIENT_VERSIONS,
    choose_version,
)
from sluice.protocol.schema_table import KNOWN_APIS

pytestmark = pytest.mark.skipif(SHARED_MISSING is not None, reason=SHARED_MISSING or "")


def kafka4_ranges() -> dict[int, tuple[int, int]]:
    """What a trunk broker offers: each request schema's validVersions (none for the removed APIs)."""
    offered = {}
    for key, api in KNOWN_APIS.items():
        path = SHARED / "trunk-2026-08" / f"{api.name}Request.json"
        if path.exists():
            versions = parse_versions(load_schema(path).get("validVersions"))
            if versions is not None:
                offered[key] = versions
    return offered


def test_every_version_the_client_may_send_survived_kip896() -> None:
    offered = kafka4_ranges()
    for key, (low, high) in CLIENT_VERSIONS.items():
        assert key in offered, KNOWN_APIS[key].name
        assert offered[key][0] <= low <= high <= offered[key][1], (KNOWN_APIS[key].name, offered[key])
    assert offered[API_VERSIONS][0] <= API_VERSIONS_VERSION <= offered[API_VERSIONS][1]


def test_against_a_kafka4_broker_the_client_finds_a_version_of_every_api_it_uses() -> None:
    offered = kafka4_ranges()
    for key in CLIENT_VERSIONS:
        assert choose_version(key, offered) is not None, KNOWN_APIS[key].name
