"""Broker-side partition pruning (``routing.segmentPrunerTypes: ["partition"]``): pure over a routing, and end to
end on an in-process cluster where two pushed segments hold the even and the odd ids (their min/max overlap, so
only their partitions tell them apart)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cuvee.broker.cluster_view import TableEntry
from cuvee.broker.routing import RoutingTable
from cuvee.broker.segment_pruning import prune_routing
from cuvee.cluster.records import ExternalView
from cuvee.deepstore import open_deepstore
from cuvee.query import TableInfo
from cuvee.segment.archive import ARCHIVE_SUFFIX
from cuvee.segment.partitioning import PartitionSpec, SegmentPartitions
from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until
from tests.offline.support import SCHEMA, build_archive, describe, offline_table, rows
from tests.pruning.helpers import where_of

SPEC = PartitionSpec("i", "Modulo", 2)
ENTRY = TableEntry("t_OFFLINE", TableInfo("t_OFFLINE", ("i",), value_types=(("i", "LONG"),)),
                   pa.schema([("i", pa.int64())]), ExternalView("t_OFFLINE"), partition_spec=SPEC,
                   partitions={"even": SegmentPartitions("i", "Modulo", 2, (0,)),
                               "odd": SegmentPartitions("i", "Modulo", 2, (1,)),
                               "both": SegmentPartitions("i", "Modulo", 2, (0, 1)),
                               "other": SegmentPartitions("i", "Modulo", 4, (1,)), "unknown": None},
                   pruners=frozenset({"partition"}))
ROUTING = RoutingTable(servers={"a": ("both", "even", "unknown"), "b": ("odd", "other")})


def test_segments_whose_partitions_rule_the_query_out_are_not_routed() -> None:
    routing, pruned = prune_routing(ROUTING, where_of("i = 7"), ENTRY.pruning_facts)
    # a segment recorded under another function, or never recorded, stays
    assert (routing.servers, pruned) == ({"a": ("both", "unknown"), "b": ("odd", "other")}, 1)
    routing, pruned = prune_routing(ROUTING, where_of("i IN (2, 4) AND s = 'x'"), ENTRY.pruning_facts)
    assert (routing.servers, pruned) == ({"a": ("both", "even", "unknown"), "b": ("other",)}, 1)
    assert prune_routing(ROUTING, where_of("i > 7"), ENTRY.pruning_facts) == (ROUTING, 0)  # ranges: servers'
    # a consuming segment is pruned by the facts the view has for it (only when its partitions are known: see
    # cuvee.pruning.stream_partitions), like any other
    consuming = dataclasses.replace(ROUTING, consuming=frozenset({"even", "unknown"}))
    assert prune_routing(consuming, where_of("i = 7"), ENTRY.pruning_facts)[0].servers["a"] == ("both", "unknown")


def test_only_a_table_asking_for_partition_pruning_is_pruned_at_the_broker() -> None:
    assert ENTRY.pruning_facts.keys() == {"even", "odd", "both"}
    assert dataclasses.replace(ENTRY, pruners=frozenset({"time"})).pruning_facts == {}
    assert dataclasses.replace(ENTRY, partition_spec=None).pruning_facts == {}


TABLE: dict[str, Any] = {**offline_table(replication=1), "routing": {"segmentPrunerTypes": ["partition"]},
                         "tableIndexConfig": {"segmentPartitionConfig": {"columnPartitionMap": {
                             "id": {"functionName": "Modulo", "numPartitions": 2}}}}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("broker-pruning")
    with InProcessCluster(root, servers=2) as c:
        c.add_schema(SCHEMA)
        c.add_table(TABLE)
        for name, ids in (("even", range(0, 100, 2)), ("odd", range(1, 100, 2))):
            archive = build_archive(root, name, rows(ids, 1_000), TABLE)
            uri = open_deepstore(c.deep_store).put(archive, f"sales_OFFLINE/{name}{ARCHIVE_SUFFIX}")
            pushed = c.http.post(f"{c.controller_url}/v2/segments", params={"tableName": "sales",
                                                                            "tableType": "OFFLINE"},
                                 json={"segments": [describe(archive, uri)]})
            assert pushed.status_code == 200, pushed.text
        wait_until(lambda: c.query("SELECT COUNT(*) FROM sales").get("resultTable", {}).get("rows") == [[100]], 20,
                   message="both segments served")
        yield c


def test_the_broker_asks_no_server_for_a_segment_of_another_partition(cluster: InProcessCluster) -> None:
    answer = cluster.query("SELECT COUNT(*), SUM(id), MIN(country) FROM sales WHERE id IN (7, 9)")
    assert answer["exceptions"] == []
    assert answer["resultTable"]["rows"] == [[2, 16.0, "fr"]]
    assert (answer["numSegmentsPrunedByBroker"], answer["numSegmentsQueried"], answer["numServersQueried"]) == (1, 1, 1)
    answer = cluster.query("SELECT COUNT(*) FROM sales WHERE id = 7 OR id = 8")
    assert answer["resultTable"]["rows"] == [[2]] and answer["numSegmentsPrunedByBroker"] == 0


def test_a_query_every_segment_of_which_is_pruned_answers_typed_and_empty(cluster: InProcessCluster) -> None:
    for sql, rows in (("SELECT country, COUNT(*) FROM sales WHERE id > 500 GROUP BY country", []),
                      ("SELECT COUNT(*), MAX(amount) FROM sales WHERE id > 500", [[0, None]]),
                      ("SELECT id, country FROM sales WHERE id < -1 LIMIT 3", [])):
        answer = cluster.query(sql)
        assert answer["exceptions"] == [] and answer["resultTable"]["rows"] == rows, sql
        assert answer["numSegmentsPrunedByServer"] == 2 and answer["numSegmentsProcessed"] == 0
    answer = cluster.query("SELECT id, country FROM sales WHERE id < -1 LIMIT 3")
    assert answer["resultTable"]["dataSchema"] == {"columnNames": ["id", "country"],
                                                   "columnDataTypes": ["LONG", "STRING"]}
