"""Schema versions on an in-process cluster (``cuvee.cluster.schemas``): every replica builds a consuming segment
under the schema version its record names, whenever it starts it (before or after a schema update, after a
restart), so replicas keep byte-identical copies and none is discarded at commit; each table is served under the
version the controller recorded at its last reload, so a restarted replica, or a server that held none of the
table's segments during a reload, serves what its peers serve; a reload force-commits a consuming segment whose
columns differ from the served ones in type too, not only in name; a table and records from before versions keep
working (latest schema, said in a log line) until a reload records a version."""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from cuvee.cluster.records import SegmentRecord
from cuvee.cluster.schemas import SchemaVersions
from cuvee.config import Schema, TableConfig
from cuvee.controller import faults
from cuvee.controller.catalog import Catalog
from cuvee.controller.server_client import ServerReply
from cuvee.controller.table_setup import plan_table, read_start_offsets, write_plan
from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until
from tests.offline.support import SCHEMA as SALES_SCHEMA
from tests.offline.support import metadata_push, offline_table, rows

TABLE = "ver"
REALTIME = f"{TABLE}_REALTIME"
SCHEMA: dict[str, Any] = {"schemaName": TABLE, "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}],
                          "metricFieldSpecs": [{"name": "v", "dataType": "LONG"}]}
COLORED = copy.deepcopy(SCHEMA)
COLORED["dimensionFieldSpecs"].append({"name": "color", "dataType": "STRING", "defaultNullValue": "none"})
UNVERSIONED = -1  # the version a table served under its latest schema shows (cuvee.server.served_schemas)
DISCARDED = "differs from the committed one"  # a replica's copy thrown away at commit (cuvee.server.consuming)
DAY = 86_400_000


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[InProcessCluster]:
    with InProcessCluster(tmp_path, servers=2) as cluster:
        yield cluster


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="cuvee")
    return caplog


def _rows(cluster: InProcessCluster, sql: str) -> list[list[Any]] | None:
    answer = cluster.query(sql)
    return None if answer.get("exceptions") else answer["resultTable"]["rows"]


def _consumers(cluster: InProcessCluster, segment: str) -> list[Any]:
    return [c for s in cluster.servers for c in s.transitions.consuming(REALTIME) if c.name == segment]


def _consuming_segment(cluster: InProcessCluster, sequence: int) -> str:
    return wait_until(lambda: next((s for s, r in cluster.ideal_state(REALTIME).items()
                                    if s.split("__")[2] == str(sequence) and "CONSUMING" in r.values()), None), 30,
                      message=f"no consuming segment of sequence {sequence}")


def _record(cluster: InProcessCluster, segment: str) -> SegmentRecord:
    return cluster.controller.store.segment(REALTIME, segment).record


def _restart(cluster: InProcessCluster, index: int) -> Any:
    victim = cluster.servers[index]
    instance, position = victim.instance_id, cluster._started.index(victim)
    victim.stop()
    restarted = cluster._new_server(index, instance_id=instance).start()
    cluster.servers[index] = cluster._started[position] = restarted
    return restarted


def _committed_on_every_replica(cluster: InProcessCluster, segment: str) -> bool:
    crc = cluster.segment_metadata(TABLE, segment).get("crc")
    held = [s.registry.get(REALTIME, segment) for s in cluster.servers]
    return crc is not None and all(h is not None and not h.is_consuming and h.crc == crc for h in held)


def _add_column_and_let_both_replicas_consume(cluster: InProcessCluster, configs: dict[str, str],
                                              start_second: Any) -> str:
    """Segment 0 committed, segment 1 consuming on both replicas: one started it before a column was added, the
    other after (``start_second`` runs the update and lets the second replica start)."""
    first = _consuming_segment(cluster, 1)
    wait_until(lambda: len(_consumers(cluster, first)) >= 1, 30, message="no replica started segment 1")
    start_second()
    wait_until(lambda: len(_consumers(cluster, first)) == 2, 30, message="the second replica never started")
    return first


