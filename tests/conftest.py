"""The real external services tests start, once per test session: ZooKeeper, the tansu Kafka broker, moto's S3
server, and one Spark session (a session starts in 5-15 s): local[2], no UI, few shuffle partitions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cuvee.testing.moto_s3 import MotoS3
from cuvee.testing.tansu import TansuBroker
from cuvee.testing.zookeeper import ZooKeeperServer


@pytest.fixture(scope="session")
def zookeeper() -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer() as server:
        yield server


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[MotoS3]:
    """moto's S3 server on loopback, with one bucket (``.bucket``) and the settings that reach it (``.settings``)."""
    with MotoS3() as server:
        yield server


@pytest.fixture(scope="session")
def tansu() -> Iterator[TansuBroker]:
    with TansuBroker() as broker:
        yield broker


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from cuvee.pipeline.session import spark_session

    session = spark_session("local[2]", "cuvee-tests", **{
        "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2",
        "spark.driver.memory": "1g"})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
