"""Finding free local ports for the demo and the tests (the proxy itself takes ports from its config)."""

from __future__ import annotations

import contextlib
import random
import socket
import time


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _ephemeral_low(default: int = 32768) -> int:
    """Where the kernel starts handing out ports to outgoing connections (Linux: ip_local_port_range)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return default


def free_port_block(size: int, host: str = "127.0.0.1") -> int:
    """The first of `size` consecutive free ports (a proxy needs one for bootstrap, one per broker).

    Drawn below the kernel's ephemeral range, so an outgoing connection (a client, a broker's own port 0)
    cannot take one of them between this check and the proxy's bind; parallel test workers draw at random
    and the demo's SluiceChild (so the tests' ProxyProcess) retries with a new block should two collide.
    """
    high = min(_ephemeral_low(), 60000) - size
    for _ in range(200):
        base = random.randrange(10000, high)
        if all(port_is_free(base + i, host) for i in range(size)):
            return base
    raise RuntimeError(f"no block of {size} free ports found on {host}")


def wait_for_port(port: int, host: str = "127.0.0.1", timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.2):
            return
        time.sleep(0.02)
    raise TimeoutError(f"nothing listens on {host}:{port}")
