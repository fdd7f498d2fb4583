"""The cluster behind the proxy: the broker directory and node ids, discovery, the limits learned from the
brokers, and the topic cache (partition counts, topic ids' names, the brokers' num.partitions)."""