def test_replicas_that_start_a_segment_before_and_after_a_schema_update_build_the_same_segment(
        cluster: InProcessCluster, logs: pytest.LogCaptureFixture) -> None:
    configs = cluster.realtime_table(SCHEMA, partitions=1, replicas=2, flush_rows=1_000_000)
    cluster.produce(configs, ({"id": i, "v": 1} for i in range(10)), key_field="id")
    wait_until(lambda: cluster.scalar(f"SELECT COUNT(*) FROM {TABLE}") == 10, 30)
    slow, release = cluster.servers[1], threading.Event()  # a loaded replica: starts segment 1 when released
    inner = slow.transitions._make_consuming

    def gated(table: str, record: SegmentRecord) -> Any:
        if record.sequence == 1:
            assert release.wait(30), "never released"
        return inner(table, record)

    slow.transitions._make_consuming = gated
    assert cluster.http.post(f"{cluster.controller_url}/tables/{TABLE}/forceCommit").status_code == 200

    def update_then_release() -> None:
        put = cluster.http.put(f"{cluster.controller_url}/schemas/{TABLE}", json=COLORED)  # no reload
        assert put.status_code == 200, put.text
        release.set()

    segment = _add_column_and_let_both_replicas_consume(cluster, configs, update_then_release)
    assert _record(cluster, segment).schema_version == 0  # the schema when the controller created the record
    assert [[f.name for f in c.schema.fields] for c in _consumers(cluster, segment)] == [["id", "v"]] * 2

    cluster.produce(configs, ({"id": i, "v": 1, "color": "red"} for i in range(10, 40)), key_field="id")
    wait_until(lambda: all(c.num_docs == 30 for c in _consumers(cluster, segment)), 30)
    reloaded = cluster.http.post(f"{cluster.controller_url}/segments/{TABLE}/reload").json()["reloadJobs"][REALTIME]
    assert reloaded["schemaVersion"] == 1
    assert all(s["forceCommitted"] == [segment] for s in reloaded["servers"].values())  # both replicas agree
    wait_until(lambda: _committed_on_every_replica(cluster, segment), 30, message="segment 1 never committed")
    assert not [r for r in logs.records if DISCARDED in r.getMessage()]  # no replica's copy thrown away

    # the successor is built under version 1 on both replicas: the stream's colors are kept
    successor = _consuming_segment(cluster, 2)
    assert _record(cluster, successor).schema_version == 1
    cluster.produce(configs, ({"id": i, "v": 1, "color": "red"} for i in range(40, 60)), key_field="id")
    wait_until(lambda: _rows(cluster, f"SELECT color, COUNT(*) FROM {TABLE} GROUP BY color ORDER BY color") ==
               [["none", 40], ["red", 20]], 30)


