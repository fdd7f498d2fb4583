"""Single-purpose filters over the request/response stream."""

from .api_versions_clamp import ApiVersionsClamp
from .base import Answer, ConnectionInfo, Defer, Filter, FilterChain, Frame, RawExchange
from .broker_rewrite import BrokerAddressRewrite

__all__ = [
    "Answer",
    "ApiVersionsClamp",
    "BrokerAddressRewrite",
    "ConnectionInfo",
    "Defer",
    "Filter",
    "FilterChain",
    "Frame",
    "RawExchange",
]
