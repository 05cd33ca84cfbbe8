"""Creating dimension tables through the controller: a REALTIME one, one whose schema has no primary key, and a
hybrid half are each refused with 400 and a message saying why; a proper one is created."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from cuvee.controller import Controller
from tests.controller.test_controller_support import post, schema_doc, table_doc


def _dim(name: str = "events") -> dict[str, Any]:
    return {"tableName": name, "tableType": "OFFLINE", "isDimTable": True}


def _refused(response: httpx.Response, fragment: str) -> None:
    assert response.status_code == 400, response.text
    assert fragment in response.text, response.text


def test_dim_table_creation_rules(leader: Controller, log_dir: Path) -> None:
    url = leader.url
    assert post(url, "/schemas", schema_doc()).status_code == 200
    _refused(post(url, "/tables", _dim()), "needs primaryKeyColumns")
    _refused(post(url, "/tables", {**table_doc(log_dir), "isDimTable": True}), "must be an OFFLINE table")
    keyed = {**schema_doc(), "primaryKeyColumns": ["id"]}
    assert httpx.put(url + "/schemas/events", json=keyed).status_code == 200
    created = post(url, "/tables", {**_dim(), "dimensionTableConfig": {"disablePreload": False}})
    assert created.status_code == 200, created.text
    stored = httpx.get(url + "/tables/events_OFFLINE").json()["OFFLINE"]
    assert stored["isDimTable"] is True and stored["dimensionTableConfig"]["disablePreload"] is False
    _refused(post(url, "/tables", table_doc(log_dir)), "cannot have a REALTIME part")
    unkeyed = schema_doc()
    _refused(httpx.put(url + "/schemas/events", json=unkeyed), "needs primaryKeyColumns")