def test_a_rolling_restart_after_a_column_add_keeps_every_value(cluster: InProcessCluster,
                                                                logs: pytest.LogCaptureFixture) -> None:
    """A column added (no reload yet), then a deploy restarts the replicas one after the other: the restarted one
    re-consumes its consuming segment under the version the record names, as its peer does, so whichever replica
    commits, no replica's rows are discarded; the segments created after the update keep the column's values."""
    configs = cluster.realtime_table(SCHEMA, partitions=1, replicas=2, flush_rows=40)
    cluster.produce(configs, ({"id": i, "v": 1} for i in range(10)), key_field="id")
    wait_until(lambda: cluster.scalar(f"SELECT COUNT(*) FROM {TABLE}") == 10, 30)
    segment = _consuming_segment(cluster, 0)
    assert cluster.http.put(f"{cluster.controller_url}/schemas/{TABLE}", json=COLORED).status_code == 200
    for index in (0, 1):  # one replica restarted, rows arrive, then the other
        restarted = _restart(cluster, index)
        wait_until(lambda: [c for c in restarted.transitions.consuming(REALTIME) if c.name == segment], 30)
        first, last = 10 + 15 * index, 25 + 15 * index
        cluster.produce(configs, ({"id": i, "v": 1, "color": "red"} for i in range(first, last)), key_field="id")
        if index == 0:
            wait_until(lambda: all(c.num_docs == 25 for c in _consumers(cluster, segment)), 30)
            assert [[f.name for f in c.schema.fields] for c in _consumers(cluster, segment)] == [["id", "v"]] * 2
    wait_until(lambda: _committed_on_every_replica(cluster, segment), 30, message="segment 0 never committed")
    assert not [r for r in logs.records if DISCARDED in r.getMessage()]

    successor = _consuming_segment(cluster, 1)
    assert _record(cluster, successor).schema_version == 1
    cluster.produce(configs, ({"id": i, "v": 1, "color": "red"} for i in range(40, 60)), key_field="id")
    wait_until(lambda: all(c.num_docs == 20 for c in _consumers(cluster, successor)), 30)
    assert cluster.http.post(f"{cluster.controller_url}/segments/{TABLE}/reload").status_code == 200
    grouped = f"SELECT color, COUNT(*) FROM {TABLE} GROUP BY color ORDER BY color"
    assert wait_until(lambda: _rows(cluster, grouped) == [["none", 40], ["red", 20]], 30)
    assert {s.schemas.get(REALTIME).version for s in cluster.servers} == {1}


def test_a_restarted_replica_serves_the_recorded_version_not_the_latest(cluster: InProcessCluster) -> None:
    configs = cluster.realtime_table(SCHEMA, partitions=1, replicas=2, flush_rows=10)
    cluster.produce(configs, ({"id": i, "v": 1} for i in range(25)), key_field="id")
    wait_until(lambda: len(cluster.committed_segments(TABLE)) == 2, 30)
    a = copy.deepcopy(COLORED)
    a["dimensionFieldSpecs"][-1]["defaultNullValue"] = "a"
    answer = cluster.http.put(f"{cluster.controller_url}/schemas/{TABLE}", json=a, params={"reload": "true"})
    assert answer.status_code == 200 and answer.json()["reloadJobs"][REALTIME]["schemaVersion"] == 1
    b = copy.deepcopy(a)
    b["dimensionFieldSpecs"][-1]["defaultNullValue"] = "b"
    assert cluster.http.put(f"{cluster.controller_url}/schemas/{TABLE}", json=b).status_code == 200  # no reload
    restarted = _restart(cluster, 0)
    wait_until(lambda: len(restarted.registry.names(REALTIME)) == 3, 30, message="the restart serves nothing")
    served = [s.schemas.get(REALTIME) for s in cluster.servers]
    assert [s.version for s in served] == [1, 1]
    assert {s.spec("color").null_value for s in served} == {"a"}
    cluster.servers[1].stop()  # every answer from the restarted replica now
    grouped = f"SELECT color, COUNT(*) FROM {TABLE} GROUP BY color"
    assert wait_until(lambda: _rows(cluster, grouped) == [["a", 25]], 30, message=lambda: str(cluster.query(grouped)))


