"""The wheel `pip install .` builds holds every product module, under `sluice` and nothing else."""

from __future__ import annotations

import re
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


# The product's top-level folders; pipeline/ (issue 13) joins them when it lands. Any other top-level folder
# with an __init__.py counts as product too, so a new one cannot be forgotten.
PRODUCT_FOLDERS = {"config", "protocol", "proxy", "quota", "pipeline"}


def _top_level_product_folders() -> set[str]:
    packages = {init.parent.name for init in ROOT.glob("*/__init__.py")}
    return packages | {name for name in PRODUCT_FOLDERS if (ROOT / name).is_dir()}


def test_every_top_level_product_folder_is_mapped_in_package_dir() -> None:
    mapped = set(SETUPTOOLS["package-dir"].values())
    for folder in sorted(_top_level_product_folders()):
        assert folder in mapped, (
            f"{folder}/ is missing from [tool.setuptools.package-dir] in pyproject.toml "
            f'(add "sluice.{folder}" = "{folder}", and its packages to [tool.setuptools] packages)'
        )
        assert SETUPTOOLS["package-dir"].get(f"sluice.{folder}") == folder, (
            f"{folder}/ is not sluice.{folder}"
        )


def test_the_dockerfile_copies_every_mapped_folder() -> None:
    # The image builds its wheel from the folders the Dockerfile copies by name: a missed one is not in it.
    dockerfile = (ROOT / "Dockerfile").read_text()
    copied = set(re.findall(r"^COPY\s+(?!--from)(\S+)\s+\./\1/?\s*$", dockerfile, re.MULTILINE))
    for folder in sorted(set(SETUPTOOLS["package-dir"].values()) | _top_level_product_folders()):
        assert folder in copied, f"the Dockerfile does not copy {folder}/ (add: COPY {folder} ./{folder})"


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
    (wheel,) = tmp_path.glob("sluice_kafka-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"sluice"}
    for name, folder in SETUPTOOLS["package-dir"].items():
        for source in (ROOT / folder).rglob("*.py"):
            inside = "/".join([*name.split("."), *source.relative_to(ROOT / folder).parts])
            assert inside in names, f"{source.relative_to(ROOT)} is missing from the wheel"
    # The compiled readers, rate, filter runs, pipeline runs, connection queries and passes, usage recording,
    # client quotas and address rewrite, built (this machine has a C compiler, as CI's has); their C sources
    # stay out.
    for prefix in (
        "sluice/protocol/_compiled.",
        "sluice/quota/_compiled.",
        "sluice/proxy/data_path/_filter_runs.",
        "sluice/proxy/data_path/_pipeline_runs.",
        "sluice/proxy/data_path/_connection_queries.",
        "sluice/proxy/data_path/_connection_passes.",
        "sluice/proxy/filters/_usage_recording.",
        "sluice/proxy/filters/_client_quotas.",
        "sluice/proxy/filters/_broker_rewrite.",
    ):
        assert any(n.startswith(prefix) and n.endswith(".so") for n in names), sorted(names)
    assert not [n for n in names if n.endswith(".c")]


def test_the_distribution_is_named_as_the_docs_and_messages_say() -> None:
    # `sluice` on PyPI is an unrelated project: every install command must name this one.
    from sluice.config.distribution import DISTRIBUTION

    assert PYPROJECT["project"]["name"] == DISTRIBUTION == "sluice-kafka"
    assert "sluice" in PYPROJECT["project"]["scripts"]
    texts = [ROOT / "README.md", *ROOT.glob("docs/*.md"), ROOT / "Dockerfile", ROOT / ".ci" / "run"]
    for path in texts:
        text = path.read_text()
        wrong = re.search(r"pip install ['\"]?sluice(\[|['\"\s]|$)", text, re.M)
        assert not wrong, f"{path} installs `sluice`"
        assert "sluice-*.whl" not in text, f"{path} looks for a wheel of `sluice` (it is sluice_kafka-*.whl)"
