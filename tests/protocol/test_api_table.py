"""The API table: spot checks against spec section 5, a full cross-check against Kafka's message schemas
(kafka-python's bundled JSON, and Kafka's own 3.9.1 and 2026-trunk copies where they sit beside the
repository) and the schema table generated from them, and header-version rules."""

from __future__ import annotations

import pytest
from kafka_schemas import SHARED_MISSING, Schema, parse_versions, schema_sources

from sluice.protocol.apis import (
    API_SPECS,
    ApiSpec,
    ThrottlePosition,
    api_spec,
    is_flexible,
    request_header_version,
    response_header_version,
)
from sluice.protocol.schema_table import KNOWN_APIS

# Rows transcribed from spec section 5: key -> (name, flexible from, throttle field from,
# client throttles from, position).
SPEC_ROWS = {
    0: ("Produce", 9, 1, 6, ThrottlePosition.AFTER_RESPONSES),
    1: ("Fetch", 12, 1, 8, ThrottlePosition.FIRST),
    18: ("ApiVersions", 3, 1, 2, ThrottlePosition.AFTER_API_KEYS),
    23: ("OffsetForLeaderEpoch", 4, 2, None, ThrottlePosition.FIRST),
    38: ("CreateDelegationToken", 2, 0, 1, ThrottlePosition.LAST),
    39: ("RenewDelegationToken", 2, 0, 1, ThrottlePosition.LAST),
    40: ("ExpireDelegationToken", 2, 0, 1, ThrottlePosition.LAST),
    41: ("DescribeDelegationToken", 2, 0, 1, ThrottlePosition.LAST),
    43: ("ElectLeaders", 2, 0, 0, ThrottlePosition.FIRST),
    47: ("OffsetDelete", None, 0, 0, ThrottlePosition.SECOND),
    48: ("DescribeClientQuotas", 1, 0, None, ThrottlePosition.FIRST),
    49: ("AlterClientQuotas", 1, 0, None, ThrottlePosition.FIRST),
}
NO_THROTTLE_FIELD = [4, 5, 6, 7, 17, 27, 36, 52, 53, 54, 55, 58, 83, 84, 85, 86, 87]


@pytest.mark.parametrize("key", sorted(SPEC_ROWS))
def test_spec_rows(key: int) -> None:
    name, flexible_from, field_from, client_from, position = SPEC_ROWS[key]
    spec = api_spec(key)
    assert spec is not None
    assert (spec.name, spec.flexible_from, spec.throttle_field_from) == (name, flexible_from, field_from)
    assert (spec.client_throttles_from, spec.throttle_position) == (client_from, position)


def test_produce_fetch_and_api_versions_version_ranges_cover_the_spec_snapshot() -> None:
    # Spec snapshot ranges are Produce 0-11, Fetch 0-17, ApiVersions 0-4; the table may only extend them.
    for key, spec_max in ((0, 11), (1, 17), (18, 4), (3, 12), (60, 1)):
        spec = API_SPECS[key]
        assert spec.min_version == 0
        assert spec.max_version >= spec_max


@pytest.mark.parametrize("key", NO_THROTTLE_FIELD)
def test_apis_without_a_throttle_field(key: int) -> None:
    spec = api_spec(key)
    assert spec is not None
    assert spec.throttle_field_from is None
    assert spec.throttle_position is None
    assert not spec.has_throttle_field(spec.max_version)


def test_throttle_field_and_client_throttling_by_version() -> None:
    produce = API_SPECS[0]
    assert not produce.has_throttle_field(0)
    assert produce.has_throttle_field(1)
    assert not produce.client_throttles(5)
    assert produce.client_throttles(6)
    assert not API_SPECS[48].client_throttles(1)
    assert API_SPECS[43].client_throttles(0)


def test_every_api_the_schema_table_knows_has_its_row_with_the_same_name_and_versions() -> None:
    """Every API a client or broker may speak (the union of the schemas' versions, as generated into
    protocol/schema_table.py) has its row: the header version is then read, never guessed, its throttle
    field patched, and its metrics named."""
    assert sorted(API_SPECS) == sorted(KNOWN_APIS)
    for key, known in KNOWN_APIS.items():
        spec = API_SPECS[key]
        assert (spec.name, (spec.min_version, spec.max_version)) == (known.name, known.versions), key


