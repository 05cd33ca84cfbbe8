"""Fixtures for the stream tests: the implementations under test (embedded log, Kafka on tansu)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cuvee.stream import open_admin
from cuvee.testing.tansu import TansuBroker
from tests.stream.harness import StreamUnderTest


@pytest.fixture(params=["log", pytest.param("kafka", marks=pytest.mark.kafka)])
def stream(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StreamUnderTest]:
    if request.param == "log":
        configs = {"streamType": "log", "stream.log.dir": str(tmp_path / "log")}
        under_test = StreamUnderTest("log", configs, open_admin(configs), "stream.log.topic.name", True, None)
    else:
        broker: TansuBroker = request.getfixturevalue("tansu")
        configs = {"streamType": "kafka", "stream.kafka.broker.list": broker.bootstrap_servers}
        under_test = StreamUnderTest(
            "kafka", configs, open_admin(configs), "stream.kafka.topic.name", False,
            "tansu does not implement CreatePartitions (adding partitions to a topic)",
        )
    yield under_test
    under_test.close()
