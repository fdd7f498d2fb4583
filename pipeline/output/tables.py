"""Writing and reading the jobs' tables under the output directory.

Big tables are Parquet directories written by Spark (`<name>.parquet`); small ones (a row per entity, per
hour of the period, ...) are also single CSV files (`<name>.csv`) a spreadsheet opens and the HTML
report is drawn from. The output directory is a local directory of the driver: the report and the CSV
files are written by it; inputs may be anywhere Spark reads.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def job_dir(out: str, job: str) -> str:
    path = os.path.join(out, job)
    os.makedirs(path, exist_ok=True)
    return path


def write_parquet(df: DataFrame, directory: str, name: str) -> str:
    path = os.path.join(directory, f"{name}.parquet")
    df.write.mode("overwrite").parquet(path)
    return path


def write_csv_df(df: DataFrame, directory: str, name: str, limit: int = 1_000_000) -> str:
    """A small Spark table as one CSV file (collected to the driver; refuses more than `limit` rows)."""
    rows = df.limit(limit + 1).collect()
    if len(rows) > limit:
        raise ValueError(f"{name}: more than {limit} rows is not a small table; write it as Parquet")
    return write_csv_rows(directory, name, df.columns, (row.asDict() for row in rows))


def write_csv_rows(
    directory: str, name: str, columns: Sequence[str], rows: Iterable[Mapping[str, object]]
) -> str:
    path = os.path.join(directory, f"{name}.csv")
    with open(path, "w", newline="", encoding="utf-8") as stream:
        writer = csv.DictWriter(stream, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({key: _cell(row.get(key)) for key in columns})
    return path


def _cell(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}" if abs(value) < 1e15 else repr(value)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def read_csv(directory: str, name: str) -> list[dict[str, str]]:
    """Rows of `<directory>/<name>.csv` as dicts of strings; [] when the file is not there."""
    path = os.path.join(directory, f"{name}.csv")
    if not os.path.exists(path):
        return []
    with open(path, newline="", encoding="utf-8") as stream:
        return list(csv.DictReader(stream))
