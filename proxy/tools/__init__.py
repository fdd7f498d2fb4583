"""Tools around the proxy, not the proxy itself: the demo, the perf-test load generator, the test broker
(librdkafka's mock cluster) and the handles that start those and the proxy as child processes."""
