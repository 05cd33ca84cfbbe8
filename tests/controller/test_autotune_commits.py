"""Auto-tuned tables through real commits on the controller: each next segment's metadata records the row
threshold the learner gave it and the bytes per row behind it, and a controller that becomes leader learns on
from that metadata instead of starting from the initial guess (the seed's "transfer with all history")."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from cuvee.cluster.store import ClusterStore
from cuvee.controller import Controller
from cuvee.controller.catalog import Catalog
from cuvee.controller.commit import SegmentCommitter
from cuvee.protocol.segment_name import LLCSegmentName
from tests.controller.test_controller_completion import Replica, _next_of
from tests.controller.test_controller_support import post, register_servers, schema_doc, table_doc

T = "events_REALTIME"
DESIRED = 40_960  # bytes; Replica.commit_end reports 4,096 bytes for its rows


def test_a_new_leader_learns_on_from_the_thresholds_recorded_in_segment_metadata(
        leader: Controller, side_store: ClusterStore, log_dir: Path) -> None:
    register_servers(side_store, 2)
    post(leader.url, "/schemas", schema_doc())
    doc = table_doc(log_dir, replicas=2, rows=0, **{"realtime.segment.flush.threshold.segment.size": str(DESIRED),
                                                    "realtime.segment.flush.autotune.initialRows": "100"})
    assert post(leader.url, "/tables", doc).status_code == 200
    ideal = side_store.ideal_state(T)
    assert ideal is not None
    segment = next(n for n in ideal.record.segments if LLCSegmentName.parse(n).partition == 0)
    a, b = (Replica(r, segment, leader.url) for r in sorted(ideal.record.segments[segment]))
    assert a.consumed(100).status.value == "COMMIT" and b.consumed(100).status.value == "HOLD"
    assert a.commit_start(100).status.value == "COMMIT_CONTINUE"
    assert a.commit_end(100).status.value == "COMMIT_SUCCESS"

    [following] = _next_of(side_store, segment)
    record = side_store.segment(T, following).record
    assert record.bytes_per_row == 4096 / 100  # learned from the committed segment: 40.96 bytes a row
    assert record.row_threshold == 150  # desired / R is 1,000, but a segment under half the size grows 1.5x at most

    # Another controller (a failover): no learner in memory, it reads R back from the metadata.
    config = Catalog(side_store).realtime("events")
    successor = SegmentCommitter(side_store, lambda: 0, 60_000)
    assert successor.learner(T) is None
    assert successor.autotuned_rows(config) == (DESIRED * 100 // 4096, 4096 / 100)  # a new partition's first: 1,000
    assert successor.learner(T) is not None and successor.learner(T).bytes_per_row == 40.96

    # A controller leading again forgets what it learned itself: what the metadata records since wins.
    successor.autotuned_rows(config)
    side_store.update_segment(T, following, lambda r: dataclasses.replace(r, bytes_per_row=81.92))
    assert successor.autotuned_rows(config)[1] == 40.96  # its own, cached
    successor.forget_learners()
    assert successor.autotuned_rows(config) == (DESIRED * 100 // 8192, 81.92)

    # Metadata that records no R (nothing learned yet): the initial guess.
    for name in side_store.segment_names(T):
        side_store.update_segment(T, name, lambda r: dataclasses.replace(r, bytes_per_row=None))
    assert SegmentCommitter(side_store, lambda: 0, 60_000).autotuned_rows(config) == (100, None)
