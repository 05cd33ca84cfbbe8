"""Fixtures the server tests share: a metadata store holding the test table, a deep store, a log topic, and the
consuming replicas a test made (stopped afterwards)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cuvee.cluster.store import ClusterStore
from cuvee.deepstore import open_deepstore
from cuvee.metastore import open_metastore
from cuvee.spi.deepstore import DeepStore
from tests.server.server_helpers import CLUSTER, FAST_META, write_table
from tests.server.test_consuming_support import Replica, create_topic


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ClusterStore]:
    meta = open_metastore(f"sqlite://{tmp_path / 'meta.db'}?{FAST_META}")
    cluster = ClusterStore(meta, CLUSTER)
    write_table(cluster)
    yield cluster
    meta.close()


@pytest.fixture
def deep(tmp_path: Path) -> DeepStore:
    return open_deepstore(f"file://{tmp_path / 'deep'}")


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    create_topic(tmp_path / "log")
    return tmp_path / "log"


@pytest.fixture
def replicas() -> Iterator[list[Replica]]:
    made: list[Replica] = []
    yield made
    for replica in made:
        replica.segment.stop()
