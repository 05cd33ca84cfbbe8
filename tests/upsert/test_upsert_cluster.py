"""Upsert through the broker on an in-process cluster (2 servers, 2 replicas, frequent commits): the seed's
AccountBalance example, and counts that equal the keys produced at every poll while segments commit."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cuvee.protocol.segment_name import LLCSegmentName
from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until
from tests.upsert.collisions import colliding_longs
from tests.upsert.replica_hooks import held, preferred

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
        cluster.configs = upsert_table(  # type: ignore[attr-defined]
            cluster, SCHEMA, partitions=2, flush_rows=60, routing={"instanceSelectorType": "strictReplicaGroup"})
        cluster.deleting = upsert_table(cluster, DELETING_SCHEMA, flush_rows=7,  # type: ignore[attr-defined]
                                        deleteRecordColumn="deleted")
        yield cluster


def upsert_table(cluster: InProcessCluster, schema: dict[str, Any], *, partitions: int = 1, flush_rows: int,
                 routing: dict[str, str] | None = None, mode: str = "FULL", **upsert: object) -> dict[str, str]:
    """A topic, ``schema`` and a 2-replica upsert table of the same name over it; returns its stream configs."""
    name = schema["schemaName"]
    cluster.create_topic(name, partitions)
    cluster.add_schema(schema)
    configs = cluster.log_stream_configs(name, **{"realtime.segment.flush.threshold.rows": str(flush_rows)})
    cluster.add_table({"tableName": name, "tableType": "REALTIME",
                       "segmentsConfig": {"replicasPerPartition": "2", "timeColumnName": "ts"},
                       "tableIndexConfig": {"streamConfigs": configs},
                       **({"routing": routing} if routing else {}),
                       "upsertConfig": {"mode": mode, **upsert}})
    return configs


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
        seen_detail: list[Any] = []

        def converged() -> bool:
            doc = cluster.query(f"SELECT COUNT(*), SUM(balance) FROM {TABLE} WHERE user LIKE 'u%'")
            assert not doc.get("exceptions"), doc["exceptions"]
            count, total = doc["resultTable"]["rows"][0]
            seen.append(int(count))
            if int(count) != len(users):  # what the broker saw, for a rare CI failure (stop 18)
                seen_detail.append({k: v for k, v in doc.items() if k != "resultTable"})
            return int(count) == len(users) and int(total) == sum(produced.values())

        wait_until(converged, 60, interval=0.05, message=f"version {version} never became the only one")
        assert all(n <= len(users) for n in seen), f"a key was counted twice: {seen}"
        if version > 1:
            assert all(n == len(users) for n in seen), f"a key was missing while updating: {seen} {seen_detail[:1]}"
    assert len(cluster.committed_segments(TABLE)) >= 4
    distinct = answer(cluster, f"SELECT COUNT(DISTINCT user) FROM {TABLE} WHERE user LIKE 'u%'")[0][0]
    assert distinct == len(users)


LAGGING_SCHEMA = {
    "schemaName": "lagging",
    "dimensionFieldSpecs": [{"name": "k", "dataType": "STRING"}],
    "metricFieldSpecs": [{"name": "v", "dataType": "LONG"}],
    "dateTimeFieldSpecs": [{"name": "ts", "dataType": "LONG", "format": "1:MILLISECONDS:EPOCH",
                            "granularity": "1:MILLISECONDS"}],
    "primaryKeyColumns": ["k"],
}


def test_a_key_never_vanishes_when_a_lagging_replica_lists_its_consuming_segment(cluster: InProcessCluster) -> None:
    """The race behind a rare failure of the test above under load, made deterministic. A replica lists its next
    consuming segment CONSUMING before it reads a row of it (its upsert gate waits for the previous segment to be
    served committed there). Routing then chose afresh between the replicas serving the most segments, a set that
    had just grown, and its hash could move the partition from the replica that showed every key to the lagging
    one: the keys whose only version was in that segment vanished until it caught up. Here the replica the hash
    prefers is held, first before it starts segment 1 (only the other one lists it), then at its gate."""
    flush = 4  # one partition: each segment ends after 4 rows
    configs = upsert_table(cluster, LAGGING_SCHEMA, flush_rows=flush)
    table = "lagging_REALTIME"
    lagging = preferred(cluster, "lagging")
    ahead = next(server for server in cluster.servers if server is not lagging)
    rows = [{"k": f"k{i}", "v": i, "ts": 1} for i in range(flush + 3)]  # segment 0 commits; 3 keys in segment 1

    def count() -> int:
        return int(answer(cluster, "SELECT COUNT(*) FROM lagging")[0][0])

    def listing_segment_1() -> set[str]:
        entry = cluster.broker.view.snapshot.tables.get(table)
        return set() if entry is None else {instance for name, replicas in entry.view.segments.items()
                                            if LLCSegmentName.parse(name).sequence == 1 for instance in replicas}

    with held(lagging.transitions, table, sequence=1) as (start, gate):
        cluster.produce(configs, rows, key_field="k")
        wait_until(lambda: listing_segment_1() == {ahead.instance_id}, 30, message="segment 1 never listed")
        # read from the replica ahead, the only one serving all of the partition
        wait_until(lambda: count() == len(rows), 30, message="the replica ahead never showed every key")
        start.set()
        wait_until(lambda: listing_segment_1() == {ahead.instance_id, lagging.instance_id}, 30,
                   message="the lagging replica never listed segment 1")
        seen = [count() for _ in range(5)]
        assert seen == [len(rows)] * 5, f"keys vanished once the lagging replica listed segment 1: {seen}"
        gate.set()
        wait_until(lambda: sum(c.num_docs for c in lagging.transitions.consuming(table)) == len(rows) - flush, 30,
                   message="the lagging replica never read segment 1")
        assert count() == len(rows)


def test_skip_upsert_sees_every_version(cluster: InProcessCluster) -> None:
    """Runs after the test above: 400 rows of 80 keys (and the example's rows, outside u%)."""
    sql = f"SELECT COUNT(*) FROM {TABLE} WHERE user LIKE 'u%'"
    last: list[Any] = []

    def every_version() -> bool:
        doc = cluster.query(sql, skipUpsert="true")
        last[:] = [doc]
        return not doc.get("exceptions") and doc["resultTable"]["rows"] == [[400]]

    def diagnosis() -> str:  # a rare CI failure (stop 18) never said what it saw: say it, with the routing
        routing = cluster.http.get(f"{cluster.broker_url}/debug/routingTable/{TABLE}").json()
        return f"last answer {last[0] if last else None}; routing {routing}"

    wait_until(every_version, 30, message=diagnosis)
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
    wait_until(lambda: answer(cluster, f"SELECT COUNT(*) FROM {DELETING}", skipUpsert="true") == [[27]], 30)


def late_table(cluster: InProcessCluster, name: str, **upsert: object) -> dict[str, str]:
    return upsert_table(cluster, {**DELETING_SCHEMA, "schemaName": name}, flush_rows=4, **upsert)


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
    wait_until(lambda: answer(cluster, "SELECT amount FROM marking WHERE deleted = true", skipUpsert="true")
               == [[2]], 30)

    # forgetting: the 4 rows filled a segment; the next one starts with keys older than 500 - 100 forgotten
    wait_until(lambda: answer(cluster, "SELECT COUNT(*) FROM forgetting") == [[2]], 30)
    cluster.produce(forgetting, [{"id": 3, "amount": 5, "ts": 500}], key_field="id")
    wait_until(lambda: answer(cluster, "SELECT COUNT(*) FROM forgetting") == [[3]], 30)
    cluster.produce(forgetting, [{"id": 4, "amount": 1, "ts": 500} for _ in range(3)], key_field="id")
    wait_until(lambda: len(cluster.committed_segments("forgetting_REALTIME")) >= 2, 30)
    cluster.produce(forgetting, [{"id": 2, "amount": 6, "ts": 5}], key_field="id")  # older, but 2 is forgotten
    wait_until(lambda: answer(cluster, "SELECT COUNT(*) FROM forgetting WHERE id = 2") == [[2]], 30)


PARTIAL_SCHEMA = {
    "schemaName": "merged",
    "dimensionFieldSpecs": [{"name": "id", "dataType": "INT"}, {"name": "city", "dataType": "STRING"},
                            {"name": "first_city", "dataType": "STRING"},
                            {"name": "tags", "dataType": "STRING", "singleValueField": False},
                            {"name": "events", "dataType": "STRING", "singleValueField": False}],
    "metricFieldSpecs": [{"name": "clicks", "dataType": "LONG"}, {"name": "best", "dataType": "LONG"}],
    "dateTimeFieldSpecs": [{"name": "ts", "dataType": "LONG", "format": "1:MILLISECONDS:EPOCH",
                            "granularity": "1:MILLISECONDS"}],
    "primaryKeyColumns": ["id"],
}


def test_partial_upsert_merges_every_strategy_across_batches_and_commits(cluster: InProcessCluster) -> None:
    """Segments of 3 rows: a key's previous version is in the same batch, the consuming segment or a committed
    one. A late row (ts 0) is stored as it came and never merged into the key."""
    configs = upsert_table(cluster, PARTIAL_SCHEMA, flush_rows=3, mode="PARTIAL",
                           defaultPartialUpsertStrategy="OVERWRITE",
                           partialUpsertStrategies={"clicks": "INCREMENT", "best": "MAX", "first_city": "IGNORE",
                                                    "tags": "UNION", "events": "APPEND"})

    def row(key: int, ts: int, clicks: int, best: int, city: str | None, first: str, tags: list[str],
            events: list[str]) -> dict:  # type: ignore[type-arg]
        return {"id": key, "ts": ts, "clicks": clicks, "best": best, "city": city, "first_city": first,
                "tags": tags, "events": events}

    cluster.produce(configs, [row(1, 1, 1, 5, "a", "a", ["x"], ["e1"]), row(2, 1, 10, 1, "b", "b", ["y"], ["e1"])],
                    key_field="id")
    sql = "SELECT id, clicks, best, city, first_city, tags, events FROM merged ORDER BY id"
    wait_until(lambda: len(answer(cluster, sql)) == 2, 30)
    cluster.produce(configs, [row(1, 2, 2, 3, None, "z", ["w", "x"], ["e2"]),
                              row(1, 0, 100, 100, "late", "late", ["late"], ["late"]),
                              row(2, 3, 5, 7, "c", "q", ["y"], ["e3"]),
                              row(1, 4, 3, 4, "d", "y", ["v"], ["e4"])], key_field="id")
    expected = [[1, 6, 5, "d", "a", ["v", "w", "x"], ["e1", "e2", "e4"]],
                [2, 15, 7, "c", "b", ["y"], ["e1", "e3"]]]
    wait_until(lambda: answer(cluster, sql) == expected, 30, message=lambda: f"merged: {answer(cluster, sql)}")
    wait_until(lambda: answer(cluster, "SELECT COUNT(*) FROM merged", skipUpsert="true") == [[6]], 30)
    wait_until(lambda: len(cluster.committed_segments("merged_REALTIME")) == 2, 30)  # both full segments
    assert answer(cluster, sql) == expected  # the same from the committed copies


def test_the_worked_example_of_docs_upsert_md(cluster: InProcessCluster) -> None:
    """examples/accounts/ as docs/upsert.md walks through it (its stream moved to this cluster's log)."""
    example = Path(__file__).resolve().parents[2] / "examples" / "accounts"
    schema = json.loads((example / "schema.json").read_text())
    table = json.loads((example / "table.json").read_text())
    local = cluster.log_stream_configs("accounts")
    table["tableIndexConfig"]["streamConfigs"]["stream.log.dir"] = local["stream.log.dir"]
    configs = table["tableIndexConfig"]["streamConfigs"]
    cluster.create_topic("accounts", 2)
    cluster.add_schema(schema)
    cluster.add_table(table)

    def produce_file(name: str) -> None:
        rows = [json.loads(line) for line in (example / name).read_text().splitlines() if line.strip()]
        cluster.produce(configs, rows, key_field="account")

    sql = "SELECT account, balance FROM accounts ORDER BY account"
    produce_file("balances.jsonl")
    wait_until(lambda: answer(cluster, sql) == [["abc-12", 100], ["abc-13", 102], ["abc-14", 50]], 30)
    produce_file("updates.jsonl")
    wait_until(lambda: answer(cluster, sql) == [["abc-12", 200], ["abc-13", 102]], 30)
    wait_until(lambda: answer(cluster, "SELECT COUNT(*) FROM accounts", skipUpsert="true") == [[6]], 30)


PAIRS_SCHEMA = {
    "schemaName": "pairs",
    "dimensionFieldSpecs": [{"name": "a", "dataType": "LONG"}, {"name": "b", "dataType": "LONG"}],
    "metricFieldSpecs": [{"name": "n", "dataType": "LONG"}],
    "dateTimeFieldSpecs": [{"name": "ts", "dataType": "LONG", "format": "1:MILLISECONDS:EPOCH",
                            "granularity": "1:MILLISECONDS"}],
    "primaryKeyColumns": ["a", "b"],
}


def test_keys_sharing_a_64_bit_hash_and_md5_keys_through_the_broker(cluster: InProcessCluster) -> None:
    """hashFunction NONE: two (LONG, LONG) keys with one 64-bit hash are two keys across a commit; MD5: keys are
    Pinot's 128-bit hashes. Each server's key map shows what a key costs; hashFunction cannot change."""
    (a1, b1), (a2, b2) = colliding_longs()
    pairs = upsert_table(cluster, PAIRS_SCHEMA, flush_rows=3)
    cluster.produce(pairs, [{"a": a1, "b": b1, "n": 1, "ts": 1}, {"a": a2, "b": b2, "n": 2, "ts": 1},
                            {"a": a1, "b": b1, "n": 3, "ts": 2}, {"a": 7, "b": 8, "n": 4, "ts": 1},
                            {"a": a2, "b": b2, "n": 5, "ts": 0}], key_field="a")  # late for its own key
    sql = "SELECT a, b, n FROM pairs ORDER BY a"
    expected = [[a1, b1, 3], [a2, b2, 2], [7, 8, 4]]
    wait_until(lambda: answer(cluster, sql) == expected, 30, message=lambda: f"pairs: {answer(cluster, sql)}")
    wait_until(lambda: len(cluster.committed_segments("pairs_REALTIME")) == 1, 30)
    assert answer(cluster, sql) == expected

    md5_schema = {**PAIRS_SCHEMA, "schemaName": "hashed"}
    hashed = upsert_table(cluster, md5_schema, flush_rows=3, hashFunction="MD5")
    cluster.produce(hashed, [{"a": a1, "b": b1, "n": 1, "ts": 1}, {"a": a2, "b": b2, "n": 2, "ts": 1},
                             {"a": a1, "b": b1, "n": 3, "ts": 2}], key_field="a")
    wait_until(lambda: answer(cluster, "SELECT a, n FROM hashed ORDER BY a") == [[a1, 3], [a2, 2]], 30)

    for table, per_key in (("pairs_REALTIME", 24 + 16), ("hashed_REALTIME", 32)):
        for server in cluster.servers:
            stats = cluster.http.get(f"{server.url}/tables/{table}/upsert").json()
            assert stats["partitions"]["0"]["bytesPerKey"] == per_key, (table, stats)
    config = cluster.http.get(f"{cluster.controller_url}/tables/hashed").json()["REALTIME"]
    config["upsertConfig"]["hashFunction"] = "MURMUR3"
    refused = cluster.http.put(f"{cluster.controller_url}/tables/hashed", json=config)
    assert refused.status_code == 400 and "hashFunction cannot change" in refused.json()["error"]


VIRTUAL_SCHEMA = {
    "schemaName": "vcups",
    "dimensionFieldSpecs": [{"name": "id", "dataType": "INT"}],
    "metricFieldSpecs": [{"name": "v", "dataType": "LONG"}],
    "dateTimeFieldSpecs": [{"name": "ts", "dataType": "LONG", "format": "1:MILLISECONDS:EPOCH",
                            "granularity": "1:MILLISECONDS"}],
    "primaryKeyColumns": ["id"],
}


def test_virtual_columns_name_the_valid_version_of_each_key(cluster: InProcessCluster) -> None:
    """``$segmentName`` and ``$docId`` of an upsert table's rows are where each key's valid version is stored: one
    partition, segments of 20 rows, three versions of 30 keys in order, so the latest version of key ``i`` is the
    message at offset 60 + i: segment sequence (60 + i) // 20, doc (60 + i) % 20 (committed for i < 20, consuming
    after). The valid docs are read as a mask, never the valid-row cache's taken rows (whose positions moved)."""
    configs = upsert_table(cluster, VIRTUAL_SCHEMA, flush_rows=20)
    rows = [{"id": i, "v": version, "ts": version} for version in (1, 2, 3) for i in range(30)]
    cluster.produce(configs, rows, key_field="id")
    wait_until(lambda: answer(cluster, "SELECT COUNT(*), MIN(v) FROM vcups") == [[30, 3]], 30)
    wait_until(lambda: len(cluster.committed_segments("vcups")) >= 4, 30)
    for _ in range(2):  # the second read of a committed segment's valid docs is the one the cache would serve
        found = answer(cluster, "SELECT id, v, $segmentName, $docId FROM vcups ORDER BY id LIMIT 100")
        assert [row[0] for row in found] == list(range(30))
        for key, version, segment, doc in found:
            assert version == 3
            assert (LLCSegmentName.parse(segment).sequence, doc) == divmod(60 + key, 20), (key, segment, doc)
    counts = answer(cluster, "SELECT $segmentName, COUNT(*) FROM vcups GROUP BY 1 ORDER BY 1 LIMIT 10")
    assert [(LLCSegmentName.parse(s).sequence, n) for s, n in counts] == [(3, 20), (4, 10)]
