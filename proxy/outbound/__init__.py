"""Where the proxy's connections go out to the brokers: one place for the source address and TLS toward
them, used by the data path (a client's upstream connection) and by the proxy's own Kafka client."""
