"""Dimension tables and LOOKUP on a live in-process cluster: a fact table (offline, 3 segments over 2 servers) and a
dimension table (2 segments, on every server), answered as DuckDB's LEFT JOIN over the same rows answers; a server
added later gets the dimension segments from a rebalance; a server lacking one says so instead of answering NULL.
The tests run in file order over one cluster (the last one breaks a server's copy)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from cuvee.config import Schema, TableConfig
from cuvee.segment.archive import ARCHIVE_SUFFIX, pack
from cuvee.segment.builder import build_segment
from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until

GAMES_SCHEMA = {"schemaName": "games", "dimensionFieldSpecs": [
    {"name": "teamID", "dataType": "STRING"}, {"name": "league", "dataType": "STRING"}],
    "metricFieldSpecs": [{"name": "runs", "dataType": "LONG"}]}
TEAMS_SCHEMA = {"schemaName": "teams", "primaryKeyColumns": ["teamID"], "dimensionFieldSpecs": [
    {"name": "teamID", "dataType": "STRING"}, {"name": "teamName", "dataType": "STRING"}],
    "metricFieldSpecs": [{"name": "rank", "dataType": "INT"}]}
GAMES_TABLE = {"tableName": "games", "tableType": "OFFLINE", "segmentsConfig": {"replication": "1"}}
TEAMS_TABLE = {"tableName": "teams", "tableType": "OFFLINE", "isDimTable": True,
               "segmentsConfig": {"segmentPushType": "REFRESH"}}

TEAM_IDS = ["a", "b", "c", "d", "e", "f"]
# team i plays i + 1 games (distinct counts: no ties under ORDER BY COUNT(*)), plus 3 games of an unknown team
GAMES = pa.table({
    "teamID": [t for i, t in enumerate(TEAM_IDS) for _ in range(i + 1)] + ["zz"] * 3 + [None] * 2,
    "league": ["AL" if n % 2 else "NL" for n in range(26)],
    "runs": pa.array(range(26), pa.int64())})
TEAMS = pa.table({"teamID": TEAM_IDS[:5], "teamName": ["Ants", "Bees", "Cats", "Dogs", "Eels"],  # no 'f'
                  "rank": pa.array([5, 4, 3, 2, 1], pa.int32())})


def _push(cluster: InProcessCluster, table: str, schema: dict[str, Any], config: dict[str, Any],
          parts: list[pa.Table]) -> list[str]:
    parsed, indexing = Schema.from_json(schema), TableConfig.from_json(config).indexing
    names = []
    with tempfile.TemporaryDirectory(prefix="cuvee-lookup-") as tmp:
        for i, rows in enumerate(parts):
            name = f"{table}_{i}"
            built = build_segment(rows, parsed, indexing, Path(tmp) / "built", name, table_name=table, overwrite=True)
            archive = pack(built.path, Path(tmp) / f"{name}{ARCHIVE_SUFFIX}")
            with open(archive, "rb") as f:
                pushed = cluster.http.post(f"{cluster.controller_url}/v2/segments",
                                           params={"tableName": table, "tableType": "OFFLINE"},
                                           files={"file": (archive.name, f, "application/octet-stream")})
            assert pushed.status_code < 300, pushed.text
            names.append(name)
    return names


def _ideal(cluster: InProcessCluster, table: str) -> dict[str, dict[str, str]]:
    doc = cluster.ideal_state(table)
    return doc.get("OFFLINE", doc)


def _holders(cluster: InProcessCluster, table: str) -> dict[str, set[str]]:
    """Segment -> the servers whose registry holds it."""
    held: dict[str, set[str]] = {}
    for server in cluster.servers:
        for name in server.registry.names(table):
            held.setdefault(name, set()).add(server.instance_id)
    return held


@pytest.fixture(scope="module")
def cluster() -> Iterator[InProcessCluster]:
    with tempfile.TemporaryDirectory(prefix="cuvee-lookup-cluster-") as root, \
            InProcessCluster(Path(root), servers=2) as running:
        for schema, table in ((GAMES_SCHEMA, GAMES_TABLE), (TEAMS_SCHEMA, TEAMS_TABLE)):
            running.add_schema(schema)
            running.add_table(table)
        _push(running, "games", GAMES_SCHEMA, GAMES_TABLE, [GAMES.slice(0, 9), GAMES.slice(9, 9), GAMES.slice(18)])
        _push(running, "teams", TEAMS_SCHEMA, TEAMS_TABLE, [TEAMS.slice(0, 3), TEAMS.slice(3)])
        servers = set(running.server_instances())
        wait_until(lambda: _holders(running, "teams_OFFLINE") == {"teams_0": servers, "teams_1": servers}, 30,
                   message="the dimension segments never reached every server")
        wait_until(lambda: running.scalar("SELECT COUNT(*) FROM games") == GAMES.num_rows, 30)
        wait_until(lambda: running.scalar("SELECT COUNT(*) FROM teams") == TEAMS.num_rows, 30)
        yield running


def _oracle(sql: str) -> list[list[Any]]:
    con = duckdb.connect()
    con.register("games", GAMES)
    con.register("teams", TEAMS)
    return [list(row) for row in con.sql(sql).fetchall()]


def _rows(cluster: InProcessCluster, sql: str) -> list[list[Any]]:
    answer = cluster.query(sql)
    assert not answer.get("exceptions"), answer["exceptions"]
    return answer["resultTable"]["rows"]


def test_a_dim_tables_segments_are_on_every_server_and_a_fact_tables_are_not(cluster: InProcessCluster) -> None:
    servers = set(cluster.server_instances())
    assert len(servers) == 2
    assert {s: set(r) for s, r in _ideal(cluster, "teams_OFFLINE").items()} == {
        "teams_0": servers, "teams_1": servers}
    assert all(len(r) == 1 for r in _ideal(cluster, "games_OFFLINE").values())


def test_group_by_a_lookup_answers_as_a_left_join(cluster: InProcessCluster) -> None:
    sql = "SELECT LOOKUP('teams', 'teamName', 'teamID', teamID), COUNT(*) FROM games GROUP BY 1 ORDER BY 2 DESC"
    answer = cluster.query(sql)
    assert answer["resultTable"]["dataSchema"]["columnDataTypes"] == ["STRING", "LONG"]
    assert _rows(cluster, sql) == _oracle(
        "SELECT t.teamName, COUNT(*) FROM games g LEFT JOIN teams t ON t.teamID = g.teamID GROUP BY 1 "
        "ORDER BY 2 DESC LIMIT 10")  # 'f', 'zz' and NULL keys make one NULL group of 9


def test_a_filter_on_a_lookup_and_a_lookup_inside_an_aggregation(cluster: InProcessCluster) -> None:
    assert _rows(cluster, "SELECT COUNT(*), SUM(runs), MAX(LOOKUP('teams', 'rank', 'teamID', teamID)) FROM games "
                          "WHERE LOOKUP('teams', 'teamName', 'teamID', teamID) IN ('Bees', 'Dogs')") == _oracle(
        "SELECT COUNT(*), SUM(runs)::DOUBLE, MAX(t.rank) FROM games g LEFT JOIN teams t ON t.teamID = g.teamID "
        "WHERE t.teamName IN ('Bees', 'Dogs')")
    assert _rows(cluster, "SELECT COUNT(*) FROM games WHERE LOOKUP('teams', 'teamName', 'teamID', teamID) "
                          "IS NULL") == [[3 + 6 + 2]]


def test_a_lookup_over_a_group_by_key_is_selected_beside_aggregations(cluster: InProcessCluster) -> None:
    """The servers compute it as a hidden group key; the broker merges groups split over three segments."""
    sql = ("SELECT teamID, LOOKUP('teams', 'teamName', 'teamID', teamID), SUM(runs) FROM games GROUP BY teamID "
           "ORDER BY 3 DESC")
    answer = cluster.query(sql)
    assert answer["resultTable"]["dataSchema"]["columnDataTypes"] == ["STRING", "STRING", "DOUBLE"]
    # a game without a team groups as the column's default null value, 'null' (Pinot's answer without null
    # handling); LOOKUP finds no team for it
    assert _rows(cluster, sql) == _oracle(
        "SELECT coalesce(g.teamID, 'null'), t.teamName, SUM(runs)::DOUBLE FROM games g LEFT JOIN teams t "
        "ON t.teamID = g.teamID GROUP BY 1, t.teamName ORDER BY 3 DESC LIMIT 10")


def test_a_lookup_in_a_multi_stage_querys_leaf_runs_on_the_servers(cluster: InProcessCluster) -> None:
    sql = ("SELECT s.name, s.n FROM (SELECT LOOKUP('teams', 'teamName', 'teamID', teamID) AS name, COUNT(*) AS n "
           "FROM games GROUP BY 1) s JOIN teams t ON s.name = t.teamName ORDER BY s.n")
    assert _rows(cluster, sql) == [["Ants", 1], ["Bees", 2], ["Cats", 3], ["Dogs", 4], ["Eels", 5]]


def test_a_join_with_the_dimension_table_on_its_key_is_answered_on_the_servers(cluster: InProcessCluster) -> None:
    """Pinot's lookup join: rewritten into LOOKUPs, the query goes to the fact table's servers whole — only the
    matching fact rows are scanned (a join at the broker would fetch every row of both tables)."""
    sql = ("SELECT t.teamName, COUNT(*) AS n, SUM(g.runs) AS runs FROM games g JOIN teams t ON t.teamID = g.teamID "
           "GROUP BY t.teamName ORDER BY n DESC")
    answer = cluster.query(sql)
    assert not answer.get("exceptions"), answer["exceptions"]
    assert answer["resultTable"]["dataSchema"]["columnNames"] == ["teamName", "n", "runs"]
    assert answer["resultTable"]["rows"] == _oracle(
        "SELECT t.teamName, COUNT(*) AS n, SUM(g.runs)::DOUBLE FROM games g JOIN teams t ON t.teamID = g.teamID "
        "GROUP BY t.teamName ORDER BY n DESC")
    assert answer["numDocsScanned"] == 1 + 2 + 3 + 4 + 5  # teams a-e's games; not 'f', 'zz' nor NULL ones
    left = ("SELECT g.runs, t.teamName FROM games g LEFT JOIN teams t ON g.teamID = t.teamID "
            "WHERE g.league = 'AL' ORDER BY g.runs LIMIT 100")
    assert _rows(cluster, left) == _oracle(left)
    assert cluster.query(left)["numDocsScanned"] == 13


def test_bad_lookups_are_clear_errors(cluster: InProcessCluster) -> None:
    for sql, code in (("SELECT LOOKUP('games', 'league', 'teamID', teamID) FROM games", 150),
                      ("SELECT LOOKUP('nope', 'x', 'teamID', teamID) FROM games", 190),
                      ("SELECT LOOKUP('teams', 'nope', 'teamID', teamID) FROM games", 710)):
        assert [e["errorCode"] for e in cluster.query(sql)["exceptions"]] == [code], sql


def test_a_rebalance_brings_the_dim_segments_to_a_server_added_later(cluster: InProcessCluster) -> None:
    added = cluster.add_server()
    moved = cluster.http.post(f"{cluster.controller_url}/tables/teams/rebalance",
                              params={"dryRun": "false", "type": "OFFLINE"})
    assert moved.status_code == 200 and len(moved.json()["moves"]) == 2, moved.text
    wait_until(lambda: all(added.instance_id in holders for holders in _holders(cluster, "teams_OFFLINE").values())
               and len(_holders(cluster, "teams_OFFLINE")) == 2, 30, message="the new server never got them")
    assert all(len(r) == 3 for r in _ideal(cluster, "teams_OFFLINE").values())


def test_a_server_lacking_a_dim_segment_says_so(cluster: InProcessCluster) -> None:
    """Last: it takes a segment out of a server's registry behind the cluster's back."""
    server = next(s for s in cluster.servers if s.registry.names("games_OFFLINE"))
    server.registry.remove("teams_OFFLINE", "teams_1")
    answer = cluster.query("SELECT LOOKUP('teams', 'teamName', 'teamID', teamID), COUNT(*) FROM games GROUP BY 1")
    errors = answer["exceptions"]
    assert [e["errorCode"] for e in errors] == [235], errors
    assert "teams_OFFLINE lacks segment(s) teams_1" in errors[0]["message"]
    assert server.instance_id in errors[0]["message"] and answer["partialResult"] is True


def test_a_lookup_needs_read_on_its_dimension_table(cluster: InProcessCluster) -> None:
    """A review found LOOKUP read a dimension table its principal may not read: each lookup's table is checked."""
    import asyncio

    from cuvee.auth.policy import Principal

    sql = "SELECT LOOKUP('teams', 'teamName', 'teamID', teamID), COUNT(*) FROM games GROUP BY 1"
    games_only = Principal("reader", tables=frozenset({"games"}))
    both = Principal("analyst", tables=frozenset({"games", "teams"}))
    handler = cluster.broker.handler
    cluster.query(sql)  # the broker's pool and loop exist (an earlier test may have left a server short of a dim)
    assert handler._loop is not None

    def ask(principal: Principal) -> dict[str, Any]:  # on the broker's own loop, where its server pool lives
        return asyncio.run_coroutine_threadsafe(handler.handle(sql, None, principal), handler._loop).result(30)

    denied = ask(games_only)
    assert [e["errorCode"] for e in denied["exceptions"]] == [180] and "teams" in denied["exceptions"][0]["message"]
    assert "resultTable" not in denied
    assert 180 not in [e["errorCode"] for e in ask(both)["exceptions"]]
