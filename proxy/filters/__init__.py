"""Single-purpose filters over the request/response stream, made per connection by their factories."""

from .api_versions_clamp import ApiVersionsClamp, ApiVersionsClampFactory
from .base import (
    Answer,
    Close,
    ConnectionInfo,
    Defer,
    EntryKind,
    Filter,
    FilterFactory,
    Forward,
    Frame,
    InFlight,
    RawExchange,
    Respond,
)
from .broker_rewrite import BrokerAddressRewrite, BrokerAddressRewriteFactory
from .chain import ConnectionFilters, FilterChain

__all__ = [
    "Answer",
    "ApiVersionsClamp",
    "ApiVersionsClampFactory",
    "BrokerAddressRewrite",
    "BrokerAddressRewriteFactory",
    "Close",
    "ConnectionFilters",
    "ConnectionInfo",
    "Defer",
    "EntryKind",
    "Filter",
    "FilterChain",
    "FilterFactory",
    "Forward",
    "Frame",
    "InFlight",
    "RawExchange",
    "Respond",
]
