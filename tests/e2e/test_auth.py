"""Auth on a live cluster (controller, servers, broker in process, every role with ``[auth]`` on): ingestion,
commits and queries work with the roles' internal credential, and the matrix of who may do what holds on every
role — no credentials and wrong passwords 401, a read-only principal dropping a table 403 (the table stays), a
table outside a principal's list 403 (180 from the broker), the cluster's internal API closed to users."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cuvee.auth.secrets import hash_password, hash_token
from cuvee.protocol.completion_http import SEGMENT_CONSUMED
from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until

TABLE = "events"
INTERNAL = "internal-token-for-tests-0123456789"
READER_TOKEN = "a-dashboard-token-of-enough-length"
AUTH = {
    "enabled": True,
    "internal_token": INTERNAL,
    "principals_refresh_seconds": 0.2,
    "principals": [
        {"name": "admin", "password": hash_password("admin-pw", n=2**10), "admin": True},
        {"name": "reader", "password": hash_password("reader-pw", n=2**10), "tables": [TABLE], "permissions": ["READ"]},
        {"name": "dash", "token": hash_token(READER_TOKEN), "tables": ["other"], "permissions": ["READ"]},
        {"name": "worded", "password": hash_password("worded-pw", n=2**10),
         "tables": ["forceCommitStatus", "segmentReloadStatus"], "permissions": ["READ"]},
    ],
}
SCHEMA = {"schemaName": TABLE, "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}],
          "metricFieldSpecs": [{"name": "v", "dataType": "LONG"}]}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessCluster]:
    root: Path = tmp_path_factory.mktemp("auth")
    roles: dict[str, Any] = {"auth": AUTH}
    with InProcessCluster(root, servers=2, controller=roles, server=roles, broker=roles,
                          credentials=("admin", "admin-pw")) as cluster:
        configs = cluster.realtime_table(SCHEMA)
        cluster.produce(configs, ({"id": i, "v": 1} for i in range(500)), key_field="id")
        yield cluster


def _sql(cluster: InProcessCluster, sql: str, **kwargs: Any) -> httpx.Response:
    return httpx.post(f"{cluster.broker_url}/query/sql", json={"sql": sql}, timeout=30, **kwargs)


def test_ingestion_commits_and_queries_run_with_the_internal_credential(cluster: InProcessCluster) -> None:
    def counted() -> bool:
        answer = _sql(cluster, f"SELECT COUNT(*) FROM {TABLE}", auth=("reader", "reader-pw")).json()
        return not answer["exceptions"] and answer["resultTable"]["rows"] == [[500]]

    wait_until(counted, 60, message="rows never became queryable with auth on")
    wait_until(lambda: len(cluster.committed_segments(TABLE)) >= 4, 60, message="no commit with auth on")


def test_who_may_do_what_on_the_controller(cluster: InProcessCluster) -> None:
    url = cluster.controller_url
    anonymous = httpx.get(f"{url}/tables", timeout=10)
    assert anonymous.status_code == 401 and anonymous.json()["code"] == 401
    assert anonymous.headers["www-authenticate"].startswith("Basic")
    assert httpx.get(f"{url}/tables", auth=("reader", "wrong"), timeout=10).status_code == 401
    assert httpx.get(f"{url}/tables", auth=("nobody", "x"), timeout=10).status_code == 401
    assert httpx.get(f"{url}/health", timeout=10).status_code == 200  # probes need no credentials
    reader = ("reader", "reader-pw")
    assert httpx.get(f"{url}/tables/{TABLE}", auth=reader, timeout=10).status_code == 200
    dropped = httpx.delete(f"{url}/tables/{TABLE}", auth=reader, timeout=10)
    assert dropped.status_code == 403 and "DELETE" in dropped.json()["error"]
    assert httpx.get(f"{url}/tables/{TABLE}", auth=reader, timeout=10).status_code == 200  # still there
    created = httpx.post(f"{url}/schemas", json={**SCHEMA, "schemaName": "other"}, auth=reader, timeout=10)
    assert created.status_code == 403
    dash = {"Authorization": f"Bearer {READER_TOKEN}"}
    assert httpx.get(f"{url}/tables/{TABLE}", headers=dash, timeout=10).status_code == 403  # not its table
    assert httpx.get(f"{url}/tables", headers=dash, timeout=10).json() == {"tables": []}  # nor in its list
    assert httpx.get(f"{url}/schemas", headers=dash, timeout=10).json() == []
    assert httpx.get(f"{url}/tables", auth=reader, timeout=10).json() == {"tables": [TABLE]}
    stranger = httpx.post(url + SEGMENT_CONSUMED, json={}, auth=("admin", "admin-pw"), timeout=10)
    assert stranger.status_code == 400  # an admin reaches the protocol (and sends nonsense)
    assert httpx.post(url + SEGMENT_CONSUMED, json={}, auth=reader, timeout=10).status_code == 403
    assert httpx.post(url + SEGMENT_CONSUMED, json={}, timeout=10).status_code == 401


def test_who_may_query_on_the_broker(cluster: InProcessCluster) -> None:
    sql = f"SELECT COUNT(*) FROM {TABLE}"
    assert _sql(cluster, sql).status_code == 401
    assert _sql(cluster, sql, auth=("reader", "nope")).status_code == 401
    denied = _sql(cluster, sql, headers={"Authorization": f"Bearer {READER_TOKEN}"}).json()
    assert [e["errorCode"] for e in denied["exceptions"]] == [180]
    assert _sql(cluster, sql, auth=("admin", "admin-pw")).json()["exceptions"] == []
    # the multi-stage engine asks every table's leaf through the same check: no table is read through another
    joined = f"SELECT COUNT(*) FROM {TABLE} a JOIN {TABLE} b ON a.id = b.id"
    assert _sql(cluster, joined, auth=("reader", "reader-pw")).json()["resultTable"]["rows"] == [[500]]
    through = _sql(cluster, f"SELECT COUNT(*) FROM other WHERE id IN (SELECT id FROM {TABLE})",
                   headers={"Authorization": f"Bearer {READER_TOKEN}"}).json()
    assert [e["errorCode"] for e in through["exceptions"]] == [180] and "resultTable" not in through
    assert httpx.get(f"{cluster.broker_url}/debug/routingTable/{TABLE}", auth=("reader", "reader-pw"),
                     timeout=10).status_code == 403


def test_servers_answer_only_the_cluster(cluster: InProcessCluster) -> None:
    server = cluster.servers[0].url
    assert httpx.post(f"{server}/query", content=b"x", timeout=10).status_code == 401
    assert httpx.post(f"{server}/query", content=b"x", auth=("reader", "reader-pw"), timeout=10).status_code == 403
    inside = httpx.post(f"{server}/query", content=b"x", headers={"Authorization": f"Bearer {INTERNAL}"}, timeout=10)
    assert inside.status_code not in (401, 403)  # past the layer (and refused as a malformed request)
    assert httpx.get(f"{server}/health", timeout=10).status_code == 200


def test_pinotdb_connects_with_username_and_password(cluster: InProcessCluster) -> None:
    from pinotdb import connect

    host, port = cluster.broker.url.removeprefix("http://").split(":")
    cursor = connect(host=host, port=int(port), path="/query/sql", scheme="http", username="reader",
                     password="reader-pw").cursor()

    def counted() -> bool:
        cursor.execute(f"SELECT COUNT(*) FROM {TABLE}")
        return bool(cursor.fetchone()[0] == 500)

    wait_until(counted, 60, message="pinotdb never saw the rows")
    anonymous = connect(host=host, port=int(port), path="/query/sql", scheme="http").cursor()
    with pytest.raises(Exception):  # noqa: B017 - pinotdb raises its own DatabaseError for the 401
        anonymous.execute(f"SELECT COUNT(*) FROM {TABLE}")


def test_principals_kept_in_the_metadata_store_are_managed_over_rest_on_every_role(cluster: InProcessCluster) -> None:
    url, admin = cluster.controller_url, ("admin", "admin-pw")
    analyst = {"username": "analyst", "password": "analyst-pw-1", "tables": [TABLE], "permissions": ["READ"]}
    assert httpx.post(f"{url}/users", json=analyst, auth=("reader", "reader-pw"), timeout=10).status_code == 403
    created = httpx.post(f"{url}/users", json=analyst, auth=admin, timeout=10)
    assert created.status_code == 200, created.text
    assert httpx.post(f"{url}/users", json=analyst, auth=admin, timeout=10).status_code == 409
    assert httpx.post(f"{url}/users", json={**analyst, "username": "reader"}, auth=admin, timeout=10).status_code == 409
    for bad in ({**analyst, "username": "a:b"}, {**analyst, "password": "short"}, {**analyst, "role": "ROOT"},
                {**analyst, "permissions": ["ALL"]}, {**analyst, "tables": ["x/y"]}, {**analyst, "extra": 1},
                {"username": "nopw"}, [1, 2]):
        answer = httpx.post(f"{url}/users", json=bad, auth=admin, timeout=10)
        assert answer.status_code == 400 and answer.json()["code"] == 400, bad
    listed = httpx.get(f"{url}/users", auth=admin, timeout=10).json()["users"]
    assert listed["analyst"] == {"username": "analyst", "role": "USER", "tables": [TABLE], "permissions": ["READ"],
                                 "password": True, "token": False, "source": "store"}
    assert listed["admin"]["source"] == "config" and "scrypt" not in str(listed)

    sql = f"SELECT COUNT(*) FROM {TABLE}"
    wait_until(lambda: _sql(cluster, sql, auth=("analyst", "analyst-pw-1")).status_code == 200, 10,
               message="the broker never learned the stored principal")
    assert _sql(cluster, sql, auth=("analyst", "analyst-pw-1")).json()["exceptions"] == []
    dropped = httpx.delete(f"{url}/tables/{TABLE}", auth=("analyst", "analyst-pw-1"), timeout=10)
    assert dropped.status_code == 403

    # A new password: the old one stops working on the controller at once, on the broker within the refresh.
    changed = httpx.put(f"{url}/users/analyst", json={"password": "analyst-pw-2"}, auth=admin, timeout=10)
    assert changed.status_code == 200 and changed.json()["user"]["tables"] == [TABLE]
    assert httpx.get(f"{url}/tables/{TABLE}", auth=("analyst", "analyst-pw-1"), timeout=10).status_code == 401
    assert httpx.get(f"{url}/tables/{TABLE}", auth=("analyst", "analyst-pw-2"), timeout=10).status_code == 200
    wait_until(lambda: _sql(cluster, sql, auth=("analyst", "analyst-pw-1")).status_code == 401, 10,
               message="the broker kept accepting the old password")
    assert httpx.put(f"{url}/users/admin", json={"password": "x" * 10}, auth=admin, timeout=10).status_code == 409

    # Deleted: refused everywhere, cached checks included.
    assert httpx.delete(f"{url}/users/analyst", auth=admin, timeout=10).status_code == 200
    assert httpx.delete(f"{url}/users/analyst", auth=admin, timeout=10).status_code == 404
    assert httpx.get(f"{url}/tables/{TABLE}", auth=("analyst", "analyst-pw-2"), timeout=10).status_code == 401
    wait_until(lambda: _sql(cluster, sql, auth=("analyst", "analyst-pw-2")).status_code == 401, 10,
               message="the broker kept accepting a deleted principal")


def test_browsers_cannot_be_made_to_act_for_their_user_from_another_site(cluster: InProcessCluster) -> None:
    url, admin = cluster.controller_url, ("admin", "admin-pw")
    host = url.removeprefix("http://")
    repair = f"{url}/tables/{TABLE}/repair"
    for headers in ({"Origin": "https://evil.example"}, {"Origin": "null"}, {"Sec-Fetch-Site": "cross-site"}):
        refused = httpx.post(repair, auth=admin, headers=headers, timeout=10)
        assert refused.status_code == 403 and "cross-site" in refused.json()["error"], headers
    same = httpx.post(repair, auth=admin, headers={"Origin": f"http://{host}", "Sec-Fetch-Site": "same-origin"},
                      timeout=10)
    assert same.status_code == 200
    assert httpx.get(f"{url}/tables", auth=admin, headers={"Origin": "https://evil.example"},
                     timeout=10).status_code == 200  # reading is not acting
    page = httpx.get(f"{url}/console/", timeout=10)
    assert page.status_code == 200 and page.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    form = httpx.post(f"{url}/sql", auth=admin, content=b'{"sql": "SELECT 1"}', headers={"Content-Type": "text/plain"},
                      timeout=10)
    assert form.status_code == 415  # what an HTML form can send is not a query


def test_a_jobs_status_is_read_with_read_on_its_table(cluster: InProcessCluster) -> None:
    """The two job-status routes check READ on the job's table: a reader of the table gets its jobs (the path's
    word was taken as the table name: 403), a principal of another table does not, nor one granted a table
    named like the path's word."""
    url, admin = cluster.controller_url, ("admin", "admin-pw")
    reload = httpx.post(f"{url}/segments/{TABLE}/reload", auth=admin, timeout=30)
    assert reload.status_code == 200, reload.text
    reload_id = reload.json()["reloadJobs"][f"{TABLE}_REALTIME"]["reloadJobId"]
    commit = httpx.post(f"{url}/tables/{TABLE}/forceCommit", auth=admin, timeout=30)
    assert commit.status_code == 200, commit.text
    paths = [f"/segments/segmentReloadStatus/{reload_id}",
             f"/tables/forceCommitStatus/{commit.json()['forceCommitJobId']}"]
    for path in paths:
        read = httpx.get(url + path, auth=("reader", "reader-pw"), timeout=10)
        assert read.status_code == 200 and read.json()["metadata" if "Reload" in path else "tableName"], read.text
        other = httpx.get(url + path, headers={"Authorization": f"Bearer {READER_TOKEN}"}, timeout=10)
        assert other.status_code == 403 and "'events'" in other.json()["error"], other.text
        worded = httpx.get(url + path, auth=("worded", "worded-pw"), timeout=10)
        assert worded.status_code == 403, worded.text
        assert httpx.get(url + path, timeout=10).status_code == 401
