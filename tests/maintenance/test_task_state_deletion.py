"""Deleting a table half deletes its maintenance tasks' watermarks; deleting the OFFLINE half also deletes the
REALTIME half's RealtimeToOfflineSegmentsTask watermark (it says what the offline half holds)."""

from __future__ import annotations

from pathlib import Path

from cuvee.cluster.records import TaskState
from cuvee.cluster.store import ClusterStore
from cuvee.controller.table_setup import delete_table_state
from cuvee.metastore import open_metastore

from tests.server.server_helpers import CLUSTER, FAST_META


def test_a_deleted_offline_half_takes_the_realtime_halfs_move_watermark_with_it(tmp_path: Path) -> None:
    """A review found the watermark outlived the offline half: a recreated offline half got only rows after it,
    and the time boundary hid the rest of the realtime rows."""
    meta = open_metastore(f"sqlite://{tmp_path / 'meta.db'}?{FAST_META}")
    try:
        store = ClusterStore(meta, CLUSTER)
        kept = {("sales_REALTIME", "MergeRollupTask"), ("other_REALTIME", "RealtimeToOfflineSegmentsTask")}
        for table, task in (*kept, ("sales_REALTIME", "RealtimeToOfflineSegmentsTask"),
                            ("sales_OFFLINE", "MergeRollupTask")):
            store.put(store.paths.task(table, task), TaskState(table, task, (("", 5),)))
        delete_table_state(store, "sales_OFFLINE")
        left = {(table, task) for table, task in (*kept, ("sales_REALTIME", "RealtimeToOfflineSegmentsTask"),
                                                  ("sales_OFFLINE", "MergeRollupTask"))
                if store.find(TaskState, store.paths.task(table, task)) is not None}
        assert left == kept
    finally:
        meta.close()
