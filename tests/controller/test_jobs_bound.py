"""The per-table jobs node (``cuvee.controller.jobs``) stays under DESIGN §13's 512 KB with its newest 100 jobs
of a 10,000-segment table: force commits of every consuming segment and reloads of every segment over 200
servers, each force-committing everything. Each job keeps counts, its lists are cut to the job's bound, and the
status routes still answer from it (the force commit's says how many segments it does not list)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from cuvee.cluster.records import ControllerJobs, IdealState, SegmentState
from cuvee.cluster.store import ClusterStore
from cuvee.config import Schema, TableConfig
from cuvee.controller.catalog import Catalog
from cuvee.controller.consumption import force_commit, force_commit_status
from cuvee.controller.jobs import FORCE_COMMIT, MAX_JOBS, RELOAD, find_job, record_job
from cuvee.controller.reload import reload_status, reload_table
from cuvee.controller.server_client import ServerReply
from cuvee.metastore import open_metastore
from tests.controller.test_controller_support import schema_doc, table_doc

TABLE = "events_REALTIME"
SEGMENTS = [f"events__{p}__7__20261129T0300Z" for p in range(10_000)]
SERVERS = [f"Server_{i:03d}" for i in range(200)]


HELD = {i: SEGMENTS[n::len(SERVERS)] for n, i in enumerate(SERVERS)}


class _Servers:
    """Every server answers: it reloaded its segments and force-committed each consuming one."""

    def force_commit(self, calls: dict[str, tuple[str | None, list[str]]], table: str) -> list[ServerReply]:
        return [ServerReply(instance, body={}) for instance in calls]

    def reload(self, calls: dict[str, tuple[str | None, list[str]]], table: str, job_id: str) -> list[ServerReply]:
        return [ServerReply(i, body={"schemaVersion": 3, "segments": HELD[i], "forceCommitted": HELD[i]})
                for i in calls]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ClusterStore]:
    meta = open_metastore(f"sqlite:///{tmp_path / 'meta.db'}")
    store = ClusterStore(meta, "jobs")
    ideal = IdealState(TABLE, {s: {SERVERS[n % len(SERVERS)]: SegmentState.CONSUMING} for n, s in enumerate(SEGMENTS)})
    store.update_ideal_state(TABLE, lambda _: ideal)
    yield store
    meta.close()


def test_a_hundred_jobs_of_a_ten_thousand_segment_table_stay_under_512_kb(store: ClusterStore, tmp_path: Path) -> None:
    config = TableConfig.from_json(table_doc(tmp_path))
    Catalog(store).create_schema(Schema.from_json(schema_doc()))
    Catalog(store).create_table_config(config)
    servers: Any = _Servers()
    forced = [force_commit(store, servers, config, 1_000 + n) for n in range(2)]
    reloads = [reload_table(store, servers, TABLE, 2_000 + n) for n in range(2)]
    assert all(f["jobMetaZKWriteStatus"] == "SUCCESS" for f in forced)
    assert all(r["reloadJobMetaZKStorageStatus"] == "SUCCESS" for r in reloads)
    # as many more of each as the node keeps (each run costs a second here: recorded as the runs recorded theirs)
    stored = store.read(ControllerJobs, store.paths.jobs(TABLE)).record.jobs
    for n in range(MAX_JOBS):
        assert record_job(store, TABLE, {**stored[n % len(stored)], "jobId": f"{n:08x}-0000-0000-0000-000000000000"})
    for job in stored:
        assert record_job(store, TABLE, job)  # the four runs' jobs the newest again, for the status checks below
    size = len(store.metastore.get(store.paths.jobs(TABLE)).data)
    assert size < 512 * 1024, f"jobs node holds {size} bytes"

    status = force_commit_status(store, find_job(store, forced[-1]["forceCommitJobId"], FORCE_COMMIT))
    assert status["numberOfSegmentsForceCommitted"] == "10000"
    listed = orjson.loads(status["segmentsForceCommitted"])
    assert 0 < len(listed) < 10_000 and set(listed) <= set(SEGMENTS)
    assert status["numberOfSegmentsNotListed"] == 10_000 - len(listed)
    assert status["numberOfSegmentsYetToBeCommitted"] == len(listed)  # still CONSUMING in the ideal state

    reloaded = reload_status(find_job(store, reloads[-1]["reloadJobId"], RELOAD), 2_000)
    assert reloaded["totalServersQueried"] == 200 and reloaded["totalServerCallsFailed"] == 0
    assert reloaded["successCount"] == reloaded["totalSegmentCount"] == 10_000
    assert reloaded["metadata"]["forceCommittedCount"] == "10000"
