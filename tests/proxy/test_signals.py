"""Signals (issue 14 item 5): nothing but SIGKILL ends the proxy without a drain.

SIGHUP, SIGUSR1, SIGUSR2, SIGQUIT and the other signals whose default action is to terminate are logged and
leave the proxy serving; SIGHUP runs the server's reload handlers (issue 11 registers the real one). SIGTERM
and SIGINT drain and exit 0.
"""

from __future__ import annotations

import asyncio
import signal

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from proxy_process import ProxyProcess
from rawclient import RawClient

from sluice.config.load import load_config
from sluice.proxy.listeners.ports import free_port_block
from sluice.proxy.process.server import SluiceServer
from sluice.proxy.process.signals import IGNORED_SIGNALS


def api_versions_ok(port: int) -> bool:
    with RawClient("127.0.0.1", port) as client:
        response = client.call(ApiVersionsRequest[0](), 0, ApiVersionsResponse)
    return response.error_code == 0 and len(response.api_keys) > 0


def present(names) -> list[str]:
    return [name for name in names if hasattr(signal, name)]


def test_signals_other_than_term_and_int_leave_the_proxy_serving(cluster) -> None:
    with ProxyProcess(cluster.bootstrap) as proxy, RawClient("127.0.0.1", proxy.port) as held:
        held_peer = "{}:{}".format(*held.sock.getsockname()[:2])
        for name in ["SIGHUP", "SIGQUIT", *present(IGNORED_SIGNALS)]:
            proxy.process.send_signal(getattr(signal, name))
            if name == "SIGHUP":
                proxy.wait_for_event("config_reloaded")  # the quotas of the same file, read again
            elif name == "SIGQUIT":
                event = proxy.wait_for_event("status", signal="SIGQUIT")
                assert event["connections"] >= 1 and event["brokers"] == 3
            else:
                proxy.wait_for_event("signal_ignored", signal=name)
            assert proxy.process.poll() is None, f"{name} killed the proxy"
        # Still serving, and the connection held all along was never dropped.
        assert api_versions_ok(proxy.port)
        response = held.call(ApiVersionsRequest[0](), 0, ApiVersionsResponse)
        assert response.error_code == 0
        closed = [e for e in proxy.events() if e.get("event") == "connection_closed"]
        assert [e for e in closed if e["peer"] == held_peer] == []


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_term_and_int_drain_and_exit_0(cluster, name: str) -> None:
    with ProxyProcess(cluster.bootstrap) as proxy:
        assert api_versions_ok(proxy.port)
        proxy.process.send_signal(getattr(signal, name))
        assert proxy.process.wait(15) == 0
        proxy.wait_for_event("signal_received", signal=name)
        proxy.wait_for_event("shutdown_complete")


async def test_sighup_runs_the_registered_reload_handlers(cluster) -> None:
    base = free_port_block(8)
    config = load_config(
        None,
        {
            "listen": f"127.0.0.1:{base}",
            "upstream.bootstrap": cluster.bootstrap,
            "broker_port_base": base + 1,
            "log.level": "warning",
        },
    )
    server = SluiceServer(config)
    await server.start()  # the signal handlers are in place from here on
    calls: list[str] = []
    server.add_reload_handler(lambda: calls.append("reload"))
    running = asyncio.create_task(server.run_until_stopped())
    try:
        signal.raise_signal(signal.SIGHUP)
        async with asyncio.timeout(10):
            while not calls:
                await asyncio.sleep(0.01)  # a poll: the handler's call is the event
        assert calls == ["reload"]
        assert not running.done()
    finally:
        server.request_stop()
        assert await asyncio.wait_for(running, 15) == 0
