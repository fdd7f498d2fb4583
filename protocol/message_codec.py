"""Whole-message encode/decode for the few APIs Sluice builds or reads in full, by API key.

A thin table over kafka-python's generated classes, always going through `protocol.codec_quirks`
(so tagged fields survive and malformed input raises ProtocolError). Messages can be built from plain
keyword arguments: nested structs and struct arrays may be given as mappings, which are turned into
kafka-python's data classes here, so callers (the proxy's own requests, the test doubles' answers)
never need to know those class names. Unknown tagged fields are given as `_<tag>=bytes`, kafka-python's
own spelling (tests use them to check that tagged fields survive a rewrite).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka.protocol.admin.configs import DescribeConfigsRequest, DescribeConfigsResponse
from kafka.protocol.admin.topics import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse
from kafka.protocol.schemas.fields.base import BaseField

from sluice.protocol.codec_quirks import decode_body, encode_body
from sluice.protocol.errors import ProtocolError

_PAIRS: tuple[tuple[type[ApiMessage], type[ApiMessage]], ...] = (
    (MetadataRequest, MetadataResponse),
    (ApiVersionsRequest, ApiVersionsResponse),
    (CreateTopicsRequest, CreateTopicsResponse),
    (DeleteTopicsRequest, DeleteTopicsResponse),
    (DescribeConfigsRequest, DescribeConfigsResponse),
    (CreatePartitionsRequest, CreatePartitionsResponse),
    (FindCoordinatorRequest, FindCoordinatorResponse),
    # The proxy's own Kafka client (protocol/client_requests.py).
    (ProduceRequest, ProduceResponse),
    (FetchRequest, FetchResponse),
    (ListOffsetsRequest, ListOffsetsResponse),
    (InitProducerIdRequest, InitProducerIdResponse),
)
REQUEST_CLASSES: Mapping[int, type[ApiMessage]] = {request.API_KEY: request for request, _ in _PAIRS}
RESPONSE_CLASSES: Mapping[int, type[ApiMessage]] = {request.API_KEY: response for request, response in _PAIRS}


def request_class(api_key: int) -> type[ApiMessage]:
    try:
        return REQUEST_CLASSES[api_key]
    except KeyError:
        raise ProtocolError("unsupported_api", f"no codec for api key {api_key}") from None


def response_class(api_key: int) -> type[ApiMessage]:
    try:
        return RESPONSE_CLASSES[api_key]
    except KeyError:
        raise ProtocolError("unsupported_api", f"no codec for api key {api_key}") from None


def decode_request_body(api_key: int, version: int, body: bytes | memoryview) -> Any:
    """A request body (after the request header) as a kafka-python message object."""
    return decode_body(request_class(api_key), version, body)


def decode_response_body(api_key: int, version: int, body: bytes | memoryview) -> Any:
    """A response body (after the response header) as a kafka-python message object."""
    return decode_body(response_class(api_key), version, body)


def encode_request_body(api_key: int, version: int, **fields: Any) -> bytes:
    return encode_body(build_message(request_class(api_key), version, fields), version)


def encode_response_body(api_key: int, version: int, **fields: Any) -> bytes:
    return encode_body(build_message(response_class(api_key), version, fields), version)


def build_message(message_class: type[ApiMessage], version: int, fields: Mapping[str, Any]) -> Any:
    """A `message_class` object at `version`; unnamed fields take their schema defaults.

    Raises ValueError for a version the class does not know or a field name it does not have.
    """
    if not 0 <= version <= message_class.max_version:
        raise ValueError(f"{message_class.name} has no version {version}")
    return message_class(version=version, **_convert_fields(message_class.fields, version, fields))


def _convert_fields(
    schema: Mapping[str, BaseField], version: int, fields: Mapping[str, Any]
) -> dict[str, Any]:
    converted = {}
    for name, value in fields.items():
        field = schema.get(name)
        if field is not None:
            converted[name] = _convert_value(field, version, value)
        elif name.startswith("_") and name[1:].isdigit():
            converted[name] = value  # an unknown tagged field, in kafka-python's `_<tag>` spelling
        else:
            raise ValueError(f"unknown field {name!r}")
    return converted


def _convert_value(field: BaseField, version: int, value: Any) -> Any:
    if value is None:
        return None
    if field.is_struct_array():
        return [_as_struct(field, version, item) for item in value]
    if field.is_struct():
        return _as_struct(field, version, value)
    return value


def _as_struct(field: Any, version: int, value: Any) -> Any:
    if not isinstance(value, Mapping):
        return value  # already one of kafka-python's data objects
    return field.data_class(version=version, **_convert_fields(field.fields, version, value))
