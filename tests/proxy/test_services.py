"""The services contract (start in order, stop in reverse, a failed start stops start-up), with fakes; the
sweep on an injected clock; discovery with a fake client; the server's own services around its listener."""

from __future__ import annotations

import asyncio
import socket

import pytest
import structlog

from sluice.config.load import load_config
from sluice.protocol.client_requests import BrokerInfo, MetadataAnswer
from sluice.proxy.cluster.discovery import BrokerDiscovery
from sluice.proxy.control_plane.sensor_sweep import SensorSweep
from sluice.proxy.kafka_client import BrokerUnavailable, ClientClosed
from sluice.proxy.listeners.ports import free_port_block
from sluice.proxy.process.server import BOOTSTRAP, SluiceServer
from sluice.proxy.services import Service, Services, ServiceStartError


class FakeService:
    def __init__(self, name: str, journal: list[str], *, fail_start: bool = False, stop: str = "ok") -> None:
        self.name = name
        self.journal = journal
        self.fail_start = fail_start
        self.stop_mode = stop

    async def start(self) -> None:
        self.journal.append(f"start {self.name}")
        if self.fail_start:
            raise OSError(98, "Address already in use")

    async def stop(self) -> None:
        self.journal.append(f"stop {self.name}")
        if self.stop_mode == "raise":
            raise RuntimeError("stop failed")
        if self.stop_mode == "hang":
            await asyncio.Event().wait()


def test_fakes_and_the_real_services_meet_the_protocol() -> None:
    assert isinstance(FakeService("a", []), Service)
    assert isinstance(SensorSweep(object()), Service)  # type: ignore[arg-type]


async def test_started_in_order_and_stopped_in_reverse() -> None:
    journal: list[str] = []
    services = Services([FakeService(n, journal) for n in ("metrics", "client", "discovery")])
    await services.start()
    assert services.running == ["metrics", "client", "discovery"]
    await services.stop()
    assert journal == [
        "start metrics", "start client", "start discovery",
        "stop discovery", "stop client", "stop metrics",
    ]  # fmt: skip
    await services.stop()  # a second stop stops nothing twice
    assert len(journal) == 6


async def test_a_failing_start_stops_the_started_ones_and_names_the_service() -> None:
    journal: list[str] = []
    services = Services(
        [FakeService("a", journal), FakeService("b", journal, fail_start=True), FakeService("c", journal)]
    )
    with pytest.raises(ServiceStartError) as caught:
        await services.start()
    assert caught.value.name == "b" and isinstance(caught.value.cause, OSError)
    assert "service b failed to start" in str(caught.value) and "Address already in use" in str(caught.value)
    # c never started; b, which may have half started (a bound socket, a task), is stopped before a
    assert journal == ["start a", "start b", "stop b", "stop a"]
    assert services.running == []


class SlowStart(FakeService):
    def __init__(self, name: str, journal: list[str], release: asyncio.Event) -> None:
        super().__init__(name, journal)
        self.release = release

    async def start(self) -> None:
        await super().start()
        await self.release.wait()


async def test_a_service_that_finishes_starting_after_stop_began_is_stopped() -> None:
    journal: list[str] = []
    release = asyncio.Event()
    services = Services(
        [FakeService("a", journal), SlowStart("b", journal, release), FakeService("c", journal)]
    )
    starting = asyncio.create_task(services.start())
    while journal != ["start a", "start b"]:
        await asyncio.sleep(0)  # a turn of the loop until b is starting
    await services.stop()  # b is still starting: only a can be stopped now
    assert journal == ["start a", "start b", "stop a"]
    release.set()
    await starting
    assert journal == ["start a", "start b", "stop a", "stop b"]  # c never starts
    assert services.running == []


