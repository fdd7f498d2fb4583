"""Signals: nothing but SIGKILL ends the proxy without a drain.

SIGHUP, SIGUSR1, SIGUSR2, SIGQUIT and the other signals whose default action is to terminate are logged and
leave the proxy serving; SIGHUP re-reads the configuration file. SIGTERM and SIGINT drain and exit 0.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest
import yaml
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


async def test_sighup_reloads_the_configuration_file(cluster, tmp_path: Path) -> None:
    base = free_port_block(8)
    path = tmp_path / "sluice.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "listen": f"127.0.0.1:{base}",
                "upstream": {"bootstrap": cluster.bootstrap.split(",")},
                "broker_port_base": base + 1,
                "log": {"level": "warning"},
            }
        )
    )
    server = SluiceServer(load_config(str(path), {}))
    server.enable_reload(str(path), {})
    await server.start()  # the signal handlers are in place from here on
    running = asyncio.create_task(server.run_until_stopped())
    try:
        signal.raise_signal(signal.SIGHUP)
        async with asyncio.timeout(10):
            while server.reloader.reloads == 0:
                await asyncio.sleep(0.01)  # a poll: the reload's count is the event
        assert (server.reloader.reloads, server.reloader.failures) == (1, 0)
        assert not running.done()
    finally:
        server.request_stop()
        assert await asyncio.wait_for(running, 15) == 0
