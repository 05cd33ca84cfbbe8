"""The schema versions of a table's unfinished consuming segments (``cuvee.controller.pinned``): a table-config
update must fit them too (reload first), and a record created before it is placed is re-pinned to the current
version (and restarted at its placer's offset) by compare-and-set when it is placed."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import httpx

from cuvee.cluster.store import ClusterStore
from cuvee.controller import Controller
from cuvee.protocol.completion import ResponseStatus
from tests.controller.test_controller_completion import Replica, _next_of
from tests.controller.test_controller_support import get, schema_doc
from tests.controller.test_repair import T, _ideal, _table, clock, leader, make_controller  # noqa: F401

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
