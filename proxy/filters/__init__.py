"""Single-purpose filters over the request/response stream."""

from .api_versions_clamp import ApiVersionsClamp
from .base import ConnectionInfo, Filter, FilterChain, Frame
from .broker_rewrite import BrokerAddressRewrite

__all__ = ["ApiVersionsClamp", "BrokerAddressRewrite", "ConnectionInfo", "Filter", "FilterChain", "Frame"]
