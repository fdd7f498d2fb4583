"""One real local SparkSession for every pipeline test (Spark starts in ~10 s; it is shared, never stopped
early), and small synthetic data sets with known answers.

Under xdist (`make test`) every test that uses Spark runs on one worker (the xdist group `spark`), so
the session starts once for the whole run and each module's data set (`reported`, `published`, ...) is
built once: spread over three workers, three JVMs started and the known-answers module built its
report three times (125 s, 82 s and 18 s of set-up on a loaded machine, where one worker takes 27 s).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from sluice.pipeline.session import spark_session

# Every JVM the tests start (this module's session and the `sluice pipeline` commands they run) compiles
# with HotSpot's first tier only: a test's Spark job runs seconds on kilobytes, where the optimizing
# compiler's work is never paid back. Measured alone, the CLI test took 61-84 CPU-s instead of 95-122
# (60 s instead of 66-80 s of wall time), the Spark group's jobs the same time with a little less CPU; on
# two cores shared with the rest of `make test`, the CPU is what the other tests wait for. The product's
# own JVMs keep Java's defaults (long jobs on real data need the optimizing compiler).
os.environ.setdefault("PYSPARK_SUBMIT_ARGS", "--driver-java-options -XX:TieredStopAtLevel=1 pyspark-shell")


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    session = spark_session(
        master="local[2]",
        app_name="sluice-pipeline-tests",
        shuffle_partitions=4,
        extra={"spark.default.parallelism": "4", "spark.sql.adaptive.enabled": "true"},
    )
    yield session
    session.stop()


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that start Spark are end-to-end tests (`make test-fast` leaves them out), and share one
    worker under xdist. The pipeline's end-to-end tests start JVMs, which a loaded two-core machine
    slows threefold (the CLI test: 62 s quiet, 220 s loaded): pytest-timeout's 300 s is a guard against
    a hang, so they get 900 s."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.xdist_group("spark"))
        in_pipeline = item.path.parent.name == "pipeline" and item.path.parent.parent.name == "tests"
        if in_pipeline and item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(900))
