"""The SparkSession the jobs run on: local[*] unless told otherwise, Java checked first, UTC throughout.

Under `spark-submit` the session (and its master) already exists in the JVM that started us; we then add
nothing but the data source. In plain Python we start Spark ourselves, after checking Java, with the
interpreter running us as the executors' Python too (else they would pick whatever `python3` is on PATH,
without our packages).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .java_check import require_java

if TYPE_CHECKING:  # PySpark is imported when a session starts: `sluice pipeline --help` needs no JVM
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"


def under_spark_submit() -> bool:
    """spark-submit starts the JVM first and hands Python the gateway's port."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def spark_session(
    master: str | None = None,
    app_name: str = "sluice-pipeline",
    driver_memory: str | None = None,
    shuffle_partitions: int | None = None,
    ui: bool = False,
    extra: dict[str, str] | None = None,
    log_path: str | None = None,
) -> SparkSession:
    """A SparkSession with the `sluice-usage` data source registered. Raises JavaError before Spark starts.

    With `log_path`, the JVM Spark starts writes its own output there instead of the terminal: the Java
    warnings of every start (the loopback host name, native code, incubator modules) and the executors'
    stack traces behind an error the pipeline explains in one line of its own."""
    from pyspark.sql import SparkSession

    from .kafka_source import register

    builder = SparkSession.builder.appName(app_name)
    if not under_spark_submit():
        require_java()
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder = builder.master(master or DEFAULT_MASTER)
        # The driver's heap is fixed when its JVM starts, which we do here: the only time it can be set.
        if driver_memory:
            builder = builder.config("spark.driver.memory", driver_memory)
        builder = builder.config("spark.ui.enabled", "true" if ui else "false")
    elif master:
        builder = builder.master(master)
    # Hours and days are UTC days: the same report whatever the machine's time zone.
    builder = builder.config("spark.sql.session.timeZone", "UTC")
    # Whole-line progress comes from Progress; Spark's carriage-return bar would interleave with it.
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    if not shuffle_partitions and not under_spark_submit() and (master or DEFAULT_MASTER).startswith("local"):
        # Spark's 200 suits a cluster; on one machine every extra task is pure overhead.
        shuffle_partitions = 4 * (os.cpu_count() or 1)
    if shuffle_partitions:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    with _jvm_output_to(None if under_spark_submit() else log_path):
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


@contextlib.contextmanager
def _jvm_output_to(path: str | None) -> Iterator[None]:
    """While the JVM starts (it inherits file descriptor 2 for its whole life, and so do the Python workers
    it forks), descriptor 2 is `path`; this process's own stderr is put back at once."""
    if path is None:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(log, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(log)
