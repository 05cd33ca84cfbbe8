"""``GROUP BY … ORDER BY <aggregation> LIMIT n [OFFSET m]`` on three servers that trim: exact answers.

Three servers, a realtime table of 3 partitions with one replica each (a partition per server); rows are placed
in partitions by their stream key. Each partition holds 20 groups of its own, with 21 to 40 rows, and two groups
spread over every partition: ``A`` with 15 rows on each (45 in all: the largest group, yet ranked last on each
server) and ``C`` with 25 rows on partition 0 (kept there, its ``MAX(v)`` the largest) and 5 on each of the others
(cut there). With
``minServerGroupTrimSize=1`` a server keeps 5 × (LIMIT + OFFSET) groups: Pinot's single round (still asked for
with ``accurateGroupByWithOrderBy=false``) misses ``A`` and counts ``C`` short; the default answers DuckDB's."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from cuvee.spi.stream import partition_for_key
from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.compat.judge import canon_rows
from cuvee.testing.waiting import wait_until

TABLE = "gt"
PARTITIONS = 3
SCHEMA: dict[str, Any] = {"schemaName": TABLE,
                          "dimensionFieldSpecs": [{"name": "pk", "dataType": "STRING"},
                                                  {"name": "g", "dataType": "STRING"}],
                          "metricFieldSpecs": [{"name": "v", "dataType": "LONG"}, {"name": "w", "dataType": "INT"}]}


def _keys(partition: int) -> Iterator[str]:
    """Stream keys the producer sends to ``partition``."""
    return (key for key in (f"k{n}" for n in range(10**6)) if partition_for_key(key.encode(), PARTITIONS) == partition)


def _rows() -> list[dict[str, Any]]:
    keys = {p: _keys(p) for p in range(PARTITIONS)}
    rows: list[dict[str, Any]] = []

    def add(partition: int, group: str, count: int, value: int) -> None:
        rows.extend({"pk": next(keys[partition]), "g": group, "v": value, "w": 1} for _ in range(count))

    for p in range(PARTITIONS):
        for i in range(20):  # local groups: 40 down to 21 rows, their MAX(v) 60 down to 41
            add(p, f"l{p}-{i:02d}", 40 - i, 60 - i)
        add(p, "A", 15, 1)
        add(p, "C", 25 if p == 0 else 5, 100 if p == 0 else 0)
    return rows


ROWS = _rows()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessCluster]:
    with InProcessCluster(tmp_path_factory.mktemp("grouptrim"), servers=3) as cluster:
        configs = cluster.realtime_table(SCHEMA, partitions=PARTITIONS, replicas=1, flush_rows=500)
        cluster.produce(configs, ROWS, key_field="pk")
        wait_until(lambda: cluster.scalar(f"SELECT COUNT(*) FROM {TABLE}") == len(ROWS), 30)
        yield cluster


@pytest.fixture(scope="module")
def reference() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.register(TABLE, pa.Table.from_pylist(ROWS))
    return con


def _judged(answer: dict[str, Any], reference: duckdb.DuckDBPyConnection, sql: str, keys: tuple[int, ...]) -> bool:
    """As the compatibility judge compares (``cuvee.testing.compat.judge``): rows of DuckDB's full answer, whose
    sort keys are DuckDB's, in order."""
    got = canon_rows([tuple(r) for r in answer["resultTable"]["rows"]])
    want = canon_rows(reference.sql(sql).fetchall())
    full = canon_rows(reference.sql(sql.rsplit(" LIMIT ", 1)[0]).fetchall())
    return len(got) == len(want) and not Counter(got) - Counter(full) and \
        [tuple(r[k] for k in keys) for r in got] == [tuple(r[k] for k in keys) for r in want]


def _ask(cluster: InProcessCluster, sql: str, **options: Any) -> dict[str, Any]:
    answer = cluster.query(sql, **options)
    assert not answer.get("exceptions"), (sql, answer["exceptions"])
    return answer


CASES = [  # (Pinot SQL, DuckDB's, the output columns sorted by)
    (f"SELECT g, COUNT(*) AS c FROM {TABLE} GROUP BY g ORDER BY c DESC LIMIT 2 OFFSET 2",
     f"SELECT g, COUNT(*) AS c FROM {TABLE} GROUP BY g ORDER BY c DESC LIMIT 2 OFFSET 2", (1,)),
    (f"SELECT g, SUM(w) AS s FROM {TABLE} GROUP BY g ORDER BY s DESC LIMIT 3",  # a SUM's sign unknown: bounds differ
     f"SELECT g, SUM(w)::DOUBLE AS s FROM {TABLE} GROUP BY g ORDER BY s DESC LIMIT 3", (1,)),
    (f"SELECT g, MAX(v) AS m, COUNT(*) FROM {TABLE} GROUP BY g ORDER BY m DESC LIMIT 3",
     f"SELECT g, MAX(v) AS m, COUNT(*) FROM {TABLE} GROUP BY g ORDER BY m DESC LIMIT 3", (1,)),
]


@pytest.mark.parametrize(("sql", "oracle", "keys"), CASES)
def test_trimmed_servers_answer_exactly(cluster: InProcessCluster, reference: duckdb.DuckDBPyConnection, sql: str,
                                        oracle: str, keys: tuple[int, ...]) -> None:
    pinot = _ask(cluster, sql, minServerGroupTrimSize=1, accurateGroupByWithOrderBy="false")
    assert pinot["groupsTrimmed"] is True and not _judged(pinot, reference, oracle, keys)  # the premise: it cuts
    exact = _ask(cluster, sql, minServerGroupTrimSize=1)
    assert _judged(exact, reference, oracle, keys), (exact["resultTable"]["rows"], reference.sql(oracle).fetchall())
    assert exact["groupsTrimmed"] is False and exact["numGroupsLimitReached"] is False
    assert exact["numServersQueried"] > 3  # a second round
    assert exact["numDocsScanned"] == pinot["numDocsScanned"] == len(ROWS)  # its rows are not counted twice


def test_nothing_trimmed_takes_one_round(cluster: InProcessCluster, reference: duckdb.DuckDBPyConnection) -> None:
    sql, oracle, keys = CASES[0]
    answer = _ask(cluster, sql)  # the default trim size (5,000) is above every server's 22 groups
    assert _judged(answer, reference, oracle, keys)
    assert answer["numServersQueried"] == 3 and answer["groupsTrimmed"] is False


def test_a_ranking_without_bounds_is_not_trimmed(cluster: InProcessCluster,
                                                 reference: duckdb.DuckDBPyConnection) -> None:
    """AVG gives the broker nothing to bound: on several servers the trim is off, in one round."""
    sql = f"SELECT g, AVG(v) AS a, COUNT(*) FROM {TABLE} GROUP BY g ORDER BY a DESC, g LIMIT 3"
    answer = _ask(cluster, sql, minServerGroupTrimSize=1)
    assert _judged(answer, reference, sql.replace("AVG(v)", "AVG(v)::DOUBLE"), (1, 0))
    assert answer["numServersQueried"] == 3 and answer["groupsTrimmed"] is False
    assert _ask(cluster, sql, minServerGroupTrimSize=1, accurateGroupByWithOrderBy="false")["groupsTrimmed"] is True


def test_the_option_is_true_or_false(cluster: InProcessCluster) -> None:
    bad = cluster.query(CASES[0][0], accurateGroupByWithOrderBy="maybe")
    assert [e["errorCode"] for e in bad["exceptions"]] == [150]
    assert "accurateGroupByWithOrderBy" in bad["exceptions"][0]["message"]
