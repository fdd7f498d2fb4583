"""systemd's notify protocol: READY=1 on `$NOTIFY_SOCKET` (a path, or `@name` in the abstract namespace);
without the variable nothing is sent, and a manager that cannot be reached is logged, not fatal. That the
message comes only once the proxy serves is what every test's ProxyProcess waits on
(tests/test_suite_machinery.py checks a taken port is not mistaken for it)."""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

import pytest

from sluice.proxy.process.readiness import NOTIFY_SOCKET_ENV, notify_ready


def _receive(sock: socket.socket) -> dict[str, str]:
    sock.settimeout(5)
    fields = sock.recv(4096).decode().split("\n")
    return dict(field.split("=", 1) for field in fields)


def test_ready_goes_to_a_socket_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as manager:
        manager.bind(path)
        monkeypatch.setenv(NOTIFY_SOCKET_ENV, path)
        assert notify_ready()
        assert _receive(manager) == {"READY": "1", "MAINPID": str(os.getpid())}


def test_ready_goes_to_an_abstract_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"sluice-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as manager:
        manager.bind("\0" + name)
        monkeypatch.setenv(NOTIFY_SOCKET_ENV, "@" + name)
        assert notify_ready()
        assert _receive(manager)["READY"] == "1"


def test_without_the_variable_nothing_is_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(NOTIFY_SOCKET_ENV, raising=False)
    assert not notify_ready()


def test_an_unreachable_manager_is_logged_not_fatal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(NOTIFY_SOCKET_ENV, str(tmp_path / "nobody-listens"))
    assert not notify_ready()
    assert "readiness_not_sent" in capsys.readouterr().out