def test_a_server_with_no_segment_of_the_table_during_a_reload_serves_the_new_version(tmp_path: Path) -> None:
    with InProcessCluster(tmp_path, servers=1) as cluster:
        http, ctl = cluster.http, cluster.controller_url
        cluster.add_schema(SALES_SCHEMA)
        cluster.add_table(offline_table(replication=1))
        assert metadata_push(http, ctl, cluster.deep_store, tmp_path, "sales_0", rows(range(10), DAY)).status_code == 200
        wait_until(lambda: _rows(cluster, "SELECT COUNT(*) FROM sales") == [[10]], 30)
        web = copy.deepcopy(SALES_SCHEMA)
        web["dimensionFieldSpecs"].append({"name": "channel", "dataType": "STRING", "defaultNullValue": "web"})
        assert http.put(f"{ctl}/schemas/sales", json=web, params={"reload": "true"}).status_code == 200
        assert _rows(cluster, "SELECT channel, COUNT(*) FROM sales GROUP BY channel") == [["web", 10]]
        assert http.delete(f"{ctl}/segments/sales/sales_0").status_code == 200
        wait_until(lambda: not cluster.servers[0].registry.names("sales_OFFLINE"), 30)
        app = copy.deepcopy(web)
        app["dimensionFieldSpecs"][-1]["defaultNullValue"] = "app"
        reloaded = http.put(f"{ctl}/schemas/sales", json=app, params={"reload": "true"}).json()["reloadJobs"]
        assert reloaded["sales_OFFLINE"]["numMessagesSent"] == "0"  # no server holds a segment of the table
        pushed = metadata_push(http, ctl, cluster.deep_store, tmp_path, "sales_1", rows(range(10, 30), 2 * DAY))
        assert pushed.status_code == 200
        wait_until(lambda: _rows(cluster, "SELECT COUNT(*) FROM sales") == [[20]], 30)
        assert _rows(cluster, "SELECT channel, COUNT(*) FROM sales GROUP BY channel") == [["app", 20]]


def test_a_reload_commits_a_consuming_segment_whose_column_types_changed(tmp_path: Path) -> None:
    """``force=true`` changes a column's type (no column added): the consuming segment decodes under the old type,
    so the reload commits it, and rows of the new type are ingested by its successor (they were bad records)."""
    with InProcessCluster(tmp_path, servers=1) as cluster:
        configs = cluster.realtime_table(SCHEMA, partitions=1, replicas=1, flush_rows=1_000_000)
        cluster.produce(configs, ({"id": i, "v": 1} for i in range(20)), key_field="id")
        wait_until(lambda: cluster.scalar(f"SELECT COUNT(*) FROM {TABLE}") == 20, 30)
        segment = _consuming_segment(cluster, 0)
        retyped = copy.deepcopy(SCHEMA)
        retyped["dimensionFieldSpecs"][0]["dataType"] = "STRING"  # id: LONG -> STRING
        answer = cluster.http.put(f"{cluster.controller_url}/schemas/{TABLE}", json=retyped,
                                  params={"force": "true", "reload": "true"})
        assert answer.status_code == 200, answer.text
        servers = answer.json()["reloadJobs"][REALTIME]["servers"]
        assert [s["forceCommitted"] for s in servers.values()] == [[segment]]
        wait_until(lambda: segment in cluster.committed_segments(TABLE), 30)
        cluster.produce(configs, ({"id": f"n{i}", "v": 1} for i in range(30)), key_field="id")
        wait_until(lambda: cluster.scalar(f"SELECT COUNT(*) FROM {TABLE}") == 50, 30,
                   message=lambda: str(cluster.http.get(f"{cluster.controller_url}/tables/{TABLE}/"
                                                        "consumingSegmentsInfo").json()))


def test_a_table_and_records_from_before_versions_keep_working_until_a_reload_records_one(
        cluster: InProcessCluster, logs: pytest.LogCaptureFixture) -> None:
    """Written as a controller from before versions wrote them: a schema with no version copy, a table with no
    served version, consuming segment records with no schema version. Servers consume and serve under the latest
    schema (and say so); the first reload records the version, which servers then serve."""
    store = cluster.controller.store
    cluster.create_topic(TABLE, 1)
    store.metastore.create(store.paths.schema(TABLE), orjson.dumps(Schema.from_json(SCHEMA).to_json()))
    config = TableConfig.from_json({"tableName": TABLE, "tableType": "REALTIME",
                                    "segmentsConfig": {"replicasPerPartition": "2"},
                                    "tableIndexConfig": {"streamConfigs": cluster.log_stream_configs(TABLE)}})
    Catalog(store).create_table_config(config)
    assert config.stream is not None
    write_plan(store, REALTIME, plan_table(store, config, read_start_offsets(config.stream), 1_000))
    segment = _consuming_segment(cluster, 0)
    assert _record(cluster, segment).schema_version is None
    cluster.produce(cluster.log_stream_configs(TABLE), ({"id": i, "v": 1} for i in range(10)), key_field="id")
    wait_until(lambda: _rows(cluster, f"SELECT COUNT(*) FROM {TABLE}") == [[10]], 30)
    assert any("names no schema version" in r.getMessage() for r in logs.records)
    assert {s.schemas.get(REALTIME).version for s in cluster.servers} == {UNVERSIONED}
    assert SchemaVersions(store).versions(TABLE) == []

    reloaded = cluster.http.post(f"{cluster.controller_url}/segments/{TABLE}/reload")
    assert reloaded.status_code == 200 and reloaded.json()["reloadJobs"][REALTIME]["schemaVersion"] == 0
    assert {s.schemas.get(REALTIME).version for s in cluster.servers} == {0}
    assert SchemaVersions(store).served(REALTIME).version == 0


