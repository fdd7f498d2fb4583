"""quota/ is sans-IO: it imports only the standard library and itself, and never reads a clock."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

QUOTA = Path(__file__).resolve().parents[2] / "quota"
FORBIDDEN_MODULES = {"asyncio", "time", "datetime", "socket", "selectors", "threading"}


def _top(module: str) -> str:
    """The package an import names: `sluice.quota` for our own, the top-level name otherwise."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "sluice" else parts[0]


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(_top(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(_top(node.module))
    return names


def test_quota_imports_only_the_standard_library_and_itself() -> None:
    files = sorted(QUOTA.glob("*.py"))
    assert files
    for path in files:
        for name in _imports(path):
            assert name == "sluice.quota" or name in sys.stdlib_module_names, f"{path.name} imports {name}"
            assert name not in FORBIDDEN_MODULES, f"{path.name} imports {name}"
