"""Upsert through the broker on an in-process cluster (2 servers, 2 replicas, frequent commits): the seed's
AccountBalance example, and counts that equal the keys produced at every poll while segments commit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until

TABLE = "balances"
SCHEMA = {
    "schemaName": TABLE,
    "dimensionFieldSpecs": [{"name": "user", "dataType": "STRING"}],
    "metricFieldSpecs": [{"name": "balance", "dataType": "LONG"}],
    "dateTimeFieldSpecs": [{"name": "ts", "dataType": "LONG", "format": "1:MILLISECONDS:EPOCH",
                            "granularity": "1:MILLISECONDS"}],
    "primaryKeyColumns": ["user"],
}
DELETING = "orders"
DELETING_SCHEMA = {
    "schemaName": DELETING,
    "dimensionFieldSpecs": [{"name": "id", "dataType": "INT"}, {"name": "deleted", "dataType": "BOOLEAN"}],
    "metricFieldSpecs": [{"name": "amount", "dataType": "LONG"}],
    "dateTimeFieldSpecs": [{"name": "ts", "dataType": "LONG", "format": "1:MILLISECONDS:EPOCH",
                            "granularity": "1:MILLISECONDS"}],
    "primaryKeyColumns": ["id"],
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessCluster]:
    with InProcessCluster(tmp_path_factory.mktemp("upsert"), servers=2) as cluster:
        cluster.create_topic(TABLE, 2)
        cluster.add_schema(SCHEMA)
        configs = cluster.log_stream_configs(TABLE, **{"realtime.segment.flush.threshold.rows": "60"})
        cluster.add_table({"tableName": TABLE, "tableType": "REALTIME",
                           "segmentsConfig": {"replicasPerPartition": "2", "timeColumnName": "ts"},
                           "tableIndexConfig": {"streamConfigs": configs},
                           "routing": {"instanceSelectorType": "strictReplicaGroup"},
                           "upsertConfig": {"mode": "FULL"}})
        cluster.configs = configs  # type: ignore[attr-defined]
        cluster.create_topic(DELETING, 1)
        cluster.add_schema(DELETING_SCHEMA)
        deleting = cluster.log_stream_configs(DELETING, **{"realtime.segment.flush.threshold.rows": "7"})
        cluster.add_table({"tableName": DELETING, "tableType": "REALTIME",
                           "segmentsConfig": {"replicasPerPartition": "2", "timeColumnName": "ts"},
                           "tableIndexConfig": {"streamConfigs": deleting},
                           "upsertConfig": {"mode": "FULL", "deleteRecordColumn": "deleted"}})
        cluster.deleting = deleting  # type: ignore[attr-defined]
        yield cluster


def produce(cluster: InProcessCluster, rows: list[dict]) -> None:  # type: ignore[type-arg]
    cluster.produce(cluster.configs, rows, key_field="user")  # type: ignore[attr-defined]


def answer(cluster: InProcessCluster, sql: str, **options: str) -> list[list]:  # type: ignore[type-arg]
    doc = cluster.query(sql, **options)
    assert not doc.get("exceptions"), doc["exceptions"]
    return doc["resultTable"]["rows"]


def test_a_table_without_rows_answers(cluster: InProcessCluster) -> None:
    """Consuming segments with no row yet are in the servers' views: queries answer, without an error."""
    def routed_consuming() -> bool:
        routing = cluster.http.get(f"{cluster.broker_url}/debug/routingTable/{TABLE}").json()
        return len(routing.get("consuming", [])) == 2  # one per partition, from one replica each

    wait_until(routed_consuming, 30)
    for _ in range(5):
        assert answer(cluster, f"SELECT COUNT(*) FROM {TABLE}") == [[0]]


