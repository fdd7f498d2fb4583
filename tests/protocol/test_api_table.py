"""The API table: spot checks against spec section 5, a full cross-check against kafka-python's
bundled JSON schemas, and header-version rules."""

from __future__ import annotations

import pytest
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.schemas.fields.base import BaseField

from sluice.protocol.apis import (
    API_SPECS,
    ApiSpec,
    ThrottlePosition,
    api_spec,
    is_flexible,
    request_header_version,
    response_header_version,
)

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


def test_every_key_from_0_to_87_is_known_and_unknown_keys_are_not() -> None:
    assert sorted(API_SPECS) == list(range(88))
    assert api_spec(88) is None
    assert api_spec(-1) is None


def _schema_classes() -> dict[tuple[int, str], type[ApiMessage]]:
    classes: dict[tuple[int, str], type[ApiMessage]] = {}
    pending = list(ApiMessage.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if getattr(cls, "_class_version", None) is None and getattr(cls, "_json", None) is not None:
            classes[(cls._json["apiKey"], cls._json["type"])] = cls
    return classes


def _import_all_codecs() -> None:
    import kafka.protocol.admin
    import kafka.protocol.consumer
    import kafka.protocol.metadata
    import kafka.protocol.producer
    import kafka.protocol.sasl  # noqa: F401


_import_all_codecs()
SCHEMAS = _schema_classes()
SCHEMA_KEYS = sorted({key for key, _ in SCHEMAS})


def _versions(text: str) -> tuple[int, int] | None:
    parsed = BaseField.parse_versions(text)  # "none" comes back as (-1, -1)
    return None if parsed is None or parsed[0] < 0 else (parsed[0], parsed[1])


def test_kafka_python_bundles_schemas_for_the_apis_the_proxy_touches() -> None:
    assert {0, 1, 3, 10, 17, 18, 19, 20, 36, 37, 48, 49, 60} <= set(SCHEMA_KEYS)


@pytest.mark.parametrize("key", SCHEMA_KEYS)
def test_table_agrees_with_kafka_python_schema(key: int) -> None:
    spec = API_SPECS[key]
    for kind in ("request", "response"):
        schema = SCHEMAS[(key, kind)].json
        valid = _versions(schema["validVersions"])
        assert valid is not None
        # The table spans the older spec minimum and the newer schema maximum.
        assert spec.min_version <= valid[0]
        assert spec.max_version == valid[1]
        flexible = _versions(schema["flexibleVersions"])
        assert spec.flexible_from == (None if flexible is None else flexible[0])


@pytest.mark.parametrize("key", SCHEMA_KEYS)
def test_throttle_field_versions_and_position_agree_with_kafka_python_schema(key: int) -> None:
    spec = API_SPECS[key]
    fields = [f for f in SCHEMAS[(key, "response")].json["fields"] if "tag" not in f]
    names = [f["name"] for f in fields]
    if "ThrottleTimeMs" not in names:
        assert spec.throttle_field_from is None
        return
    index = names.index("ThrottleTimeMs")
    field_versions = _versions(fields[index]["versions"])
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
