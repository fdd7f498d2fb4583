"""Telling a service manager that the proxy serves: systemd's notify protocol (`Type=notify` units).

When `NOTIFY_SOCKET` names a Unix datagram socket (a path, or `@name` in Linux's abstract namespace), the
proxy sends `READY=1` once its bootstrap listener is open and its services have started, so a unit that
orders other services after Sluice waits for a proxy that serves, not for one that merely started. Without
the variable nothing is sent. With `--workers N` each worker sends its own (the unit needs
`NotifyAccess=all`); the first means the bootstrap port is served.

The demo's and the tests' child handles wait for the same message: unlike a connection to the port, it
cannot come from another program that took the port between choosing it and the proxy's bind.
"""

from __future__ import annotations

import os
import socket

from ..observability.log import get_logger

NOTIFY_SOCKET_ENV = "NOTIFY_SOCKET"

_log = get_logger("sluice.readiness")


def notify_ready() -> bool:
    """Send READY=1 to `$NOTIFY_SOCKET`; whether a message was sent. A manager that cannot be reached is
    logged, never fatal: the proxy serves either way."""
    address = os.environ.get(NOTIFY_SOCKET_ENV)
    if not address:
        return False
    target = "\0" + address[1:] if address.startswith("@") else address
    message = f"READY=1\nMAINPID={os.getpid()}".encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(message, target)
    except OSError as exc:
        _log.warning("readiness_not_sent", notify_socket=address, error=str(exc))
        return False
    return True