def test_account_balance_example(cluster: InProcessCluster) -> None:
    produce(cluster, [{"user": "abc-12", "balance": 100, "ts": 1}, {"user": "abc-13", "balance": 102, "ts": 1}])
    wait_until(lambda: answer(cluster, f"SELECT COUNT(*) FROM {TABLE} WHERE user LIKE 'abc-%'")[0][0] == 2, 30)
    produce(cluster, [{"user": "abc-12", "balance": 200, "ts": 2}])
    wait_until(lambda: answer(cluster, f"SELECT balance FROM {TABLE} WHERE user = 'abc-12'") == [[200]], 30)
    assert answer(cluster, f"SELECT AVG(balance) FROM {TABLE} WHERE user LIKE 'abc-%'") == [[151.0]]
    produce(cluster, [{"user": "abc-13", "balance": 300, "ts": 2}, {"user": "abc-13", "balance": 50, "ts": 0}])
    wait_until(lambda: answer(cluster, f"SELECT AVG(balance) FROM {TABLE} WHERE user LIKE 'abc-%'") == [[250.0]], 30)
    assert answer(cluster, f"SELECT balance FROM {TABLE} WHERE user = 'abc-13'") == [[300]]  # the late row lost


def test_counts_stay_exact_while_segments_commit(cluster: InProcessCluster) -> None:
    users = [f"u{i:03d}" for i in range(80)]
    produced: dict[str, int] = {}
    for version in range(1, 6):  # 400 rows: segments of 60 rows commit several times per partition
        produce(cluster, [{"user": u, "balance": version * 1000 + i, "ts": 100 + version} for i, u in enumerate(users)])
        produced.update({u: version * 1000 + i for i, u in enumerate(users)})
        seen: list[int] = []

        def converged() -> bool:
            count, total = answer(cluster, f"SELECT COUNT(*), SUM(balance) FROM {TABLE} WHERE user LIKE 'u%'")[0]
            seen.append(int(count))
            return int(count) == len(users) and int(total) == sum(produced.values())

        wait_until(converged, 60, interval=0.05, message=f"version {version} never became the only one")
        assert all(n <= len(users) for n in seen), f"a key was counted twice: {seen}"
        if version > 1:
            assert all(n == len(users) for n in seen), f"a key was missing while updating: {seen}"
    assert len(cluster.committed_segments(TABLE)) >= 4
    distinct = answer(cluster, f"SELECT COUNT(DISTINCT user) FROM {TABLE} WHERE user LIKE 'u%'")[0][0]
    assert distinct == len(users)


def test_skip_upsert_sees_every_version(cluster: InProcessCluster) -> None:
    """Runs after the test above: 400 rows of 80 keys (and the example's rows, outside u%)."""
    sql = f"SELECT COUNT(*) FROM {TABLE} WHERE user LIKE 'u%'"
    wait_until(lambda: answer(cluster, sql, skipUpsert="true") == [[400]], 30)
    assert answer(cluster, sql) == [[80]]
    assert answer(cluster, sql, skipUpsert="false") == [[80]]
    bad = cluster.query(sql, skipUpsert="maybe")
    assert bad["exceptions"] and "skipUpsert" in bad["exceptions"][0]["message"]


def test_a_deleted_key_is_hidden_until_a_newer_row_brings_it_back(cluster: InProcessCluster) -> None:
    """Segments of 7 rows: the versions, the delete and the re-insert land in different segments."""
    def rows(ids: range, ts: int, deleted: bool = False, amount: int = 1) -> list[dict]:  # type: ignore[type-arg]
        return [{"id": i, "amount": amount, "ts": ts, "deleted": deleted} for i in ids]

    def count() -> int:
        return int(answer(cluster, f"SELECT COUNT(*) FROM {DELETING}")[0][0])

    produce_to = cluster.deleting  # type: ignore[attr-defined]
    cluster.produce(produce_to, rows(range(10), 1) + rows(range(10), 2, amount=2), key_field="id")
    wait_until(lambda: answer(cluster, f"SELECT COUNT(*), SUM(amount) FROM {DELETING}") == [[10, 20]], 30)
    cluster.produce(produce_to, rows(range(4), 3, deleted=True), key_field="id")
    wait_until(lambda: count() == 6, 30)
    cluster.produce(produce_to, rows(range(2), 2, amount=5), key_field="id")  # older than the delete: stays hidden
    cluster.produce(produce_to, rows(range(1), 4, amount=9), key_field="id")  # newer: back
    wait_until(lambda: count() == 7, 30)
    assert answer(cluster, f"SELECT id, amount FROM {DELETING} WHERE id < 4") == [[0, 9]]
    assert answer(cluster, f"SELECT COUNT(*) FROM {DELETING}", skipUpsert="true") == [[27]]


