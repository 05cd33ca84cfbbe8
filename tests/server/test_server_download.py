"""SegmentFetcher on its own: deep-store retries with exponential backoff, CRC checks, giving up clearly."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cuvee.cluster.store import ClusterStore
from cuvee.deepstore.local import LocalDeepStore
from cuvee.metastore import open_metastore
from cuvee.server.download import Backoff, DownloadError, SegmentFetcher
from cuvee.server.local import LocalSegments

from tests.server.server_helpers import CLUSTER, FAST_META, TABLE, commit_segment

SEG = "events__0__0__20260101T0000Z"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ClusterStore]:
    meta = open_metastore(f"sqlite://{tmp_path / 'meta.db'}?{FAST_META}")
    yield ClusterStore(meta, CLUSTER)
    meta.close()


class FlakyGets:
    """A fault hook failing the first ``failures`` deep-store gets."""

    def __init__(self, failures: int):
        self.failures = failures
        self.calls = 0

    def __call__(self, point: str) -> None:
        if point == "get.copied":
            self.calls += 1
            if self.calls <= self.failures:
                raise OSError("injected: connection reset")


def fetcher(store: ClusterStore, deep: LocalDeepStore, tmp: Path, attempts: int, stopping: threading.Event | None = None) -> SegmentFetcher:
    return SegmentFetcher(store=store, deep_store=deep, local=LocalSegments(tmp / "data"), instance_id="me",
                          backoff=Backoff(0.01, 0.04, attempts), http_timeout_seconds=5,
                          stopping=stopping or threading.Event())


def test_backoff_doubles_up_to_the_cap() -> None:
    assert list(Backoff(0.5, 3.0, 6).delays()) == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert list(Backoff(1.0, 9.0, 1).delays()) == []


def test_deep_store_failures_are_retried_then_the_copy_is_verified(tmp_path: Path, store: ClusterStore) -> None:
    hook = FlakyGets(failures=2)
    deep = LocalDeepStore(tmp_path / "deep", fault_hook=hook)
    record = commit_segment(store, deep, tmp_path / "work", SEG, 25)
    f = fetcher(store, deep, tmp_path, attempts=5)
    segment = f.fetch(TABLE, record)
    assert hook.calls == 3 and f.failed_attempts == 2
    assert segment.crc == record.crc and segment.path == tmp_path / "data" / TABLE / SEG
    assert (tmp_path / "data" / TABLE / ".archives" / f"{SEG}.tar.zst").is_file()  # kept for peers


def test_gives_up_after_the_configured_attempts_naming_each_source(tmp_path: Path, store: ClusterStore) -> None:
    deep = LocalDeepStore(tmp_path / "deep", fault_hook=FlakyGets(failures=100))
    record = commit_segment(store, deep, tmp_path / "work", SEG, 5)
    with pytest.raises(DownloadError, match=r"in 3 attempt\(s\).*deep store file://.*injected"):
        fetcher(store, deep, tmp_path, attempts=3).fetch(TABLE, record)


def test_a_copy_whose_crc_differs_from_the_metadata_is_refused(tmp_path: Path, store: ClusterStore) -> None:
    deep = LocalDeepStore(tmp_path / "deep")
    record = commit_segment(store, deep, tmp_path / "work", SEG, 5)
    wrong = dataclasses.replace(record, crc=record.crc + 1)
    store.put(store.paths.segment(TABLE, SEG), wrong)
    with pytest.raises(DownloadError, match="committed CRC"):
        fetcher(store, deep, tmp_path, attempts=2).fetch(TABLE, wrong)
    assert not (tmp_path / "data" / TABLE / ".archives" / f"{SEG}.tar.zst").exists()


def test_stopping_cuts_the_backoff_short(tmp_path: Path, store: ClusterStore) -> None:
    deep = LocalDeepStore(tmp_path / "deep", fault_hook=FlakyGets(failures=100))
    record = commit_segment(store, deep, tmp_path / "work", SEG, 5)
    stopping = threading.Event()
    stopping.set()
    with pytest.raises(DownloadError, match="stopping"):
        SegmentFetcher(store=store, deep_store=deep, local=LocalSegments(tmp_path / "data"), instance_id="me",
                       backoff=Backoff(60, 60, 5), http_timeout_seconds=5, stopping=stopping).fetch(TABLE, record)
