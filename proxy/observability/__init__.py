"""What an operator sees: structured logs, Prometheus metrics and their endpoint, throttle episodes."""
