"""The proxy's own Kafka client: its own connections, TLS and SASL credentials, kafka-python's codecs.

It carries what the proxy says to the cluster on its own behalf: broker discovery, the quota store (a
compacted topic every instance follows) and the usage stream. See `client.KafkaClient`.
"""

from sluice.protocol.record_batches import FetchedRecord, Record

from .backoff import RetryPolicy
from .client import FetchResult, KafkaClient
from .errors import (
    AuthenticationFailed,
    BrokerUnavailable,
    ClientClosed,
    GaveUp,
    KafkaClientError,
    KafkaErrorCode,
    OffsetOutOfRange,
    UnsupportedByBroker,
)
from .topics import TopicCreation

__all__ = [
    "AuthenticationFailed",
    "BrokerUnavailable",
    "ClientClosed",
    "FetchResult",
    "FetchedRecord",
    "GaveUp",
    "KafkaClient",
    "KafkaClientError",
    "KafkaErrorCode",
    "OffsetOutOfRange",
    "Record",
    "RetryPolicy",
    "TopicCreation",
    "UnsupportedByBroker",
]
