"""clamp_api_versions lowers capped max versions in ApiVersions responses v0-4, and nothing else."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.metadata import ApiVersionsResponse

from sluice.protocol.api_versions_clamp import advertise_apis, clamp_api_versions
from sluice.protocol.broker_addresses import REWRITABLE_MAX_VERSIONS
from sluice.protocol.codec_quirks import decode_body, encode_body
from sluice.protocol.errors import ProtocolError

ApiVersion = ApiVersionsResponse.ApiVersion
BROKER_RANGES = {0: (0, 11), 1: (4, 17), 3: (0, 12), 10: (0, 6), 18: (0, 4), 60: (0, 1), 75: (0, 0)}


def _response(version: int, ranges: dict[int, tuple[int, int]] = BROKER_RANGES) -> Any:
    message = ApiVersionsResponse(
        version=version,
        error_code=0,
        api_keys=[ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in ranges.items()],
        throttle_time_ms=17,
    )
    if version >= 3:
        message.supported_features = [
            ApiVersionsResponse.SupportedFeatureKey(name="metadata.version", min_version=1, max_version=20)
        ]
        message.finalized_features_epoch = 12
    return message


def _ranges(body: bytes, version: int) -> dict[int, tuple[int, int]]:
    decoded = decode_body(ApiVersionsResponse, version, body)
    return {e.api_key: (e.min_version, e.max_version) for e in decoded.api_keys}


@pytest.mark.parametrize("version", range(5))
def test_clamp_lowers_only_capped_maxima_and_keeps_everything_else(version: int) -> None:
    body = encode_body(_response(version), version)
    clamped = clamp_api_versions(version, body, {3: 9, 1: 12, 10: 8})
    assert clamped is not None
    expected = dict(BROKER_RANGES)
    expected[3] = (0, 9)
    expected[1] = (4, 12)  # Fetch lowered; FindCoordinator cap 8 is above the broker's 6: unchanged
    assert _ranges(clamped, version) == expected
    original = decode_body(ApiVersionsResponse, version, body).to_dict()
    rewritten = decode_body(ApiVersionsResponse, version, clamped).to_dict()
    original.pop("api_keys")
    rewritten.pop("api_keys")
    assert rewritten == original
    assert len(clamped) == len(body)


@pytest.mark.parametrize("version", range(5))
def test_clamp_with_rewritable_max_versions(version: int) -> None:
    ranges = {3: (0, 13), 10: (0, 6), 60: (0, 2), 18: (0, 4)}
    body = encode_body(_response(version, ranges), version)
    broker_newer = dict(ranges)
    broker_newer[3] = (0, 15)
    broker_newer[60] = (0, 9)
    newer_body = encode_body(_response(version, broker_newer), version)
    assert clamp_api_versions(version, body, REWRITABLE_MAX_VERSIONS) is None
    clamped = clamp_api_versions(version, newer_body, REWRITABLE_MAX_VERSIONS)
    assert clamped is not None
    assert _ranges(clamped, version) == ranges


@pytest.mark.parametrize("version", range(5))
def test_nothing_to_lower_gives_none(version: int) -> None:
    body = encode_body(_response(version), version)
    assert clamp_api_versions(version, body, {3: 12, 0: 99, 500: 1}) is None
    assert clamp_api_versions(version, body, {}) is None


@pytest.mark.parametrize("version", range(5))
def test_cap_below_the_broker_minimum_keeps_the_entry_and_reports_it(version: int) -> None:
    body = encode_body(_response(version), version)
    reports: list[tuple[int, int, int, int]] = []
    clamped = clamp_api_versions(version, body, {1: 3, 3: 5}, lambda *r: reports.append(r))
    assert clamped is not None
    assert _ranges(clamped, version)[1] == (4, 17)
    assert _ranges(clamped, version)[3] == (0, 5)
    assert reports == [(1, 4, 17, 3)]


@pytest.mark.parametrize("request_version", range(5))
def test_unsupported_version_error_answer_passes_untouched(request_version: int) -> None:
    v0_error = ApiVersionsResponse(
        version=0, error_code=35, api_keys=[ApiVersion(api_key=18, min_version=0, max_version=4)]
    )
    assert clamp_api_versions(request_version, encode_body(v0_error, 0), {18: 1}) is None


def test_other_error_answers_pass_untouched() -> None:
    error = ApiVersionsResponse(version=3, error_code=42, api_keys=[], throttle_time_ms=0)
    assert clamp_api_versions(3, encode_body(error, 3), {18: 1}) is None


@pytest.mark.parametrize("version", [0, 3])
def test_truncated_response_is_a_protocol_error(version: int) -> None:
    body = encode_body(_response(version), version)
    with pytest.raises(ProtocolError) as info:
        clamp_api_versions(version, body[:9], {3: 1})
    assert info.value.reason == "bad_api_versions_response"


@given(data=st.binary(max_size=60), version=st.integers(min_value=0, max_value=4))
def test_any_bytes_give_bytes_none_or_protocol_error(data: bytes, version: int) -> None:
    try:
        result = clamp_api_versions(version, data, {3: 1, 18: 0})
    except ProtocolError as exc:
        assert exc.reason == "bad_api_versions_response"
    else:
        assert result is None or len(result) == len(data)


# -- advertise_apis: the APIs the proxy answers itself -------------------------------------------------

QUOTA_ADMIN_RANGES = {48: (0, 1), 49: (0, 1)}


@pytest.mark.parametrize("version", range(5))
def test_advertise_adds_apis_the_broker_lacks_and_keeps_everything_else(version: int) -> None:
    body = encode_body(_response(version), version)
    advertised = advertise_apis(version, body, QUOTA_ADMIN_RANGES)
    assert advertised is not None
    assert _ranges(advertised, version) == {**BROKER_RANGES, **QUOTA_ADMIN_RANGES}
    original = decode_body(ApiVersionsResponse, version, body).to_dict()
    rewritten = decode_body(ApiVersionsResponse, version, advertised).to_dict()
    original.pop("api_keys")
    rewritten.pop("api_keys")
    assert rewritten == original


@pytest.mark.parametrize("version", range(5))
def test_advertise_replaces_the_broker_range_of_an_api_it_has(version: int) -> None:
    body = encode_body(_response(version, {**BROKER_RANGES, 48: (0, 0), 49: (0, 1)}), version)
    advertised = advertise_apis(version, body, QUOTA_ADMIN_RANGES)
    assert advertised is not None
    assert _ranges(advertised, version) == {**BROKER_RANGES, **QUOTA_ADMIN_RANGES}
    assert len(advertised) == len(body)


@pytest.mark.parametrize("version", range(5))
def test_advertise_gives_none_when_the_broker_already_says_so(version: int) -> None:
    body = encode_body(_response(version, {**BROKER_RANGES, **QUOTA_ADMIN_RANGES}), version)
    assert advertise_apis(version, body, QUOTA_ADMIN_RANGES) is None


def test_advertise_leaves_error_answers_alone() -> None:
    body = encode_body(ApiVersionsResponse(version=0, error_code=35, api_keys=[]), 0)
    assert advertise_apis(3, body, QUOTA_ADMIN_RANGES) is None


@given(st.binary(max_size=64), st.integers(0, 4))
def test_advertise_any_bytes_give_bytes_none_or_protocol_error(data: bytes, version: int) -> None:
    with contextlib.suppress(ProtocolError):
        advertise_apis(version, data, QUOTA_ADMIN_RANGES)
