"""The house rules, checked on the source: arrows point down, the sans-IO packages stay free of asyncio
and the clock, no import cycle, and no module grows past ~350 lines without saying why.

    proxy ──▶ config ──▶ quota        pipeline ──▶ config ──▶ quota
      └─────▶ protocol

pipeline may read config: its what-if takes candidate quotas in Sluice's own `quota:` format, and
config's parser is the one that format has (a second one would drift). It never reaches proxy.

Inside proxy/, each folder is a room (docs/architecture.md draws them) with arrows of its own, ROOMS.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = [name for name in ("config", "protocol", "proxy", "quota", "pipeline") if (ROOT / name).is_dir()]

# Which of our packages each package may import (itself included).
ARROWS = {
    "protocol": {"protocol"},
    "quota": {"quota"},
    "config": {"config", "quota"},
    "proxy": {"proxy", "config", "quota", "protocol"},
    "pipeline": {"pipeline", "config", "quota"},
}
# proxy/'s rooms: its folders, and "proxy" for the modules at its top (the command line, the service
# contract). Which rooms each may import (itself included); config, quota and protocol as ARROWS says.
ROOMS = {
    "proxy": {"proxy", "observability"},
    "observability": {"observability"},
    "listeners": {"listeners", "observability"},
    "outbound": {"outbound", "listeners"},
    "kafka_client": {"kafka_client", "outbound", "listeners", "observability"},
    "filter_api": {"filter_api"},
    "cluster": {"cluster", "filter_api", "kafka_client", "listeners", "observability"},
    "control_plane": {"control_plane", "kafka_client", "observability"},
    "data_path": {"data_path", "filter_api", "outbound", "listeners", "observability"},
    "filters": {"filters", "filter_api", "data_path", "cluster", "control_plane", "observability"},
    "usage_plane": {
        "usage_plane",
        "proxy",
        "cluster",
        "filter_api",
        "filters",
        "kafka_client",
        "observability",
    },
    "process": {
        "process",
        "proxy",
        "cluster",
        "control_plane",
        "data_path",
        "filter_api",
        "filters",
        "kafka_client",
        "listeners",
        "observability",
        "usage_plane",
    },
    "commands": {"commands", "proxy", "process", "listeners", "observability"},
    "tools": {"tools", "proxy", "commands", "control_plane", "kafka_client", "listeners", "observability"},
}
# Third-party imports allowed where the design is strict about them; proxy and pipeline may use their own.
# All are computation without I/O: kafka-python's codecs and error table, scramp's SCRAM, cryptography's
# x509 parser; config reads Kafka's error codes from kafka.errors rather than declaring them again.
THIRD_PARTY = {"protocol": {"kafka", "scramp", "cryptography"}, "quota": set(), "config": {"yaml", "kafka"}}
# Sans-IO: no event loop, no clock, no sockets or threads.
SANS_IO = {"protocol", "quota"}
IO_MODULES = {"asyncio", "time", "datetime", "socket", "selectors", "threading", "uvloop"}
MAX_LINES = 350
LONG_MODULE_MARK = "Why this module is long:"


@dataclass(frozen=True)
class Import:
    module: str  # absolute, e.g. "sluice.quota.sensor" or "asyncio"
    top_level: bool  # at module level (TYPE_CHECKING blocks included), not inside a function


def _modules() -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield package, path


def _dotted(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["sluice", *parts])


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path) -> list[Import]:
    module = _dotted(path)
    package_parts = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found: list[Import] = []

    def visit(node: ast.AST, top_level: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend(Import(alias.name, top_level) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package_parts[: len(package_parts) - child.level + 1]
                    target = ".".join([*base, child.module] if child.module else base)
                else:
                    target = child.module or ""
                found.append(Import(target, top_level))
                # `from . import x` / `from .pkg import mod` may name submodules: count them as imports too.
                found.extend(Import(f"{target}.{alias.name}", top_level) for alias in child.names)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                visit(child, False)
            elif isinstance(child, ast.If) and _is_type_checking(child):
                visit(child, True)  # a cycle hidden behind TYPE_CHECKING is still a cycle in the design
            else:
                visit(child, top_level)

    visit(ast.parse(path.read_text(encoding="utf-8")), True)
    return found


def _ours(name: str) -> str | None:
    """The package of ours an import names (`quota` for `sluice.quota.sensor`), or None."""
    parts = name.split(".")
    return parts[1] if parts[0] == "sluice" and len(parts) > 1 else None


def _room(name: str) -> str:
    """The room of proxy/ a module of it is in (`data_path` for `sluice.proxy.data_path.connection`)."""
    parts = name.split(".")
    return parts[2] if len(parts) > 2 and (ROOT / "proxy" / parts[2]).is_dir() else "proxy"


MODULES = list(_modules())


def test_the_house_has_its_packages() -> None:
    assert {"config", "protocol", "proxy", "quota"} <= set(PACKAGES)


@pytest.mark.parametrize(("package", "path"), MODULES, ids=[str(p.relative_to(ROOT)) for _, p in MODULES])
def test_imports_follow_the_arrows(package: str, path: Path) -> None:
    for imported in _imports(path):
        ours = _ours(imported.module)
        top = imported.module.split(".")[0]
        if ours is not None:
            assert ours in ARROWS[package], f"{package}/ may not import sluice.{ours} ({imported.module})"
            if ours == "proxy" == package:
                room, target = _room(_dotted(path)), _room(imported.module)
                assert target in ROOMS[room], f"proxy/{room}/ may not import {imported.module}"
        elif package in THIRD_PARTY and top not in sys.stdlib_module_names:
            assert top in THIRD_PARTY[package], f"{package}/ may not import {top}"
        if package in SANS_IO:
            assert top not in IO_MODULES, f"{package}/ is sans-IO but imports {top}"


def test_every_room_of_proxy_has_its_arrows() -> None:
    rooms = {path.name for path in (ROOT / "proxy").iterdir() if (path / "__init__.py").is_file()}
    assert rooms | {"proxy"} == set(ROOMS)


def test_no_import_cycle() -> None:
    known = {_dotted(path) for _, path in MODULES}
    graph: dict[str, set[str]] = {}
    for _, path in MODULES:
        edges = set()
        for imported in _imports(path):
            # Every import counts: one inside a function (or behind TYPE_CHECKING) only hides a cycle from
            # the interpreter, not from the design.
            if imported.module in known and imported.module != _dotted(path):
                edges.add(imported.module)
        graph[_dotted(path)] = edges
    # A package's __init__ re-exporting its modules is not a cycle with them: only module-to-module edges.
    packages = {_dotted(path) for _, path in MODULES if path.name == "__init__.py"}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}

    def walk(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt in packages or node in packages:
                continue
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                walk(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node, [])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize(("package", "path"), MODULES, ids=[str(p.relative_to(ROOT)) for _, p in MODULES])
def test_a_long_module_says_why(package: str, path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    lines = source.count("\n")
    if lines <= MAX_LINES:
        return
    docstring = ast.get_docstring(ast.parse(source)) or ""
    assert LONG_MODULE_MARK in docstring, (
        f"{path.relative_to(ROOT)} has {lines} lines: split it, or say in its docstring "
        f"'{LONG_MODULE_MARK} ...'"
    )
