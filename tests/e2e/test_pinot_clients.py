"""Pinot's own Python client, unchanged, against an in-process Cuvee cluster: DB-API and SQLAlchemy."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy
from pinotdb import connect

from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until

TABLE = "trips"
ROWS = 3_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessCluster]:
    root: Path = tmp_path_factory.mktemp("pinot-clients")
    with InProcessCluster(root, servers=2) as cluster:
        cluster.create_topic(TABLE, 2)
        cluster.add_schema({
            "schemaName": TABLE,
            "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}, {"name": "city", "dataType": "STRING"}],
            "metricFieldSpecs": [{"name": "fare", "dataType": "DOUBLE"}],
            "dateTimeFieldSpecs": [{"name": "ts", "dataType": "TIMESTAMP", "format": "1:MILLISECONDS:EPOCH",
                                    "granularity": "1:MILLISECONDS"}],
        })
        configs = cluster.log_stream_configs(TABLE, **{"realtime.segment.flush.threshold.rows": "2000"})
        cluster.add_table({
            "tableName": TABLE, "tableType": "REALTIME",
            "segmentsConfig": {"timeColumnName": "ts", "replicasPerPartition": "2"},
            "tableIndexConfig": {"streamConfigs": configs},
        })
        cities = ["lisbon", "porto", "braga"]
        cluster.produce(configs, ({"id": i, "city": cities[i % 3], "fare": i / 10, "ts": 1_790_000_000_000 + i}
                                  for i in range(ROWS)), key_field="id")
        wait_until(lambda: cluster.scalar(f"SELECT COUNT(*) FROM {TABLE}") == ROWS, 60, interval=0.1)
        cluster.check_invariants(f"{TABLE}_REALTIME", replicas=2)
        yield cluster


def _broker_host_port(cluster: InProcessCluster) -> tuple[str, int]:
    host, port = cluster.broker_url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def test_pinotdb_dbapi_runs_queries(cluster: InProcessCluster) -> None:
    host, port = _broker_host_port(cluster)
    conn = connect(host=host, port=port, path="/query/sql", scheme="http")
    cursor = conn.cursor()
    cursor.execute(f"SELECT city, COUNT(*) AS n, SUM(fare) AS total FROM {TABLE} GROUP BY city ORDER BY city")
    rows = cursor.fetchall()
    assert [r[0] for r in rows] == ["braga", "lisbon", "porto"]
    assert [r[1] for r in rows] == [1000, 1000, 1000]
    assert sum(r[2] for r in rows) == pytest.approx(sum(i / 10 for i in range(ROWS)))
    assert [d[0] for d in cursor.description] == ["city", "n", "total"]
    cursor.execute(f"SELECT id, city FROM {TABLE} WHERE id < 3 ORDER BY id")
    assert [tuple(r) for r in cursor.fetchall()] == [(0, "lisbon"), (1, "porto"), (2, "braga")]


def test_pinotdb_reports_pinot_errors(cluster: InProcessCluster) -> None:
    host, port = _broker_host_port(cluster)
    cursor = connect(host=host, port=port, path="/query/sql", scheme="http").cursor()
    with pytest.raises(Exception, match="190|TableDoesNotExist"):
        cursor.execute("SELECT COUNT(*) FROM no_such_table")


def test_sqlalchemy_dialect_lists_tables_reflects_columns_and_selects(cluster: InProcessCluster) -> None:
    host, port = _broker_host_port(cluster)
    engine = sqlalchemy.create_engine(f"pinot://{host}:{port}/query/sql?controller={cluster.controller_url}/")
    inspector = sqlalchemy.inspect(engine)
    assert TABLE in inspector.get_table_names()
    columns = {c["name"] for c in inspector.get_columns(TABLE)}
    assert columns == {"id", "city", "fare", "ts"}
    with engine.connect() as conn:
        count = conn.execute(sqlalchemy.text(f"SELECT COUNT(*) FROM {TABLE} WHERE city = 'porto'")).scalar()
    assert count == 1000
