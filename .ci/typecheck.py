"""Type-check the product with mypy, every module of the package `sluice`, with pyproject's [tool.mypy].

The folders sit at the top of the repository but install as `sluice.<folder>` (pyproject's package-dir), a
mapping mypy cannot make by itself. So this links build/typecheck/sluice/<folder> to each folder of that
very table (a new module or sub-folder needs no edit here; the links follow the files), checks the
package there, and prints mypy's report with the paths of the repository rather than of the links.
Run it as `make typecheck` (or `make lint`); extra arguments go to mypy.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREE = ROOT / "build" / "typecheck"
PACKAGE = "sluice"


def link_tree() -> None:
    package_dirs: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"
    ]
    for name, folder in package_dirs.items():
        link = TREE.joinpath(*name.split("."))
        link.parent.mkdir(parents=True, exist_ok=True)
        target = os.path.relpath(ROOT / folder, link.parent)
        if link.is_symlink() and os.readlink(link) == target:
            continue
        if link.is_symlink():
            link.unlink()
        link.symlink_to(target, target_is_directory=True)


def main() -> int:
    link_tree()
    command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "-p", PACKAGE]
    done = subprocess.run([*command, *sys.argv[1:]], cwd=ROOT, capture_output=True, text=True)
    prefix = f"{TREE.relative_to(ROOT)}/{PACKAGE}/"
    sys.stdout.write(done.stdout.replace(prefix, ""))
    sys.stderr.write(done.stderr.replace(prefix, ""))
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