async def test_one_stop_failing_or_hanging_does_not_keep_the_others_running() -> None:
    journal: list[str] = []
    services = Services(
        [
            FakeService("a", journal),
            FakeService("b", journal, stop="hang"),
            FakeService("c", journal, stop="raise"),
        ],
        stop_timeout_s=0.05,
    )
    await services.start()
    await services.stop()
    assert journal[3:] == ["stop c", "stop b", "stop a"]


def test_names_must_be_unique() -> None:
    with pytest.raises(ValueError, match="unique: a"):
        Services([FakeService("a", []), FakeService("a", [])])


class FakeTimers:
    def __init__(self) -> None:
        self.scheduled: list[tuple[float, object]] = []
        self.cancelled = 0

    def call_later(self, delay: float, callback):
        timers = self

        class Handle:
            def cancel(self) -> None:
                timers.cancelled += 1

        self.scheduled.append((delay, callback))
        return Handle()


class FakeManagers:
    def __init__(self) -> None:
        self.sweeps: list[int] = []

    def expire_idle_sensors(self, now_ms: int) -> int:
        self.sweeps.append(now_ms)
        return 0


async def test_the_sensor_sweep_runs_at_start_then_every_interval_until_stopped() -> None:
    clock = [1_000]
    timers, managers = FakeTimers(), FakeManagers()
    sweep = SensorSweep(managers, lambda: clock[0], interval_s=30.0, call_later=timers.call_later)
    await sweep.start()
    assert managers.sweeps == [1_000] and [d for d, _ in timers.scheduled] == [30.0]
    for now in (31_000, 61_000):
        clock[0] = now
        timers.scheduled[-1][1]()  # the timer fires
    assert managers.sweeps == [1_000, 31_000, 61_000] and len(timers.scheduled) == 3
    await sweep.stop()
    assert timers.cancelled == 1
    timers.scheduled[-1][1]()  # a timer already due when stop ran does nothing more
    assert managers.sweeps == [1_000, 31_000, 61_000] and len(timers.scheduled) == 3