def late_table(cluster: InProcessCluster, name: str, **upsert: object) -> dict[str, str]:
    cluster.create_topic(name, 1)
    cluster.add_schema({**DELETING_SCHEMA, "schemaName": name})
    configs = cluster.log_stream_configs(name, **{"realtime.segment.flush.threshold.rows": "4"})
    cluster.add_table({"tableName": name, "tableType": "REALTIME",
                       "segmentsConfig": {"replicasPerPartition": "2", "timeColumnName": "ts"},
                       "tableIndexConfig": {"streamConfigs": configs},
                       "upsertConfig": {"mode": "FULL", **upsert}})
    return configs


def test_out_of_order_rows_dropped_or_marked_and_keys_forgotten_after_their_ttl(cluster: InProcessCluster) -> None:
    """Rows older than their key's version: dropped (never stored), or stored and marked; and a key whose version
    is older than the newest comparison value minus metadataTTL is forgotten once the next segment starts, so a
    late row of it counts as a new key (Pinot's TTL contract: no update arrives later than the TTL)."""
    dropping = late_table(cluster, "dropping", dropOutOfOrderRecord=True)
    marking = late_table(cluster, "marking", outOfOrderRecordColumn="deleted")  # any BOOLEAN column will do
    forgetting = late_table(cluster, "forgetting", metadataTTL=100)
    rows = [{"id": 1, "amount": 1, "ts": 50}, {"id": 1, "amount": 2, "ts": 30}, {"id": 2, "amount": 3, "ts": 10},
            {"id": 1, "amount": 4, "ts": 50}]
    for configs in (dropping, marking, forgetting):
        cluster.produce(configs, rows, key_field="id")
    wait_until(lambda: answer(cluster, "SELECT COUNT(*) FROM marking", skipUpsert="true") == [[4]], 30)
    wait_until(lambda: answer(cluster, "SELECT COUNT(*) FROM dropping", skipUpsert="true") == [[3]], 30)
    for table in ("dropping", "marking"):
        assert answer(cluster, f"SELECT id, amount FROM {table} ORDER BY id") == [[1, 4], [2, 3]]
    assert answer(cluster, "SELECT amount FROM marking WHERE deleted = true", skipUpsert="true") == [[2]]

    # forgetting: the 4 rows filled a segment; the next one starts with keys older than 500 - 100 forgotten
    wait_until(lambda: answer(cluster, "SELECT COUNT(*) FROM forgetting") == [[2]], 30)
    cluster.produce(forgetting, [{"id": 3, "amount": 5, "ts": 500}], key_field="id")
    wait_until(lambda: answer(cluster, "SELECT COUNT(*) FROM forgetting") == [[3]], 30)
    cluster.produce(forgetting, [{"id": 4, "amount": 1, "ts": 500} for _ in range(3)], key_field="id")
    wait_until(lambda: len(cluster.committed_segments("forgetting_REALTIME")) >= 2, 30)
    cluster.produce(forgetting, [{"id": 2, "amount": 6, "ts": 5}], key_field="id")  # older, but 2 is forgotten
    wait_until(lambda: answer(cluster, "SELECT COUNT(*) FROM forgetting WHERE id = 2") == [[2]], 30)
