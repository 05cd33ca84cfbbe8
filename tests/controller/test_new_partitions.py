"""A topic that grows: the new partition's rows produced before the repair pass noticed it are all queryable.

A table that starts at ``largest`` (the default) must not start a *new partition* there too: everything produced to
it between its creation and the next repair pass (up to a repair interval) would never be consumed (Pinot's #7741).
"""

from __future__ import annotations

from pathlib import Path

import orjson

from cuvee.stream import open_admin, open_producer
from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until

SCHEMA = {
    "schemaName": "grown",
    "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}],
    "metricFieldSpecs": [{"name": "amount", "dataType": "LONG"}],
}


def test_rows_produced_to_a_new_partition_before_the_repair_pass_are_all_consumed(tmp_path: Path) -> None:
    # the repair runs only when the test asks: the rows below are produced while no pass can see the partition
    with InProcessCluster(tmp_path, servers=2, controller={"repair_interval_seconds": 3600}) as cluster:
        cluster.create_topic("grown", 2)
        cluster.add_schema(SCHEMA)
        configs = cluster.log_stream_configs("grown", **{"stream.log.consumer.prop.auto.offset.reset": "largest",
                                                        "realtime.segment.flush.threshold.rows": "1000"})
        cluster.add_table({"tableName": "grown", "tableType": "REALTIME",
                           "segmentsConfig": {"replicasPerPartition": "2"},
                           "tableIndexConfig": {"streamConfigs": configs}})
        with open_producer(configs) as producer:
            for i in range(20):
                producer.produce(orjson.dumps({"id": i, "amount": 1}), partition=i % 2)
            producer.flush()
        wait_until(lambda: cluster.scalar("SELECT COUNT(*) FROM grown") == 20, 20)

        with open_admin(configs) as admin:
            admin.set_partition_count("grown", 3)
        with open_producer(configs) as producer:  # before any repair pass: these rows are the partition's first
            for i in range(20, 57):
                producer.produce(orjson.dumps({"id": i, "amount": 10}), partition=2)
            producer.flush()

        placed = cluster.controller.repair.run_once()
        assert [p.partition for p in placed] == [2]
        store = cluster.controller.store
        first = next(s for s in store.segment_names("grown_REALTIME") if s.split("__")[1] == "2")
        assert store.segment("grown_REALTIME", first).record.schema_version == 0  # built under the schema then
        wait_until(lambda: cluster.scalar("SELECT COUNT(*) FROM grown") == 57, 20,
                   message="rows produced to the new partition before the repair pass were skipped")
        assert cluster.scalar("SELECT SUM(amount) FROM grown") == 20 + 37 * 10
