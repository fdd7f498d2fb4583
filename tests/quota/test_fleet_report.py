"""docs/fleet.md's measured table is what the fleet simulation gives today."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "bench"))

import fleet_report  # noqa: E402


# It runs the whole simulation behind the table (seconds on a quiet machine, over a minute on a loaded
# one): with the end-to-end tests in `make test`, not in `make test-fast`.
@pytest.mark.slow
def test_the_documented_table_matches_the_simulation() -> None:
    text = fleet_report.DOC.read_text(encoding="utf-8")
    start = text.index(fleet_report.BEGIN)
    end = text.index(fleet_report.END) + len(fleet_report.END)
    assert text[start:end] == fleet_report.section(), "run tests/bench/fleet_report.py"
