"""Where a test's proxies leave their configuration and log: kept under SLUICE_TEST_LOGS, in a folder
named after the test, or in a temporary directory removed with the proxy (the README's "When a test
fails")."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.proxy.tools import proxy_process


def test_with_sluice_test_logs_a_proxys_folder_is_kept_and_named_after_its_test(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(proxy_process.KEEP_LOGS_ENV, str(tmp_path / "logs"))
    folder, temporary = proxy_process._work_dir()
    assert temporary is None  # nothing removes it
    assert folder.parent == tmp_path / "logs"
    assert folder.name.startswith("tests_test_test_logs.py__test_with_sluice_test_logs_")


def test_without_it_the_folder_is_temporary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(proxy_process.KEEP_LOGS_ENV, raising=False)
    folder, temporary = proxy_process._work_dir()
    assert temporary is not None and folder.is_dir()
    temporary.cleanup()
    assert not folder.exists()
