"""What the proxy's own Kafka client raises. Every message names the operation and the broker or partition,
never a credential, a SASL token or record content."""

from __future__ import annotations

from kafka.errors import (
    OffsetOutOfRangeError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    for_code,
)

OFFSET_OUT_OF_RANGE = OffsetOutOfRangeError.errno
UNKNOWN_TOPIC_OR_PARTITION = UnknownTopicOrPartitionError.errno
TOPIC_ALREADY_EXISTS = TopicAlreadyExistsError.errno


def error_name(code: int) -> str:
    """Kafka's name for an error code, e.g. NOT_LEADER_OR_FOLLOWER (kafka-python's table)."""
    cls = for_code(code)
    message = getattr(cls, "message", None)
    return message if isinstance(message, str) and message else f"ERROR_{code}"


class KafkaClientError(Exception):
    """Base class. `retriable`: the same call may succeed later (a leader moved, a broker came back)."""

    retriable = False


class BrokerUnavailable(KafkaClientError):
    """A broker could not be reached, or the connection was lost or timed out mid-request."""

    retriable = True


class ClientClosed(KafkaClientError):
    """The client was stopped; nothing more will be sent."""


class AuthenticationFailed(KafkaClientError):
    """The brokers refused the proxy's own credentials (or speak no mechanism it was given)."""


class UnsupportedByBroker(KafkaClientError):
    """The broker does not speak an API (or any version of it) that the call needs."""


class KafkaErrorCode(KafkaClientError):
    """A broker answered with an error code. `stale_metadata`: the client's idea of the leader is wrong."""

    def __init__(self, code: int, where: str, message: str | None = None) -> None:
        self.code = code
        self.name = error_name(code)
        cls = for_code(code)
        self.retriable = bool(getattr(cls, "retriable", False))
        self.stale_metadata = bool(getattr(cls, "invalid_metadata", False))
        detail = f": {message}" if message else ""
        super().__init__(f"{where}: {self.name} ({code}){detail}")


class OffsetOutOfRange(KafkaErrorCode):
    """A fetch asked for an offset the partition no longer (or not yet) holds; start again from
    `earliest_offsets` or `latest_offsets`."""

    def __init__(self, where: str) -> None:
        super().__init__(OFFSET_OUT_OF_RANGE, where)


class GaveUp(KafkaClientError):
    """A retriable failure outlasted the call's time budget; `last` is the last failure."""

    def __init__(self, what: str, budget_s: float, last: BaseException) -> None:
        self.last = last
        super().__init__(f"{what}: gave up after {budget_s:g} s: {last}")


def from_code(code: int, where: str, message: str | None = None) -> KafkaErrorCode:
    return OffsetOutOfRange(where) if code == OFFSET_OUT_OF_RANGE else KafkaErrorCode(code, where, message)
