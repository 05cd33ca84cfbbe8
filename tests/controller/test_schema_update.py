"""``PUT /schemas/{name}``: Pinot's backward-compatibility rules on the controller. Adding a column is accepted;
a type change, a removed column, a single/multi-value, field type or primary-key change are refused with a 400
that names each column and what changed, and nothing is written; ``force=true`` writes such an update anyway."""

from __future__ import annotations

import copy
from typing import Any

import httpx

from cuvee.controller import Controller
from cuvee.testing.waiting import wait_until
from tests.controller.test_controller_support import get, schema_doc


def _answered(send: Any) -> httpx.Response:
    """The answer once it is not 503 ("retry later": the controllers' 3 s metadata session can lapse on a loaded
    machine, and a CI run met it here); what these tests judge is the schema rules, not the session."""
    answers: list[httpx.Response] = []
    wait_until(lambda: answers.append(send()) or answers[-1].status_code != 503, 30, interval=0.2,
               message=lambda: f"the controller answered 503 for 30 s: {answers[-1].text}")
    return answers[-1]


def post(url: str, path: str, body: Any = None) -> httpx.Response:
    return _answered(lambda: httpx.post(url + path, json=body, timeout=30))


def _put(url: str, doc: dict[str, Any], **params: str) -> httpx.Response:
    return _answered(lambda: httpx.put(url + "/schemas/events", json=doc, params=params, timeout=30))


def test_an_added_column_is_accepted_and_a_type_change_is_refused_naming_the_column(leader: Controller) -> None:
    url = leader.url
    assert post(url, "/schemas", schema_doc()).status_code == 200
    added = schema_doc()
    added["dimensionFieldSpecs"].append({"name": "device", "dataType": "STRING", "defaultNullValue": "unknown"})
    answer = _put(url, added)
    assert answer.status_code == 200, answer.text
    assert answer.json()["addedColumns"] == ["device"]
    assert get(url, "/schemas/events").json() == added

    retyped = copy.deepcopy(added)
    retyped["dimensionFieldSpecs"][0]["dataType"] = "STRING"  # id: LONG -> STRING
    refused = _put(url, retyped)
    assert refused.status_code == 400, refused.text
    body = refused.json()
    assert "backward incompatible" in body["error"] and "force=true" in body["error"]
    assert body["issues"] == [{"path": "$.dimensionFieldSpecs[0].dataType",
                               "message": "column 'id' changed data type from LONG to STRING"}]
    assert get(url, "/schemas/events").json() == added  # nothing written


def test_every_incompatible_change_of_one_update_is_listed(leader: Controller) -> None:
    url = leader.url
    assert post(url, "/schemas", {**schema_doc(), "primaryKeyColumns": ["id"]}).status_code == 200
    changed = schema_doc()
    changed["dimensionFieldSpecs"] = [{"name": "id", "dataType": "LONG", "singleValueField": False}]  # country gone
    changed["dimensionFieldSpecs"].append(changed["metricFieldSpecs"].pop())  # clicks: METRIC -> DIMENSION
    changed["primaryKeyColumns"] = ["clicks"]
    refused = _put(url, changed)
    assert refused.status_code == 400, refused.text
    messages = [i["message"] for i in refused.json()["issues"]]
    assert messages[:4] == [
        "column 'id' changed from single-value to multi-value",
        "column 'country' (DIMENSION STRING) was removed; a column cannot be removed from a schema in use",
        "column 'clicks' changed field type from METRIC to DIMENSION",
        "the primary key changed from ['id'] to ['clicks']; an existing primary key cannot change",
    ]


def test_force_writes_a_backward_incompatible_update(leader: Controller) -> None:
    url = leader.url
    assert post(url, "/schemas", schema_doc()).status_code == 200
    retyped = schema_doc()
    retyped["metricFieldSpecs"][0]["dataType"] = "LONG"
    assert _put(url, retyped).status_code == 400
    forced = _put(url, retyped, force="true")
    assert forced.status_code == 200, forced.text
    assert get(url, "/schemas/events").json()["metricFieldSpecs"][0]["dataType"] == "LONG"
