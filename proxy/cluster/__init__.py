"""The cluster behind the proxy: the broker directory and node ids, discovery, and the limits learned from the
brokers."""
