"""Single-purpose filters over the request/response stream, made per connection by their factories (the
contract they implement is proxy/filter_api/; the chain that runs them, proxy/data_path/filter_chain.py)."""

from .api_versions_clamp import ApiVersionsClamp, ApiVersionsClampFactory
from .broker_rewrite import BrokerAddressRewrite, BrokerAddressRewriteFactory

__all__ = [
    "ApiVersionsClamp",
    "ApiVersionsClampFactory",
    "BrokerAddressRewrite",
    "BrokerAddressRewriteFactory",
]
