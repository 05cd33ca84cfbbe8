"""Stream retention expires offsets a lagging replica has not read yet, as separate processes: replica B is
frozen (SIGSTOP) while A consumes on and retention removes offsets of the consuming segment that B has not read.
Then A is frozen and B thawed. B goes on from the earliest offset and reaches its row limit first, at a larger
offset than A will: "largest offset wins" would commit B's copy without the expired rows, which only A holds, and
they would be gone for good. B reports its loss with segmentConsumed, so the controller holds it; thawed, A
commits the complete segment, and B downloads it. Nothing is lost or doubled.

The metadata store is ZooKeeper: a process frozen in the middle of a sqlite write would hold the single file's
lock for as long as it is stopped (docs/metadata-store.md)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import pytest

from cuvee.deploy.local import LocalClusterSpec, down, up
from cuvee.stream import open_admin
from cuvee.stream.log import LogAdmin, TopicSettings
from cuvee.testing.waiting import wait_until
from cuvee.testing.zookeeper import ZooKeeperServer
from tests.e2e.support import FAST, counts, create_id_table, log_stream, produce_ids

TABLE = "expiring"
THRESHOLD = 3_000  # one partition, two replicas on two servers: the segment ends at 3,000 rows
ROWS = 5_500


def _first_segment(ideal: dict[str, dict[str, str]]) -> str:
    return min(ideal, key=lambda name: int(name.split("__")[2]))


def _ideal(http: httpx.Client, controller: str) -> dict[str, dict[str, str]]:
    ideal = http.get(f"{controller}/tables/{TABLE}/idealstate").json()
    return ideal.get("REALTIME", ideal)


def _consumed(http: httpx.Client, server: str) -> int:
    info = http.get(f"{server}/tables/{TABLE}_REALTIME/consumingSegmentsInfo").json()
    return sum(segment["rowsConsumed"] for segment in info["segments"])


def _holding_incomplete(http: httpx.Client, server: str) -> bool:
    """The lagging replica reported its incomplete copy and was told to wait."""
    info = http.get(f"{server}/tables/{TABLE}_REALTIME/consumingSegmentsInfo").json()
    return any(seg["consumerState"] == "HOLDING" and seg["messagesLost"] > 0 for seg in info["segments"])


@pytest.mark.multiprocess
@pytest.mark.zookeeper
@pytest.mark.timeout(300)
def test_a_replica_lagging_behind_retention_never_commits_an_incomplete_copy(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    metadata = zookeeper.zk_uri(f"/retention-{tmp_path.name}", session_timeout=4)
    info = up(LocalClusterSpec(dir=tmp_path, servers=2, metadata=metadata, overrides=FAST))
    http = httpx.Client(timeout=10)
    configs = log_stream(tmp_path, TABLE, flush_rows=THRESHOLD)
    complete_pid, lagging_pid = info["pids"]["server-0"], info["pids"]["server-1"]
    try:
        create_id_table(http, info["controller"], TABLE, configs, partitions=1)
        admin = open_admin(configs)
        assert isinstance(admin, LogAdmin)
        admin.configure_topic(TABLE, TopicSettings(segment_bytes=16_000, retention_bytes=48_000))
        produce_ids(configs, 0, 500)
        wait_until(lambda: all(_consumed(http, url) == 500 for url in info["servers"]), 30, interval=0.1,
                   message="the replicas never consumed the first rows")

        os.kill(lagging_pid, signal.SIGSTOP)
        try:
            produce_ids(configs, 500, 2_500)  # below the threshold: the segment stays open
            # A must hold every row before retention runs, or it would be incomplete too
            wait_until(lambda: _consumed(http, info["servers"][0]) == 2_500, 30, interval=0.1,
                       message="the complete replica never consumed the rows")
            earliest = admin.apply_retention(TABLE)[0]
            assert 500 < earliest < 2_500, f"retention left offsets from {earliest}"
        finally:
            os.kill(complete_pid, signal.SIGSTOP)
            os.kill(lagging_pid, signal.SIGCONT)
        try:
            # enough for B to reach 3,000 rows from the earliest offset (A, frozen, reports nothing meanwhile)
            produce_ids(configs, 2_500, ROWS)
            wait_until(lambda: _holding_incomplete(http, info["servers"][1]), 60, interval=0.2,
                       message="the lagging replica never reported its incomplete copy")
            first = _first_segment(_ideal(http, info["controller"]))
            assert "ONLINE" not in _ideal(http, info["controller"])[first].values()  # nothing committed meanwhile
        finally:
            os.kill(complete_pid, signal.SIGCONT)

        def committed() -> list[str]:
            return sorted(s for s, r in _ideal(http, info["controller"]).items() if r and set(r.values()) == {"ONLINE"})

        wait_until(lambda: len(committed()) >= 1, 60, interval=0.2, message="the first segment never committed")
        first = committed()[0]
        meta = http.get(f"{info['controller']}/segments/{TABLE}/{first}/metadata").json()
        assert (meta["startOffset"], meta["endOffset"], meta["totalDocs"]) == (0, THRESHOLD, THRESHOLD), meta
        wait_until(lambda: counts(http, info["broker"], TABLE) == (ROWS, ROWS), 60, interval=0.2,
                   message=lambda: f"counted {counts(http, info['broker'], TABLE)}")

        def held_crcs() -> list[int]:
            found = []
            for url in info["servers"]:
                for segment in http.get(f"{url}/tables/{TABLE}_REALTIME/segments").json()["segments"]:
                    if segment["segmentName"] == first and not segment["isConsuming"]:
                        found.append(segment["crc"])
            return found

        # the lagging replica ends up serving the committed copy (downloaded), identical to the committer's
        wait_until(lambda: held_crcs() == [meta["crc"]] * 2, 60, interval=0.2, message=lambda: f"{held_crcs()}")
        repair = http.get(f"{info['controller']}/tables/{TABLE}/repairStatus").json()
        assert repair["dataLossEvents"] == 0  # nothing was lost: the complete replica had every row
    finally:
        http.close()
        down(tmp_path)
