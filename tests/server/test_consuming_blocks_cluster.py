"""Sealed blocks through a whole cluster (in one process): a consuming segment fed through the stream answers the
broker's queries as DuckDB does over the rows produced, with its sealed blocks copied into the server's DuckDB
database, and the copies go when the segment is committed."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until

SCHEMA = {
    "schemaName": "fresh",
    "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}, {"name": "city", "dataType": "STRING"},
                            {"name": "tags", "dataType": "STRING", "singleValueField": False}],
    "metricFieldSpecs": [{"name": "v", "dataType": "INT"}],
}
BLOCK = 2048  # the server setting's floor (MIN_BLOCK_ROWS)
FLUSH = 5 * BLOCK
QUERIES = [  # (Pinot SQL, the same over the produced rows in DuckDB)
    ("SELECT COUNT(*), SUM(v), MIN(id), MAX(id) FROM fresh WHERE v > 1", None),
    ("SELECT city, COUNT(*) FROM fresh GROUP BY city ORDER BY city LIMIT 10",
     "SELECT city, COUNT(*) FROM fresh GROUP BY city ORDER BY city"),
    ("SELECT COUNT(*) FROM fresh WHERE tags = 'b'", "SELECT COUNT(*) FROM fresh WHERE list_contains(tags, 'b')"),
]


def event(i: int) -> dict[str, Any]:
    return {"id": i, "city": ["paris", "lyon", "nice"][i % 3], "tags": ["a", "b"][: i % 3], "v": i % 5}


def copies(natives: Any) -> int:
    return natives.summary()[0].get("fresh_REALTIME", (0, 0))[0]


def answer(cluster: InProcessCluster, sql: str) -> list[list[Any]]:
    got = cluster.query(sql)
    assert not got["exceptions"], got["exceptions"]
    return got["resultTable"]["rows"]


def test_a_consuming_segment_answers_from_its_copied_blocks_and_its_tail(tmp_path: Path) -> None:
    server = {"consumer": {"scan_block_rows": BLOCK}, "native_copy_min_rows": 1}
    with InProcessCluster(tmp_path, servers=1, server=server) as cluster:
        configs = cluster.realtime_table(SCHEMA, partitions=1, replicas=1, flush_rows=FLUSH)
        natives = cluster.servers[0].natives
        produced: list[dict[str, Any]] = []
        for batch in (5, BLOCK + 4, 2 * BLOCK - 2, BLOCK + 7):  # tails of 5, 9, 7 and 14 rows behind 0, 1, 3, 4 blocks
            rows = [event(len(produced) + i) for i in range(batch)]
            cluster.produce(configs, rows, key_field="id")
            produced += rows
            wait_until(lambda: cluster.scalar("SELECT COUNT(*) FROM fresh") == len(produced), 30)
            con = duckdb.connect()
            con.register("fresh", pa.Table.from_pylist(produced))
            for copied in (False, True):  # the first queries ask for the new blocks' copies, made in the background
                for sql, ref in QUERIES:
                    assert [tuple(r) for r in answer(cluster, sql)] == con.sql(ref or sql).fetchall(), \
                        (len(produced), sql, copied)
                wait_until(lambda: copies(natives) == len(produced) // BLOCK, 30)
        assert len(cluster.committed_segments("fresh")) == 0  # all that time, one consuming segment
        cluster.produce(configs, [event(len(produced) + i) for i in range(FLUSH)], key_field="id")
        wait_until(lambda: len(cluster.committed_segments("fresh")) == 1, 30)
        wait_until(lambda: cluster.scalar("SELECT COUNT(*) FROM fresh") == len(produced) + FLUSH, 30)

        def blocks_gone() -> bool:
            gc.collect()
            return copies(natives) <= 1  # at most the committed segment's

        wait_until(blocks_gone, 30, message="the committed segment's blocks kept their copies")


def test_a_committed_segment_of_a_large_table_is_copied_as_it_arrives_without_a_query(tmp_path: Path) -> None:
    """The queries right after a commit should find the copy made (a realtime table's users ask for fresh rows), not
    scan Arrow while their own reads build it; a table too small for its queries to read copies gets none."""
    server = {"consumer": {"scan_block_rows": 1 << 20}, "native_copy_min_rows": FLUSH}
    with InProcessCluster(tmp_path, servers=1, server=server) as cluster:
        configs = cluster.realtime_table(SCHEMA, partitions=1, replicas=1, flush_rows=FLUSH)
        natives = cluster.servers[0].natives
        cluster.produce(configs, [event(i) for i in range(FLUSH + 10)], key_field="id")
        wait_until(lambda: len(cluster.committed_segments("fresh")) == 1, 30)
        wait_until(lambda: copies(natives) == 1, 30, message="the committed segment was not copied before a query")
        small = dict(SCHEMA, schemaName="tiny")
        tiny = cluster.realtime_table(small, partitions=1, replicas=1, flush_rows=BLOCK)
        cluster.produce(tiny, [event(i) for i in range(BLOCK + 3)], key_field="id")
        wait_until(lambda: len(cluster.committed_segments("tiny")) == 1, 30)
        assert natives.summary()[0].get("tiny_REALTIME", (0, 0))[0] == 0


def tail_rows(natives: Any) -> list[int]:
    """The rows of each tail table in the table's database of copies (none: no database)."""
    from cuvee.server.native_copies import TAILS

    copies = natives._tables.get("fresh_REALTIME")
    if copies is None:
        return []
    cursor = copies.con.cursor()
    try:
        names = [n for (n,) in cursor.sql(
            f"SELECT table_name FROM duckdb_tables() WHERE database_name = '{TAILS}'").fetchall()]
        return [cursor.sql(f'SELECT COUNT(*) FROM {TAILS}."{n}"').fetchone()[0] for n in names]  # type: ignore[index]
    finally:
        cursor.close()


def test_the_tail_table_follows_the_stream_and_goes_with_the_commit(tmp_path: Path) -> None:
    """Fed through the stream: once a query made the open block's tail table, the server appends each consumed
    batch to it with no query asking, queries answer from it, and it is dropped when the segment commits."""
    server = {"consumer": {"scan_block_rows": BLOCK}, "native_copy_min_rows": 1}
    with InProcessCluster(tmp_path, servers=1, server=server) as cluster:
        configs = cluster.realtime_table(SCHEMA, partitions=1, replicas=1, flush_rows=FLUSH)
        natives = cluster.servers[0].natives
        produced = [event(i) for i in range(BLOCK + 5)]
        cluster.produce(configs, produced, key_field="id")
        wait_until(lambda: cluster.scalar("SELECT COUNT(*) FROM fresh WHERE v >= 0") == len(produced), 30)
        wait_until(lambda: copies(natives) == 1, 30)  # the sealed block's copy, asked for by that query
        assert cluster.scalar("SELECT COUNT(*) FROM fresh WHERE v >= 0") == len(produced)
        assert tail_rows(natives) == [5]  # made by that query
        more = [event(len(produced) + i) for i in range(7)]
        cluster.produce(configs, more, key_field="id")
        produced += more
        wait_until(lambda: tail_rows(natives) == [12], 30, message="the tail table did not follow the stream")
        con = duckdb.connect()
        con.register("fresh", pa.Table.from_pylist(produced))
        for sql, ref in QUERIES:
            assert [tuple(r) for r in answer(cluster, sql)] == con.sql(ref or sql).fetchall(), sql
        cluster.produce(configs, [event(len(produced) + i) for i in range(FLUSH)], key_field="id")
        wait_until(lambda: len(cluster.committed_segments("fresh")) == 1, 30)

        def tails_gone() -> bool:
            gc.collect()
            return not natives._tails and tail_rows(natives) == []

        wait_until(tails_gone, 30, message="the committed segment's tail table was kept")
