"""One real local SparkSession for every pipeline test (Spark starts in ~10 s; it is shared, never stopped
early), and small synthetic data sets with known answers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sluice.pipeline.session import spark_session


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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that start Spark are end-to-end tests: `make test-fast` leaves them out."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