class FakeDirectory:
    def __init__(self) -> None:
        self.nodes: dict[int, tuple[str, int]] = {}

    def known_nodes(self) -> dict[int, tuple[str, int]]:
        return dict(self.nodes)

    def advertise(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        self.nodes[node_id] = (host, port)
        return host, port


class FlakyClient:
    """Unreachable for the first `failures` calls, then answers with two brokers."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    async def metadata(self, topics=(), *, timeout_s=None) -> MetadataAnswer:
        self.calls += 1
        if self.calls <= self.failures:
            raise BrokerUnavailable("bootstrap 127.0.0.1:1: cannot connect: Connection refused")
        brokers = {n: BrokerInfo(n, f"10.0.0.{n}", 9092, None) for n in (1, 2)}
        return MetadataAnswer(brokers, 1, {})


async def test_discovery_retries_until_the_cluster_answers_then_advertises_every_broker() -> None:
    directory, client = FakeDirectory(), FlakyClient(failures=2)
    discovery = BrokerDiscovery(client, directory, retry_s=0)  # type: ignore[arg-type]
    await discovery.start()
    await asyncio.wait_for(discovery.done.wait(), 5)
    assert client.calls == 3 and directory.nodes == {1: ("10.0.0.1", 9092), 2: ("10.0.0.2", 9092)}
    await discovery.stop()


async def test_discovery_stops_trying_once_a_client_taught_the_brokers() -> None:
    directory, client = FakeDirectory(), FlakyClient(failures=10**9)
    discovery = BrokerDiscovery(client, directory, retry_s=0.01)  # type: ignore[arg-type]
    await discovery.start()
    while client.calls < 3:  # it is trying again and again
        await asyncio.sleep(0.01)  # a poll: the retries are the event
    directory.advertise(7, "10.0.0.7", 9092)  # a client's Metadata answer went through the proxy
    await asyncio.wait_for(discovery.done.wait(), 5)
    calls = client.calls
    # It stopped trying: its task ended, so no later call can come (a pause would prove nothing).
    assert discovery._task is not None
    await asyncio.wait_for(discovery._task, 5)
    assert client.calls == calls
    await discovery.stop()


async def test_a_service_that_cannot_start_closes_the_proxy_listener_again() -> None:
    base = free_port_block(4)
    taken = socket.socket()
    taken.bind(("127.0.0.1", base + 1))
    taken.listen()
    try:
        config = load_config(
            None,
            {
                "listen": f"127.0.0.1:{base}",
                "metrics.listen": f"127.0.0.1:{base + 1}",  # already taken
                "broker_port_base": base + 2,
                "upstream.bootstrap": "127.0.0.1:1",
                "log.level": "error",
            },
        )
        server = SluiceServer(config)
        assert server.services.names == [
            "metrics_endpoint",
            "kafka_client",
            "broker_discovery",
            "broker_limits",
            "quota_store",
            "sensor_sweep",
            "memory_return",
            "throttle_episodes",
            "broker_shield",
        ]
        with structlog.testing.capture_logs() as logs, pytest.raises(ServiceStartError) as caught:
            await server.start()
        assert caught.value.name == "metrics_endpoint"
        # Said as a broker listener says it (asyncio's own words were "... address already in use").
        assert f"cannot listen on 127.0.0.1:{base + 1}: Address already in use" in str(caught.value)
        events = [e["event"] for e in logs]
        assert events.index("listener_opened") < events.index("service_start_failed")
        await asyncio.sleep(0)  # one turn: the listener's close completes in a callback
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", base), timeout=1).close()
    finally:
        taken.close()


async def test_the_server_stops_its_services_on_shutdown() -> None:
    base = free_port_block(4)
    config = load_config(
        None,
        {
            "listen": f"127.0.0.1:{base}",
            "broker_port_base": base + 1,
            "upstream.bootstrap": "127.0.0.1:1",
            "log.level": "error",
        },
    )
    server = SluiceServer(config)
    await server.start()
    assert server.services.running == [
        "kafka_client",
        "broker_discovery",
        "broker_limits",
        "quota_store",
        "sensor_sweep",
        "memory_return",
        "throttle_episodes",
        "broker_shield",
    ]
    discovery = server.services.get("broker_discovery")
    assert isinstance(discovery, BrokerDiscovery)
    task = discovery._task
    assert task is not None and not task.done()  # retrying: the bootstrap is unreachable
    await server.shutdown()
    assert server.services.running == []
    assert task.done()
    with pytest.raises(ClientClosed):
        await server.kafka_client.metadata()


async def test_a_failed_start_closes_the_connections_it_accepted_meanwhile() -> None:
    # A broker that accepts and stays silent, so the client's connection stays up until the proxy closes it.
    silent = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    base = free_port_block(4)
    config = load_config(
        None,
        {
            "listen": f"127.0.0.1:{base}",
            "broker_port_base": base + 1,
            "upstream.bootstrap": f"127.0.0.1:{silent.sockets[0].getsockname()[1]}",
            "log.level": "error",
        },
    )
    server = SluiceServer(config)
    accepted = asyncio.Event()

    class FailsOnceAClientIsIn(FakeService):
        async def start(self) -> None:
            await accepted.wait()
            raise OSError("cannot start")

    server.services = Services([FailsOnceAClientIsIn("late", [])])
    starting = asyncio.create_task(server.start())
    while BOOTSTRAP not in server.listen_ports:
        await asyncio.sleep(0.01)  # a poll: the listener is the event
    reader, writer = await asyncio.open_connection("127.0.0.1", base)
    while not server.registry:
        await asyncio.sleep(0.01)  # a poll: the accepted connection is the event
    accepted.set()
    with pytest.raises(ServiceStartError):
        await starting
    assert await asyncio.wait_for(reader.read(), 5) == b""  # the proxy closed it
    assert len(server.registry) == 0
    writer.close()
    silent.close()