def test_a_server_a_reloads_call_missed_serves_the_recorded_version_within_a_poll(tmp_path: Path) -> None:
    """A reload's call to one server fails (the job lists it): that server takes the recorded version at its
    follower's next pass, with no segment loaded meanwhile, so both replicas answer alike."""
    with InProcessCluster(tmp_path, servers=2) as cluster:
        http, ctl = cluster.http, cluster.controller_url
        cluster.add_schema(SALES_SCHEMA)
        cluster.add_table(offline_table(replication=2))
        assert metadata_push(http, ctl, cluster.deep_store, tmp_path, "sales_0", rows(range(10), DAY)).status_code == 200
        wait_until(lambda: all(s.registry.names("sales_OFFLINE") for s in cluster.servers), 30)
        missed, client = cluster.servers[1], cluster.controller.servers
        reach = client.reload

        def lossy(calls: dict[str, Any], table: str, job_id: str) -> list[ServerReply]:
            answered = reach({i: c for i, c in calls.items() if i != missed.instance_id}, table, job_id)
            return [*answered, ServerReply(missed.instance_id, error="ConnectError: refused (test)")]

        client.reload = lossy  # type: ignore[method-assign]
        web = copy.deepcopy(SALES_SCHEMA)
        web["dimensionFieldSpecs"].append({"name": "channel", "dataType": "STRING", "defaultNullValue": "web"})
        job = http.put(f"{ctl}/schemas/sales", json=web, params={"reload": "true"}).json()["reloadJobs"]["sales_OFFLINE"]
        assert job["schemaVersion"] == 1 and "error" in job["servers"][missed.instance_id]
        wait_until(lambda: missed.schemas.get("sales_OFFLINE").version == 1, 10,
                   message="the server the reload missed never took the recorded version")
        assert missed.schemas.get("sales_OFFLINE").spec("channel").null_value == "web"


def _column_added_by_a_reload_that_misses_the_server(cluster: InProcessCluster) -> tuple[dict[str, str], str]:
    """A one-partition table with 10 rows consuming, then a column added with reload=true whose call to the server
    fails: the stream's configs and the consuming segment (pinned to version 0, the table served under 1)."""
    http, ctl = cluster.http, cluster.controller_url
    configs = cluster.realtime_table(SCHEMA, partitions=1, replicas=1, flush_rows=1_000_000)
    cluster.produce(configs, ({"id": i, "v": 1} for i in range(10)), key_field="id")
    wait_until(lambda: cluster.scalar(f"SELECT COUNT(*) FROM {TABLE}") == 10, 30)
    old = _consuming_segment(cluster, 0)
    cluster.controller.servers.reload = lambda calls, table, job_id: [  # type: ignore[method-assign]
        ServerReply(i, error="ConnectError: refused (test)") for i in calls]
    job = http.put(f"{ctl}/schemas/{TABLE}", json=COLORED, params={"reload": "true"}).json()
    assert job["reloadJobs"][REALTIME]["schemaVersion"] == 1
    return configs, old


