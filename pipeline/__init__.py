"""Sluice's capacity-planning pipeline: PySpark jobs over the usage records (docs/pipeline.md).

From a notebook::

    from sluice.pipeline import spark_session, read_usage, run_report, run_whatif, render_report

    spark = spark_session()                      # local[*]; checks Java first
    usage = read_usage(spark, "kafka://broker:9092/_sluice_usage")   # or a Parquet / JSON lines path
    run_report(spark, usage, "out")
    run_whatif(spark, usage, "candidate-quotas.yaml", "out")
    render_report("out")                         # out/report.html

Names are imported on first use, so `sluice pipeline` can say "install the pipeline extra" instead of
failing on a missing pyspark when this package is imported.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "spark_session": "session",
    "read_usage": "inputs",
    "write_usage_parquet": "inputs",
    "export_usage": "usage_export",
    "SynthSpec": "jobs.synth",
    "synth_usage": "jobs.synth",
    "run_report": "jobs.report",
    "run_whatif": "jobs.whatif",
    "run_propose": "jobs.propose",
    "run_forecast": "jobs.forecast",
    "render_report": "output.html_report",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'sluice.pipeline' has no attribute {name!r}")
    return getattr(importlib.import_module(f"sluice.pipeline.{_EXPORTS[name]}"), name)
