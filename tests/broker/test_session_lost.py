"""A broker whose metadata-store session expires (LOST) answers from its last snapshot meanwhile, then opens a new
session: registered and live again, with routing read from the new session. The periodic re-read is set far away,
so the watches moved to the new session are what bring the new segments (and a new table) into routing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cuvee.cluster.store import ClusterStore
from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until
from tests.controller.test_session_lost import (
    RAW,
    SCHEMA,
    TABLE,
    THRESHOLD,
    count,
    expire_session,
    is_live,
    lost_cluster,
    produce,
    wait_renewed,
)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[InProcessCluster, ClusterStore]]:
    with lost_cluster(tmp_path, broker={"routing_poll_seconds": 60}) as running:
        yield running


def test_broker_routes_from_a_new_session_after_its_session_expires(
    cluster: tuple[InProcessCluster, ClusterStore],
) -> None:
    running, observer = cluster
    broker = running.broker
    url = broker.url
    produce(running, 0, 50)
    wait_until(lambda: count(running) == 50, 30, message="rows never served before the outage")

    expire_session(broker.metastore, observer, broker.instance_id)  # type: ignore[arg-type]
    assert count(running) == 50  # the last snapshot still routes

    wait_renewed(broker.metastore, observer, broker.instance_id)  # type: ignore[arg-type]
    assert broker.url == url

    # A commit changes the external view: seg 0 ONLINE, seg 1 CONSUMING. Routing from the old view would ask only
    # for seg 0 and miss the rows past the threshold.
    produce(running, 50, THRESHOLD + 30)
    wait_until(lambda: len(running.committed_segments(TABLE)) == 1, 30, message="no commit")
    wait_until(lambda: count(running) == THRESHOLD + 30, 30, message=lambda: f"served {count(running)} rows")

    # A table created after the renewal is routed too (the table-list watch lives on the new session).
    other = "lost2"
    running.create_topic(other, 1)
    running.add_schema({**SCHEMA, "schemaName": other})
    configs = running.log_stream_configs(other)
    running.add_table({"tableName": other, "tableType": "REALTIME", "segmentsConfig": {"replicasPerPartition": "1"},
                       "tableIndexConfig": {"streamConfigs": configs}})
    running.produce(configs, ({"id": i, "v": 1} for i in range(7)), key_field="id")

    def other_count() -> int:
        answer = running.query(f"SELECT COUNT(*) FROM {other}")
        return -1 if answer.get("exceptions") else int(answer["resultTable"]["rows"][0][0])

    wait_until(lambda: other_count() == 7, 30, message="the new table is not routed")
    assert RAW != other
