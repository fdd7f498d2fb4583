"""The wheel `pip install .` builds holds every product module, under `sluice` and nothing else."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]


def _package_folders() -> set[str]:
    """Every folder with an __init__.py under a mapped package, as its `sluice.` import name."""
    names = set()
    for name, folder in SETUPTOOLS["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder).parts
            names.add(".".join([name, *relative]))
    return names


def test_every_product_package_folder_is_listed_for_the_wheel() -> None:
    assert set(SETUPTOOLS["packages"]) == _package_folders()


def test_the_packages_map_the_top_level_folders_under_one_import_name() -> None:
    assert {"sluice.config", "sluice.protocol", "sluice.proxy", "sluice.quota"} <= set(
        SETUPTOOLS["package-dir"]
    )
    assert all(name.startswith("sluice.") for name in SETUPTOOLS["packages"])


def test_the_wheel_holds_every_module_under_sluice_only(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("sluice-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"sluice"}
    for name, folder in SETUPTOOLS["package-dir"].items():
        for source in (ROOT / folder).rglob("*.py"):
            inside = "/".join([*name.split("."), *source.relative_to(ROOT / folder).parts])
            assert inside in names, f"{source.relative_to(ROOT)} is missing from the wheel"
