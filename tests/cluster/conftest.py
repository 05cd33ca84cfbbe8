"""A sqlite metadata store in the test's tmp dir, wrapped as one cluster's ClusterStore."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cuvee.cluster.store import ClusterStore
from cuvee.metastore import open_metastore
from cuvee.spi.metastore import MetadataStore

FAST = "session_timeout=5&heartbeat_interval=0.2&poll_interval=0.05"


@pytest.fixture
def metastore_uri(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path / 'meta.db'}?{FAST}"


@pytest.fixture
def metastore(metastore_uri: str) -> Iterator[MetadataStore]:
    store = open_metastore(metastore_uri)
    yield store
    store.close()


@pytest.fixture
def cluster(metastore: MetadataStore) -> ClusterStore:
    return ClusterStore(metastore, "c1")