def test_unknown_keys_have_no_row() -> None:
    assert api_spec(max(KNOWN_APIS) + 1) is None
    assert api_spec(-1) is None


def _defined(schema: Schema) -> bool:
    """Whether a source still defines the message (Kafka 4 lists the ZooKeeper-era ones as removed)."""
    return parse_versions(schema.get("validVersions")) is not None


SOURCES = {source.name: source for source in schema_sources()}
MESSAGES = {
    (name, schema["apiKey"], schema["type"]): schema
    for name, source in SOURCES.items()
    for schema in source.messages()
    if _defined(schema)
}


def test_the_cross_check_reads_every_source_present() -> None:
    assert {name for name, _key, _kind in MESSAGES} == set(SOURCES)
    kafka_python = {key for name, key, _kind in MESSAGES if name == "kafka-python"}
    assert {0, 1, 3, 10, 17, 18, 19, 20, 36, 37, 48, 49, 60} <= kafka_python
    if SHARED_MISSING is None:
        assert {key for name, key, _kind in MESSAGES if name == "trunk-2026-08"} >= set(range(88, 95))


@pytest.mark.parametrize(("source", "key", "kind"), sorted(MESSAGES), ids=lambda value: str(value))
def test_the_row_agrees_with_every_schema_that_defines_the_api(source: str, key: int, kind: str) -> None:
    schema = MESSAGES[(source, key, kind)]
    spec = API_SPECS[key]
    low, high = parse_versions(schema["validVersions"])  # type: ignore[misc]
    assert spec.min_version <= low and high <= spec.max_version
    flexible = parse_versions(schema.get("flexibleVersions"))
    assert spec.flexible_from == (None if flexible is None else flexible[0])
    if kind == "request":
        return
    fields = [f for f in schema["fields"] if "tag" not in f]
    names = [f["name"] for f in fields]
    if "ThrottleTimeMs" not in names:
        assert spec.throttle_field_from is None
        assert spec.throttle_position is None
        return
    index = names.index("ThrottleTimeMs")
    field_versions = parse_versions(fields[index]["versions"])
    assert field_versions is not None
    assert spec.throttle_field_from == field_versions[0]
    after_field = {
        "Responses": ThrottlePosition.AFTER_RESPONSES,
        "ApiKeys": ThrottlePosition.AFTER_API_KEYS,
    }
    if index == 0:
        assert spec.throttle_position is ThrottlePosition.FIRST
    elif index == 1 and names[0] == "ErrorCode":
        assert spec.throttle_position is ThrottlePosition.SECOND
    elif index == len(names) - 1 and spec.throttle_position is ThrottlePosition.LAST:
        pass  # the delegation-token answers: the last field of the message
    else:
        assert spec.throttle_position is after_field[names[index - 1]]


def test_request_header_versions() -> None:
    assert request_header_version(7, 0) == 0  # ControlledShutdown v0
    assert request_header_version(7, 1) == 1
    assert request_header_version(7, 3) == 2
    assert request_header_version(3, 8) == 1
    assert request_header_version(3, 9) == 2
    assert request_header_version(18, 3) == 2  # ApiVersions requests do use header v2
    assert request_header_version(47, 0) == 1  # OffsetDelete is never flexible
    assert request_header_version(1, 500) == 2  # newer than the table, still flexible
    assert request_header_version(999, 0) == 1  # unknown key: v1


def test_response_header_versions() -> None:
    assert response_header_version(3, 8) == 0
    assert response_header_version(3, 9) == 1
    assert [response_header_version(18, v) for v in range(5)] == [0] * 5
    assert response_header_version(999, 5) == 0


def test_is_flexible() -> None:
    assert not is_flexible(0, 8)
    assert is_flexible(0, 9)
    assert not is_flexible(17, 1)  # SaslHandshake never
    assert is_flexible(55, 0)
    assert not is_flexible(12345, 0)


def test_api_spec_is_immutable() -> None:
    spec = API_SPECS[0]
    assert isinstance(spec, ApiSpec)
    with pytest.raises(AttributeError):
        spec.max_version = 99  # type: ignore[misc]
