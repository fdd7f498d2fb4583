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


def free_port_block(size: int, host: str = "127.0.0.1") -> int:
    """The first of `size` consecutive free ports (a proxy needs one for bootstrap, one per broker)."""
    for _ in range(200):
        base = random.randrange(20000, 60000 - size)
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
