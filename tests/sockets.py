"""Which TCP peers this test process is connected to, read from /proc (Linux).

librdkafka's threads run inside the test process, so this sees every connection any client in the test
made: the proof that no client ever talks to a mock broker directly.
"""

from __future__ import annotations

import os
from pathlib import Path


def _socket_inodes() -> set[str]:
    inodes = set()
    fd_dir = Path("/proc/self/fd")
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(fd_dir / fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def connected_remote_ports() -> set[int]:
    """Remote ports of this process's TCP connections (IPv4 and IPv6) that are not listening sockets."""
    mine = _socket_inodes()
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            remote, state, inode = fields[2], fields[3], fields[9]
            if inode in mine and state != "0A":  # 0A = LISTEN
                ports.add(int(remote.rsplit(":", 1)[1], 16))
    return ports
