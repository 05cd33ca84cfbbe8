"""One Spark session for the whole pipeline test package (a session starts in 5-15 s): local[2], no UI, few
shuffle partitions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from cuvee.pipeline.session import spark_session

    session = spark_session("local[2]", "cuvee-tests", **{
        "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2",
        "spark.driver.memory": "1g"})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
