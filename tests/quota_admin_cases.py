"""The quota admin rules as data: every describe-filter error and every alter error of spec §7.4/§7.5
with Kafka's code and message, shared by the rule tests (tests/config) and the wire tests at each
version (tests/proxy)."""

from __future__ import annotations

from sluice.proxy.control_plane.quota_describe import MATCH_DEFAULT, MATCH_EXACT, MATCH_SPECIFIED

INVALID_REQUEST, UNSUPPORTED_VERSION = 42, 35


def exact(kind: str, name: str) -> tuple[str, int, str | None]:
    return (kind, MATCH_EXACT, name)


def default(kind: str) -> tuple[str, int, str | None]:
    return (kind, MATCH_DEFAULT, None)


def of_type(kind: str) -> tuple[str, int, str | None]:
    return (kind, MATCH_SPECIFIED, None)


def set_op(key: str, value: float) -> tuple[str, float, bool]:
    return (key, value, False)


def remove_op(key: str) -> tuple[str, float, bool]:
    return (key, 0.0, True)


# (components, error code, message prefix): each fails the whole describe, with no entries.
DESCRIBE_ERRORS = [
    ([("", MATCH_EXACT, "x")], INVALID_REQUEST, "Invalid empty entity type."),
    (
        [exact("user", "a"), of_type("user")],
        INVALID_REQUEST,
        "Entity type user cannot appear more than once in the filter.",
    ),
    ([exact("group", "g")], UNSUPPORTED_VERSION, "Unsupported entity type group"),
    (
        [("user", MATCH_EXACT, None)],
        INVALID_REQUEST,
        "Request specified MATCH_TYPE_EXACT, but set match string to null.",
    ),
    (
        [("user", MATCH_DEFAULT, "a")],
        INVALID_REQUEST,
        "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.",
    ),
    (
        [("user", MATCH_SPECIFIED, "a")],
        INVALID_REQUEST,
        "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.",
    ),
    ([("user", 3, None)], INVALID_REQUEST, "Unknown match type 3"),
    (
        [of_type("ip"), of_type("user")],
        INVALID_REQUEST,
        "Invalid entity filter component combination. IP filter component should not be used with "
        "user or clientId filter component.",
    ),
    ([of_type("ip"), exact("client-id", "c")], INVALID_REQUEST, "Invalid entity filter component"),
]

# (entity parts, ops, message part): each fails its own entry with INVALID_REQUEST.
ALTER_ERRORS = [
    ([], [set_op("producer_byte_rate", 10000.5)], "Invalid empty client quota entity"),
    ([("user", "")], [set_op("request_percentage", 12.34)], "Empty user not supported"),
    ([("client-id", "")], [set_op("request_percentage", 12.34)], "Empty client-id not supported"),
    ([("", "name")], [set_op("request_percentage", 12.34)], "Unhandled client quota entity type: "),
    ([("group", "g")], [set_op("request_percentage", 1)], "Unhandled client quota entity type: group"),
    (
        [("user", "a"), ("user", "b")],
        [set_op("request_percentage", 1)],
        "Invalid client quota entity, duplicate entity entry user",
    ),
    (
        [("user", "user"), ("ip", "1.2.3.4")],
        [set_op("request_percentage", 12.34)],
        "Invalid quota entity combination",
    ),
    (
        [("client-id", "client"), ("ip", "1.2.3.4")],
        [set_op("request_percentage", 12.34)],
        "Invalid quota entity combination",
    ),
    (
        [("ip", "not a valid host because it has spaces")],
        [set_op("connection_creation_rate", 50)],
        "not a valid IP",
    ),
    ([("ip", "RFC2606.invalid")], [set_op("connection_creation_rate", 50)], "not a valid IP"),
    ([("user", "user")], [set_op("bad", 1.0)], "Invalid configuration key bad"),
    ([("user", "u")], [set_op("connection_creation_rate", 5)], "Invalid configuration key"),
    ([("ip", "1.2.3.4")], [set_op("producer_byte_rate", 5)], "Invalid configuration key"),
    (
        [("user", "user")],
        [set_op("producer_byte_rate", 10000.5)],
        "producer_byte_rate cannot be a fractional value.",
    ),
    (
        [("ip", None)],
        [set_op("connection_creation_rate", 1.5)],
        "connection_creation_rate cannot be a fractional value.",
    ),
    (
        [("user", "u")],
        [set_op("consumer_byte_rate", 0)],
        "Quota consumer_byte_rate must be greater than 0",
    ),
    (
        [("user", "u")],
        [set_op("request_percentage", -1)],
        "Quota request_percentage must be greater than 0",
    ),
    (
        [("user", "u")],
        [set_op("producer_byte_rate", 1e19)],
        "Proposed value for producer_byte_rate is too large for a LONG.",
    ),
    (
        [("ip", "::1")],
        [set_op("connection_creation_rate", 2**31)],
        "Proposed value for connection_creation_rate is too large for an INT.",
    ),
    ([("user", "u")], [set_op("request_percentage", float("nan"))], "must be a finite number"),
    ([("user", "u")], [set_op("request_percentage", float("inf"))], "must be a finite number"),
    (
        [("user", "u")],
        [set_op("request_percentage", 1), set_op("request_percentage", 2)],
        "Duplicate quota key request_percentage",
    ),
]
