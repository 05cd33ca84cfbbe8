"""The real external services tests start, once per test session: ZooKeeper, the tansu Kafka broker and moto's S3
server."""

from __future__ import annotations

from collections.abc import Iterator

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
