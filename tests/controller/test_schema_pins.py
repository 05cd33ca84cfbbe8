"""The schema versions of a table's unfinished consuming segments (``cuvee.controller.pinned``): a table-config
update must fit them too (reload first), and a record created before it is placed is re-pinned to the current
version (and restarted at its placer's offset) by compare-and-set when it is placed."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from cuvee.cluster.assignment import new_segment_record
from cuvee.cluster.schemas import SchemaVersions
from cuvee.cluster.store import ClusterStore
from cuvee.config import Schema, TableConfig
from cuvee.controller import Controller, faults
from cuvee.controller.catalog import Catalog
from cuvee.controller.pinned import unfinished_pins
from cuvee.controller.repair import RecreateConsuming
from cuvee.protocol.completion import ResponseStatus
from cuvee.protocol.segment_name import LLCSegmentName
from cuvee.stream.log import LogAdmin
from cuvee.stream.log.topic import TopicSettings
from tests.controller.test_controller_completion import Replica, _next_of
from tests.controller.test_controller_support import TOPIC, get, produce, schema_doc
from tests.controller.test_repair import (  # noqa: F401  (clock, leader, make_controller: fixtures)
    T,
    _all_offline,
    _ideal,
    _table,
    clock,
    leader,
    make_controller,
)

TS2 = {"name": "ts2", "dataType": "LONG", "format": "1:MILLISECONDS:EPOCH", "granularity": "1:MILLISECONDS"}


def _add_columns(leader: Controller) -> None:
    added = schema_doc()
    added["dimensionFieldSpecs"].append({"name": "device", "dataType": "STRING"})
    added["dateTimeFieldSpecs"].append(TS2)
    assert httpx.put(f"{leader.url}/schemas/events", json=added).status_code == 200


def _config(leader: Controller) -> dict[str, Any]:
    return get(leader.url, "/tables/events").json()["REALTIME"]


def _commit(leader: Controller, segment: str, offset: int) -> None:
    a, b = (Replica(r, segment, leader.url) for r in sorted(_ideal_replicas(leader, segment)))
    assert a.consumed(offset).status is ResponseStatus.COMMIT
    assert a.commit_start(offset).status is ResponseStatus.COMMIT_CONTINUE
    assert a.commit_end(offset).status is ResponseStatus.COMMIT_SUCCESS


def _ideal_replicas(leader: Controller, segment: str) -> list[str]:
    return sorted(get(leader.url, "/tables/events/idealstate").json()["REALTIME"][segment])


def test_a_config_update_naming_a_column_the_consuming_segments_lack_is_refused_until_they_commit(
    leader: Controller, side_store: ClusterStore, log_dir: Path
) -> None:
    """A replica (re)starting a consuming segment combines the latest config with the schema version its record
    pins: a config naming a column added since would fail its build and stop the partition (rev-d F1)."""
    segments = _table(leader, side_store, log_dir)
    _add_columns(leader)  # version 1, no reload: the consuming segments stay pinned to version 0
    changes = [("tableIndexConfig", "invertedIndexColumns", ["device"]),
               ("tableIndexConfig", "sortedColumn", ["device"]),
               ("segmentsConfig", "timeColumnName", "ts2")]
    for section, key, value in changes:
        config = _config(leader)
        config[section][key] = value
        refused = httpx.put(f"{leader.url}/tables/events", json=config)
        assert refused.status_code == 400, (key, refused.text)
        body = refused.json()
        assert "version 0" in body["error"] and "reload the table first" in body["error"], body
        assert any("device" in i["message"] or "ts2" in i["message"] for i in body["issues"]), body
        assert key not in _config(leader)[section] or _config(leader)[section][key] != value  # nothing written
    unrelated = _config(leader)
    unrelated["tableIndexConfig"]["invertedIndexColumns"] = ["country"]  # fits version 0: accepted
    assert httpx.put(f"{leader.url}/tables/events", json=unrelated).status_code == 200

    for segment in segments.values():  # what a reload does: the consuming segments commit ...
        _commit(leader, segment, 100)
        [successor] = _next_of(side_store, segment)
        assert side_store.segment(T, successor).record.schema_version == 1  # ... their successors use version 1
    for section, key, value in changes:
        config = _config(leader)
        config[section][key] = value
        accepted = httpx.put(f"{leader.url}/tables/events", json=config)
        assert accepted.status_code == 200, (key, accepted.text)


def test_a_successor_created_before_a_schema_update_is_placed_under_the_new_version(
    leader: Controller, side_store: ClusterStore, log_dir: Path
) -> None:
    """Commit step 2 pins the successor; a schema update (and reload) before step 3 places it force-commits only
    what consumes, so step 3 re-pins the unplaced successor to the schema now (rev-d F3, reload_during_commit)."""
    segment = _table(leader, side_store, log_dir)[0]
    faults.HOOKS[faults.COMMIT_AFTER_STEP2] = lambda: _add_columns_in(side_store)
    try:
        _commit(leader, segment, 100)
    finally:
        faults.HOOKS.pop(faults.COMMIT_AFTER_STEP2, None)
    [successor] = _next_of(side_store, segment)
    assert successor in _ideal(side_store).segments
    record = side_store.segment(T, successor).record
    assert (record.schema_version, record.start_offset) == (1, 100)


def test_repair_reuses_a_leftover_under_the_schema_now_from_the_offset_the_stream_still_has(
    leader: Controller, side_store: ClusterStore, log_dir: Path
) -> None:
    """A repair that died between the successor's record and its placement left it pinned to version 0 from offset
    0; since then a column was added and retention dropped offsets. The next repair reuses the record, from the
    earliest offset it found and under version 1, not the leftover's (rev-d F3)."""
    admin = LogAdmin(str(log_dir))
    admin.configure_topic(TOPIC, TopicSettings(segment_bytes=400, retention_bytes=800))
    segment = _table(leader, side_store, log_dir)[2]
    done = side_store.segment(T, segment).record
    leftover = LLCSegmentName.parse(segment).next(int(time.time() * 1000)).name
    side_store.create_segment(T, new_segment_record(leftover, 2, done.sequence + 1, 0, 200, None, 0, 0))
    _add_columns_in(side_store)
    produce(log_dir, {2: 200})
    earliest = admin.apply_retention(TOPIC)[2]
    assert earliest > 0
    _all_offline(side_store, segment)
    assert leader.repair.run_once() == [RecreateConsuming(2, segment, 0)]
    assert _next_of(side_store, segment) == [leftover] and leftover in _ideal(side_store).segments
    record = side_store.segment(T, leftover).record
    assert (record.schema_version, record.start_offset) == (1, earliest)