def test_a_consuming_segment_pinned_before_the_served_version_is_committed_when_it_starts(tmp_path: Path) -> None:
    """A reload that did not reach the server consuming a segment (down, or the segment not placed yet: a commit
    between its steps 2 and 3) leaves it pinned to the old version while the table is served under the new one;
    when a replica starts it (here: a restart) it is force-committed at once, so its successor ingests the added
    column instead of dropping its values until the segment fills (rev-d F3 backstop)."""
    with InProcessCluster(tmp_path, servers=1) as cluster:
        configs, old = _column_added_by_a_reload_that_misses_the_server(cluster)
        assert _record(cluster, old).schema_version == 0
        _restart(cluster, 0)
        successor = _consuming_segment(cluster, 1)
        assert _record(cluster, successor).schema_version == 1
        cluster.produce(configs, ({"id": i, "v": 1, "color": "red"} for i in range(10, 20)), key_field="id")
        wait_until(lambda: _rows(cluster, f"SELECT color, COUNT(*) FROM {TABLE} GROUP BY color ORDER BY color")
                   == [["none", 10], ["red", 10]], 30, message="the added column's values were lost")


def test_a_running_consuming_segment_a_reload_missed_is_committed_at_the_followers_next_pass(
        tmp_path: Path) -> None:
    """The reload's call to the server fails and nothing restarts: the server's follower takes the served version
    at its next pass and force-commits the consuming segment pinned to the old one (before, its rows lost the added
    column's values until its own commit, and for good in that segment)."""
    with InProcessCluster(tmp_path, servers=1) as cluster:
        configs, old = _column_added_by_a_reload_that_misses_the_server(cluster)
        wait_until(lambda: _record(cluster, old).status.value == "DONE", 30,
                   message="the consuming segment pinned to the old version was never committed")
        successor = _consuming_segment(cluster, 1)
        assert _record(cluster, successor).schema_version == 1
        cluster.produce(configs, ({"id": i, "v": 1, "color": "red"} for i in range(10, 20)), key_field="id")
        wait_until(lambda: _rows(cluster, f"SELECT color, COUNT(*) FROM {TABLE} GROUP BY color ORDER BY color")
                   == [["none", 10], ["red", 10]], 30, message="the added column's values were lost")


def test_a_reload_during_a_commit_leaves_the_next_segment_under_the_new_version(tmp_path: Path) -> None:
    """A schema update with reload lands between a commit's steps 2 and 3: the segment already ends (nothing to
    force-commit, and the reload says so), and the next segment, pinned at step 2, is placed under the new version,
    so the added column's values are kept (rev-d F3, reload_during_commit)."""
    jobs: list[dict[str, Any]] = []
    with InProcessCluster(tmp_path, servers=2) as cluster:
        http, ctl = cluster.http, cluster.controller_url
        configs = cluster.realtime_table(SCHEMA, partitions=1, replicas=2, flush_rows=20)
        first = _consuming_segment(cluster, 0)

        def update_and_reload() -> None:
            answer = http.put(f"{ctl}/schemas/{TABLE}", json=COLORED, params={"reload": "true"})
            jobs.append(answer.json()["reloadJobs"][REALTIME])

        faults.HOOKS[faults.COMMIT_AFTER_STEP2] = update_and_reload
        try:
            cluster.produce(configs, ({"id": i, "v": 1} for i in range(20)), key_field="id")
            wait_until(lambda: first in cluster.committed_segments(TABLE), 60)
        finally:
            faults.HOOKS.pop(faults.COMMIT_AFTER_STEP2, None)
        [job] = jobs
        assert job["schemaVersion"] == 1
        assert all(s.get("forceCommitted") == [] for s in job["servers"].values()), job  # it was ending already
        assert _record(cluster, _consuming_segment(cluster, 1)).schema_version == 1
        cluster.produce(configs, ({"id": i, "v": 1, "color": "red"} for i in range(20, 35)), key_field="id")
        wait_until(lambda: _rows(cluster, f"SELECT color, COUNT(*) FROM {TABLE} GROUP BY color ORDER BY color")
                   == [["none", 20], ["red", 15]], 30, message="the added column's values were lost")
