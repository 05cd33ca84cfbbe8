"""The real external services tests start, once per test session: ZooKeeper and the tansu Kafka broker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cuvee.testing.tansu import TansuBroker
from cuvee.testing.zookeeper import ZooKeeperServer


@pytest.fixture(scope="session")
def zookeeper() -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer() as server:
        yield server


@pytest.fixture(scope="session")
def tansu() -> Iterator[TansuBroker]:
    with TansuBroker() as broker:
        yield broker
