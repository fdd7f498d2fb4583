"""What an operator sees: structured logs, Prometheus metrics and their endpoint, throttle episodes, the
quota metrics (sensors and throttles, read at scrape time)."""
