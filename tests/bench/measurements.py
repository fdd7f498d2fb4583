"""The record every benchmark returns, and how a record is judged against its target.

A record is a plain dict, so bench_protocol.py and bench_quota.py (which build their own) fit too:
``{"name", "value", "unit", "target"}`` and, from the proxy benchmarks, optionally ``"better"``
("higher" or "lower"), ``"title"``, ``"table"`` ({"columns": [...], "rows": [[...], ...]}), ``"notes"``
and ``"commands"`` (lists of strings) that the report prints under the number.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

Record = dict[str, Any]


def measurement(
    name: str,
    value: float,
    unit: str,
    target: float | None = None,
    *,
    better: str | None = None,
    title: str | None = None,
    table: dict[str, list] | None = None,
    notes: Sequence[str] = (),
    commands: Sequence[str] = (),
) -> Record:
    record: Record = {"name": name, "value": value, "unit": unit, "target": target}
    if better is not None:
        if better not in ("higher", "lower"):
            raise ValueError(f"better={better!r}: expected 'higher' or 'lower'")
        record["better"] = better
    if title is not None:
        record["title"] = title
    if table is not None:
        record["table"] = table
    if notes:
        record["notes"] = list(notes)
    if commands:
        record["commands"] = list(commands)
    return record


def higher_is_better(record: Record) -> bool:
    """Explicit `better` wins; otherwise rates (units ending in "/s") are better high, costs low."""
    if "better" in record:
        return record["better"] == "higher"
    return str(record.get("unit", "")).endswith("/s")


def meets_target(record: Record) -> bool | None:
    """True or False against the record's target; None when it has no target."""
    target = record.get("target")
    if target is None:
        return None
    value = record["value"]
    return value >= target if higher_is_better(record) else value <= target


def median(values: Sequence[float]) -> float:
    return statistics.median(values)
