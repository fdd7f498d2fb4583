"""BrokerDirectory: a node without a listener is not advertised, reported once per try, retried later."""

from __future__ import annotations

from sluice.proxy.cluster.brokers import BrokerDirectory, ListenerUnavailable


class Listeners:
    def __init__(self) -> None:
        self.refuse: set[int] = set()
        self.opened: list[int] = []

    def open(self, node_id: int) -> int:
        if node_id in self.refuse:
            raise ListenerUnavailable(node_id, f"127.0.0.1:{9000 + node_id}", "in use", config_error=False)
        self.opened.append(node_id)
        return 9000 + node_id


def test_unavailable_node_is_not_advertised_and_retried_after_the_period() -> None:
    now = [100.0]
    listeners = Listeners()
    listeners.refuse.add(2)
    reported: list[int] = []
    recovered: list[int] = []
    directory = BrokerDirectory(
        "proxy",
        listeners.open,
        on_unavailable=lambda failure: reported.append(failure.node_id),
        on_recovered=recovered.append,
        retry_s=10.0,
        clock=lambda: now[0],
    )
    assert directory.advertise(1, "kafka-1", 9092) == ("proxy", 9001)
    assert directory.advertise(2, "kafka-2", 9092) is None
    assert directory.advertise(2, "kafka-2", 9092) is None  # within the retry period: not tried again
    assert reported == [2]
    assert set(directory.unavailable()) == {2}
    assert directory.upstream_address(2) == ("kafka-2", 9092)  # still known, for its own connections

    listeners.refuse.clear()
    now[0] += 10.0
    assert directory.advertise(2, "kafka-2", 9092) == ("proxy", 9002)
    assert recovered == [2]
    assert directory.unavailable() == {}
    assert listeners.opened == [1, 2]
    assert directory.advertise(1, "kafka-1b", 9093) == ("proxy", 9001)  # a broker that moved keeps its port
    assert directory.upstream_address(1) == ("kafka-1b", 9093)
    assert listeners.opened == [1, 2]
