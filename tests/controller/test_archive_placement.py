"""Committers upload to keys of their own and only the commit moves an upload into the segment's place: a
committer that lost its turn cannot overwrite the committed archive, and uploads no commit took are cleaned up."""

from __future__ import annotations

from pathlib import Path

from cuvee.cluster.store import ClusterStore
from cuvee.controller.retention import RetentionTask
from cuvee.metastore import open_metastore
from cuvee.deepstore import open_deepstore
from cuvee.segment.archive import deep_store_key, deep_store_upload_key, upload_is_stale, upload_of

TABLE, SEGMENT = "events_REALTIME", "events__0__3__20261125T1200Z"


def test_upload_keys_name_their_segment_and_their_age() -> None:
    key = deep_store_upload_key(TABLE, SEGMENT, 1_000)
    assert upload_of(key, TABLE, SEGMENT)
    assert not upload_of(key, TABLE, "events__0__4__20261125T1200Z")
    assert not upload_of(deep_store_key(TABLE, SEGMENT), TABLE, SEGMENT)
    assert not upload_of(f"{TABLE}/uploads/{SEGMENT}.x.y.tar.zst", TABLE, SEGMENT)
    assert deep_store_upload_key(TABLE, SEGMENT, 1_000) != key  # each upload its own key
    assert upload_is_stale(key, 1_000 + 3_601_000, 3_600_000) and not upload_is_stale(key, 2_000, 3_600_000)


def test_the_commit_moves_the_winners_upload_and_a_losers_upload_never_lands(tmp_path: Path) -> None:
    from cuvee.controller.controller import Controller
    from cuvee.controller.config import ControllerConfig

    deep = tmp_path / "deep"
    deep.mkdir()
    controller = Controller(ControllerConfig(metadata=f"sqlite:///{tmp_path / 'm.db'}", deep_store=deep.as_uri()))
    controller.deep_store = store = open_deepstore(deep.as_uri())
    winner, loser = tmp_path / "winner", tmp_path / "loser"
    winner.write_bytes(b"the committed build")
    loser.write_bytes(b"a stale build")
    won = store.put(winner, deep_store_upload_key(TABLE, SEGMENT, 1))
    lost = store.put(loser, deep_store_upload_key(TABLE, SEGMENT, 2))
    final = store.uri(deep_store_key(TABLE, SEGMENT))
    assert controller._place_archive(TABLE, SEGMENT, won) == final
    assert controller._place_archive(TABLE, SEGMENT, won) == final  # a retried commit: moved already
    assert store.get(deep_store_key(TABLE, SEGMENT), tmp_path / "got").read_bytes() == b"the committed build"
    assert store.exists(store.key_of(lost))  # never moved: no commit takes it

    metadata = ClusterStore(open_metastore(f"sqlite:///{tmp_path / 'r.db'}"), "test")
    task = RetentionTask(metadata, store, lambda: 2 + 3_600_001, 3600, lambda: True, deletion_grace_ms=0,
                         lineage_grace_ms=0, in_progress_timeout_ms=0, stale_upload_ms=3_600_000)
    assert task._purge_stale_uploads([TABLE, "events_OFFLINE"]) == 1
    assert store.list(f"{TABLE}/uploads/") == [] and store.exists(deep_store_key(TABLE, SEGMENT))
    missing = store.uri(deep_store_upload_key(TABLE, "events__0__9__20261125T1200Z", 3))
    assert controller._place_archive(TABLE, "events__0__9__20261125T1200Z", missing) == ""  # peers serve it


def test_an_upload_a_segment_records_as_its_archive_is_never_purged(tmp_path: Path) -> None:
    """A commit on a controller without a deep store records the upload's own URI: it is the archive."""
    from cuvee.cluster.records import SegmentRecord, SegmentStatus

    deep = tmp_path / "deep"
    deep.mkdir()
    store = open_deepstore(deep.as_uri())
    archive = tmp_path / "a"
    archive.write_bytes(b"the only archive")
    uri = store.put(archive, deep_store_upload_key(TABLE, SEGMENT, 1))
    metadata = ClusterStore(open_metastore(f"sqlite:///{tmp_path / 'r.db'}"), "test")
    metadata.create_segment(TABLE, SegmentRecord(SEGMENT, SegmentStatus.DONE, 0, download_uri=uri))
    task = RetentionTask(metadata, store, lambda: 10**13, 3600, lambda: True, deletion_grace_ms=0,
                         lineage_grace_ms=0, in_progress_timeout_ms=0, stale_upload_ms=3_600_000)
    assert task._purge_stale_uploads([TABLE]) == 0 and store.exists(store.key_of(uri))


def test_a_late_commit_of_a_segment_already_done_never_moves_its_upload_over_the_committed_archive(
        tmp_path: Path) -> None:
    """A deposed leader's commitEnd that arrives after the segment is DONE (its retry, or its slow step) keeps the
    archive in place: same end offset → the recorded URI; another end offset → the commit is abandoned."""
    import dataclasses

    import pytest

    from cuvee.cluster.records import SegmentRecord, SegmentStatus
    from cuvee.controller.commit import CommitAbandoned, SegmentCommitter
    from cuvee.controller.completion_types import CommitSegmentMetadata
    from cuvee.protocol.segment_name import LLCSegmentName

    metadata = ClusterStore(open_metastore(f"sqlite:///{tmp_path / 'm.db'}"), "test")
    moved: list[str] = []
    committer = SegmentCommitter(metadata, lambda: 0, 60_000,
                                 place_archive=lambda table, segment, location: moved.append(location) or "placed")
    name = LLCSegmentName.parse(SEGMENT)
    action = CommitSegmentMetadata(segment=name, next_segment=LLCSegmentName.parse("events__0__4__20261125T1200Z"),
                                   instance="Server_late", end_offset=100, location="file:///deep/upload",
                                   crc=1, total_docs=100, size_bytes=10, build_time_ms=1, time_min=None,
                                   time_max=None, generation=1)
    metadata.create_segment(TABLE, SegmentRecord(SEGMENT, SegmentStatus.IN_PROGRESS, 0))
    assert committer._archive_location(TABLE, action) == "placed" and len(moved) == 1  # the normal case: moved

    metadata.update_segment(TABLE, SEGMENT, lambda r: dataclasses.replace(
        r, status=SegmentStatus.DONE, end_offset=100, download_uri="file:///deep/events_REALTIME/the-archive"))
    assert committer._archive_location(TABLE, action) == "file:///deep/events_REALTIME/the-archive"
    with pytest.raises(CommitAbandoned):
        committer._archive_location(TABLE, dataclasses.replace(action, end_offset=120))
    assert len(moved) == 1  # neither late commit moved anything
