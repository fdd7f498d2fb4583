"""Listening sockets: bound synchronously (so a broker listener accepts before any client is told of it),
with a real accept backlog, and the process's open-file limit raised to what the machine allows.

The backlog set here is the one the kernel keeps: the sockets are served by proxy/listeners/accepting.py,
which never calls listen() again (`loop.create_server(sock=...)` did, with its own `backlog` of 100 unless
told otherwise: then 975 of 3,000 connections arriving together overflowed, and 253 clients that believed
they were connected were never accepted). The kernel caps the backlog at net.core.somaxconn.
"""

from __future__ import annotations

import resource
import socket


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bind_listening_socket(host: str, port: int, backlog: int, reuse_port: bool = False) -> socket.socket:
    """A bound, listening, non-blocking socket; an OSError names the address it could not take."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:  # `sluice run --workers N`: every worker listens on the same ports
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise OSError(
            exc.errno, f"cannot listen on {format_address(host, port)}: {exc.strerror or exc}"
        ) from None
    return sock


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit (as the JVM does for Kafka); the soft limit before
    and after.

    Every client connection costs two descriptors (the client's and its upstream's); distributions often
    start processes with a soft limit of 1024 under a much higher hard one.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return soft, hard
    return soft, soft


class PendingServer:
    """Stands in for a broker listener between binding its socket and asyncio serving it."""

    def __init__(self, sock: socket.socket) -> None:
        self.sockets = (sock,)

    def close(self) -> None:
        self.sockets[0].close()
