"""One fixture, ``backend``, runs every conformance test against both metadata store implementations."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cuvee.metastore import open_metastore
from cuvee.spi.metastore import MetadataStore
from cuvee.testing.zookeeper import ZooKeeperServer

SQLITE_FAST = {"session_timeout": 1.5, "heartbeat_interval": 0.1, "poll_interval": 0.02}
ZOOKEEPER_FAST = {"session_timeout": 1.5, "request_timeout": 5}


class Backend:
    """Opens clients on one store private to the test; closes them all at the end."""

    def __init__(self, name: str, base_uri: str, fast_options: dict[str, float]):
        self.name = name
        self._base_uri = base_uri
        self._fast = fast_options
        self._opened: list[MetadataStore] = []

    def uri(self, **options: float) -> str:
        merged = {**self._fast, **options}
        return self._base_uri + "?" + "&".join(f"{k}={v}" for k, v in merged.items())

    def open(self, **options: float) -> MetadataStore:
        store = open_metastore(self.uri(**options))
        self._opened.append(store)
        return store

    def close_all(self) -> None:
        for store in self._opened:
            store.close()


@pytest.fixture(params=["sqlite", pytest.param("zookeeper", marks=pytest.mark.zookeeper)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        backend = Backend("sqlite", f"sqlite://{tmp_path / 'meta.db'}", SQLITE_FAST)
    else:
        server: ZooKeeperServer = request.getfixturevalue("zookeeper")
        backend = Backend("zookeeper", server.zk_uri(f"/test-{uuid.uuid4().hex[:12]}"), ZOOKEEPER_FAST)
    yield backend
    backend.close_all()


@pytest.fixture
def store(backend: Backend) -> MetadataStore:
    return backend.open()