def test_a_resume_places_a_leftover_under_the_schema_now(
    leader: Controller, side_store: ClusterStore, log_dir: Path
) -> None:
    """A pause between commit steps 2 and 3 leaves the successor's record unplaced, pinned to version 0; a column
    added while paused: a plain resume (no consumeFrom) places it under version 1 (rev-d F3, leftover_old_version)."""
    segment = _table(leader, side_store, log_dir)[0]

    def pause() -> None:
        side_store.update_ideal_state(T, lambda ideal: dataclasses.replace(ideal, paused=True))

    faults.HOOKS[faults.COMMIT_AFTER_STEP2] = pause
    try:
        _commit(leader, segment, 100)
    finally:
        faults.HOOKS.pop(faults.COMMIT_AFTER_STEP2, None)
    [successor] = _next_of(side_store, segment)
    assert successor not in _ideal(side_store).segments
    assert side_store.segment(T, successor).record.schema_version == 0
    # unplaced, it is re-pinned when placed: it holds no config update back (no reload could commit it)
    assert successor not in {s for pinned in unfinished_pins(side_store, T).values() for s in pinned}
    _add_columns_in(side_store)
    assert httpx.post(f"{leader.url}/tables/events/resumeConsumption").status_code == 200
    assert successor in _ideal(side_store).segments
    record = side_store.segment(T, successor).record
    assert (record.schema_version, record.start_offset) == (1, 100)


def _add_columns_in(store: ClusterStore) -> None:
    """The schema update of ``_add_columns`` through the catalog (from inside a commit, whose HTTP call holds the
    controller's request)."""
    added = schema_doc()
    added["dimensionFieldSpecs"].append({"name": "device", "dataType": "STRING"})
    added["dateTimeFieldSpecs"].append(TS2)
    Catalog(store).update_schema("events", Schema.from_json(added))


def test_the_repair_pass_serves_a_table_without_a_served_version_under_the_schema_now(
    leader: Controller, side_store: ClusterStore, log_dir: Path
) -> None:
    """Tables from before versions have no served version, so a restarted replica served the latest schema while
    its peers served the one they read earlier (rev9 #5); the leader's repair pass writes one (rev-d F6)."""
    _table(leader, side_store, log_dir)
    offline = {"tableName": "events", "tableType": "OFFLINE", "segmentsConfig": {"timeColumnName": "ts"},
               "tenants": {"server": "DefaultTenant"}, "tableIndexConfig": {}}
    assert httpx.post(f"{leader.url}/tables", json=offline).status_code == 200, "offline part"
    _add_columns_in(side_store)
    tables = (T, "events_OFFLINE")
    for table in tables:  # as a cluster from before versions left them
        assert side_store.delete(side_store.paths.served_schema(table))
    leader.repair.run_once()
    for table in tables:
        served = SchemaVersions(side_store).served(table)
        assert served is not None and (served.schema_name, served.version) == ("events", 1), table
    leader.repair.run_once()  # one was there: kept
    assert SchemaVersions(side_store).served(T).version == 1  # type: ignore[union-attr]


def test_a_table_is_created_with_its_served_version_already_written(
    leader: Controller, side_store: ClusterStore, log_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A controller dying between the table's config and its served version left a table without one (rev-d F6):
    the served version is written first."""
    seen: list[object] = []
    real = Catalog.create_table_config

    def create(self: Catalog, table: TableConfig) -> None:
        seen.append(SchemaVersions(side_store).served(table.name_with_type))
        real(self, table)

    monkeypatch.setattr(Catalog, "create_table_config", create)
    _table(leader, side_store, log_dir)
    assert len(seen) == 1 and seen[0] is not None
