"""A maintenance run that fails before its swap deletes what its Spark tasks stored (``discard_run``, used by the
merge, realtime-to-offline and upsert compaction jobs): exactly the archives its builds put under its run id."""

from __future__ import annotations

from pathlib import Path

from cuvee.deepstore import open_deepstore
from cuvee.maintenance.jobs import discard_run
from cuvee.pipeline.segments import BuildSpec
from cuvee.segment.archive import deep_store_key

TABLE = "events_REALTIME"
SEGMENT = "events__0__3__20261125T1200Z"


def test_a_failed_run_deletes_the_archives_its_tasks_stored_and_nothing_else(tmp_path: Path) -> None:
    root = tmp_path / "deep"
    root.mkdir()
    deep = open_deepstore(root.as_uri())
    blob = tmp_path / "blob"
    blob.write_bytes(b"archive")

    def key(run_id: str, table: str = TABLE) -> str:  # where a run's builds store a segment's archive
        return BuildSpec({}, {}, root.as_uri(), fingerprint="", run_id=run_id).archive_key(table, SEGMENT)

    ours = [key("run1"), key("run1").replace(SEGMENT, "events__1__3__20261125T1200Z")]
    kept = [deep_store_key(TABLE, SEGMENT), key("run2"), key("run1", "other_REALTIME")]
    for k in ours + kept:
        deep.put(blob, k)
    discard_run(root.as_uri(), TABLE, "run1")
    assert [k for k in ours if deep.exists(k)] == []
    assert all(deep.exists(k) for k in kept)
    discard_run(root.as_uri(), TABLE, "run1")  # again: nothing left, no error
