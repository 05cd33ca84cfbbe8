"""Operator controls on a live in-process cluster: consumingSegmentsInfo, forceCommit, pause and resume."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from cuvee.controller import faults
from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until

TABLE = "ops"
SCHEMA = {
    "schemaName": TABLE,
    "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}],
    "metricFieldSpecs": [{"name": "v", "dataType": "LONG"}],
}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[InProcessCluster]:
    with InProcessCluster(tmp_path, servers=2) as cluster:
        cluster.create_topic(TABLE, 2)
        cluster.add_schema(SCHEMA)
        # A threshold far above what the tests produce: segments end only when told to.
        configs = cluster.log_stream_configs(TABLE, **{"realtime.segment.flush.threshold.rows": "1000000"})
        # loadMode: a Pinot hint Cuvee accepts and lists back (cuvee status shows it)
        cluster.add_table({"tableName": TABLE, "tableType": "REALTIME", "segmentsConfig": {"replicasPerPartition": "2"},
                           "tableIndexConfig": {"streamConfigs": configs, "loadMode": "MMAP"}})
        cluster.configs = configs  # type: ignore[attr-defined]
        yield cluster


def _produce(cluster: InProcessCluster, start: int, end: int) -> None:
    cluster.produce(cluster.configs, ({"id": i, "v": 1} for i in range(start, end)), key_field="id")  # type: ignore[attr-defined]


def _count(cluster: InProcessCluster) -> int:
    return int(cluster.scalar(f"SELECT COUNT(*) FROM {TABLE}"))


def test_consuming_segments_info_reports_offsets_and_lag(cluster: InProcessCluster) -> None:
    _produce(cluster, 0, 400)
    wait_until(lambda: _count(cluster) == 400, 30)

    def caught_up() -> dict | None:
        info = cluster.http.get(f"{cluster.controller_url}/tables/{TABLE}/consumingSegmentsInfo").json()
        return info if _segments(info) and sum(_lags(info)) == 0 else None

    info = wait_until(caught_up, 30, interval=0.1, message="lag never reached 0")
    assert len(info["_segmentToConsumingInfoMap"]) == 2, info  # one consuming segment per partition
    assert len(_segments(info)) == 4, info  # on each of its 2 replicas
    assert _current_offsets(info) == _upstream_offsets(info)
    assert sum(_upstream_offsets(info)) == 2 * 400  # each partition's offset, counted once per replica


def test_force_commit_commits_the_consuming_segments_and_ingestion_goes_on(cluster: InProcessCluster) -> None:
    _produce(cluster, 0, 300)
    wait_until(lambda: _count(cluster) == 300, 30)
    response = cluster.http.post(f"{cluster.controller_url}/tables/{TABLE}/forceCommit")
    assert response.status_code < 300, response.text
    wait_until(lambda: len(cluster.committed_segments(TABLE)) == 2, 30, message="force commit did not commit")
    for segment in cluster.committed_segments(TABLE):
        assert cluster.segment_metadata(TABLE, segment)["status"] == "DONE"
    _produce(cluster, 300, 500)
    wait_until(lambda: _count(cluster) == 500, 30, message="ingestion did not go on after the force commit")
    assert cluster.scalar(f"SELECT COUNT(DISTINCT id) FROM {TABLE}") == 500
    cluster.check_invariants(f"{TABLE}_REALTIME", replicas=2)


def test_pause_stops_ingestion_and_resume_continues(cluster: InProcessCluster) -> None:
    _produce(cluster, 0, 100)
    wait_until(lambda: _count(cluster) == 100, 30)
    paused = cluster.http.post(f"{cluster.controller_url}/tables/{TABLE}/pauseConsumption")
    assert paused.status_code < 300 and paused.json().get("paused") is True, paused.text

    def consumers_paused() -> bool:
        info = cluster.http.get(f"{cluster.controller_url}/tables/{TABLE}/consumingSegmentsInfo").json()
        states = {s.get("consumerState") for s in _segments(info)}
        return bool(states) and states <= {"PAUSED"}

    wait_until(consumers_paused, 30, message="consumers never reported PAUSED")
    _produce(cluster, 100, 200)
    # Lag grows while paused: the rows are in the stream but not consumed (by either of the 2 replicas).
    wait_until(lambda: sum(_lags(cluster.http.get(
        f"{cluster.controller_url}/tables/{TABLE}/consumingSegmentsInfo").json())) == 2 * 100, 30)
    assert _count(cluster) == 100
    resumed = cluster.http.post(f"{cluster.controller_url}/tables/{TABLE}/resumeConsumption")
    assert resumed.status_code < 300 and resumed.json().get("paused") is False, resumed.text
    wait_until(lambda: _count(cluster) == 200, 30, message="ingestion did not resume")


# consumingSegmentsInfo shape helpers: one entry per (segment, server).
def _segments(info: dict) -> list[dict]:
    out = []
    for segment, servers in info.get("_segmentToConsumingInfoMap", {}).items():
        for entry in servers:
            out.append({"segment": segment, **entry})
    return out


def _lags(info: dict) -> list[int]:
    return [int(e["recordsLag"]) for e in _segments(info)]


def _current_offsets(info: dict) -> list[int]:
    return [int(e["currentOffset"]) for e in _segments(info)]


def _upstream_offsets(info: dict) -> list[int]:
    return [int(e["latestUpstreamOffset"]) for e in _segments(info)]


def test_a_segment_every_replica_stopped_consuming_leaves_the_partition_queryable_and_heals_exactly(
        cluster: InProcessCluster) -> None:
    """Both replicas of partition 0's consuming segment stop consuming (a stream outage, or a stop sent under
    their ids): the answer says that segment is unavailable and counts everything else; repair re-creates the
    consuming segment from the abandoned one's start offset, the abandoned one leaves the ideal state, and counts
    are exact again, also for rows produced afterwards."""
    from cuvee.protocol.completion import SegmentStoppedConsuming
    from cuvee.protocol.completion_http import completion_path
    from cuvee.protocol.segment_name import LLCSegmentName

    _produce(cluster, 0, 300)
    wait_until(lambda: _count(cluster) == 300, 30)
    assert cluster.http.post(f"{cluster.controller_url}/tables/{TABLE}/forceCommit").status_code < 300
    wait_until(lambda: len(cluster.committed_segments(TABLE)) == 2, 30, message="force commit did not commit")
    _produce(cluster, 300, 500)
    wait_until(lambda: _count(cluster) == 500, 30)
    ideal = cluster.ideal_state(f"{TABLE}_REALTIME")
    [stuck] = [s for s, replicas in ideal.items()
               if LLCSegmentName.parse(s).partition == 0 and set(replicas.values()) == {"CONSUMING"}]
    for instance in ideal[stuck]:
        stop = SegmentStoppedConsuming(LLCSegmentName.parse(stuck), instance, 0, "stream unreachable")
        assert cluster.http.post(cluster.controller_url + completion_path(stop.kind), json=stop.to_dict()).json()[
            "status"] == "PROCESSED"

    def degraded() -> dict | None:
        answer = cluster.query(f"SELECT COUNT(*) FROM {TABLE}")
        # every answer meanwhile says a segment is missing (235 while servers drop it, then 305: OFFLINE everywhere)
        assert answer["exceptions"] or answer["resultTable"]["rows"][0][0] == 500, answer
        return answer if any(e["errorCode"] == 305 and stuck in e["message"] for e in answer["exceptions"]) else None

    answer = wait_until(degraded, 30, message="the stopped segment was never reported unavailable")
    status = cluster.http.get(f"{cluster.controller_url}/tables/{TABLE}/status").json()
    words = {p["partition"]: p["health"] for p in status["partitions"]}
    assert (words, status["health"]) == ({0: "STOPPED", 1: "HEALTHY"}, "STOPPED"), status
    assert answer["partialResult"] is True
    assert 300 <= answer["resultTable"]["rows"][0][0] < 500  # the committed rows and partition 1 still count

    cluster.controller.repair.run_once()
    assert stuck not in cluster.ideal_state(f"{TABLE}_REALTIME")

    def healed() -> bool:
        answer = cluster.query(f"SELECT COUNT(*) FROM {TABLE}")
        return not answer["exceptions"] and answer["resultTable"]["rows"][0][0] == 500

    wait_until(healed, 60, message="the partition never healed")
    wait_until(lambda: cluster.http.get(f"{cluster.controller_url}/tables/{TABLE}/status").json()["health"]
               == "HEALTHY", 30, message="the status never said HEALTHY again")
    _produce(cluster, 500, 700)
    wait_until(lambda: _count(cluster) == 700, 30, message="ingestion did not go on after the repair")
    assert cluster.scalar(f"SELECT COUNT(DISTINCT id) FROM {TABLE}") == 700


def test_cuvee_status_prints_each_partition_with_offsets_and_health(cluster: InProcessCluster,
                                                                     capsys: pytest.CaptureFixture[str],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import orjson

    from cuvee.cli.main import main

    _produce(cluster, 0, 200)
    wait_until(lambda: _count(cluster) == 200, 30)

    def reported() -> dict | None:
        assert main(["status", "--controller", cluster.controller_url, "--json"]) == 0
        [status] = orjson.loads(capsys.readouterr().out)
        rows = sum(r["rowsConsumed"] or 0 for p in status["partitions"] for r in p["consuming"])
        return status if rows == 2 * 200 else None  # each row on both replicas

    status = wait_until(reported, 30, message="the status never showed every row consumed")
    assert status["table"] == f"{TABLE}_REALTIME" and status["health"] == "HEALTHY"
    [note] = status["configNotes"]
    assert (note["config"], note["path"], note["support"]) == ("REALTIME", "/tableIndexConfig/loadMode", "hint")
    for partition in status["partitions"]:
        assert len(partition["consuming"]) == 2 and partition["latestStatus"] == "IN_PROGRESS"
        for replica in partition["consuming"]:
            assert replica["currentOffset"] == partition["latestUpstreamOffset"] and replica["recordsLag"] == 0
            assert replica["memoryBytes"] > 0 and replica["state"] == "CONSUMING"
    monkeypatch.setenv("COLUMNS", "250")  # a terminal wide enough for every column
    assert main(["status", "--controller", cluster.controller_url, "--table", TABLE]) == 0
    printed = capsys.readouterr().out
    assert f"{TABLE}_REALTIME: HEALTHY" in printed and "CONSUMING" in printed
    assert "config keys accepted without effect" in printed and "/tableIndexConfig/loadMode" in printed


def test_a_committed_segment_tells_its_story_in_order(cluster: InProcessCluster, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller's protocol answers and commit, and both servers' starts, builds and the committer's upload,
    read back from the metadata store (where they outlive the roles that wrote them) in time order."""
    from cuvee.cli.main import main

    _produce(cluster, 0, 120)
    wait_until(lambda: _count(cluster) == 120, 30)
    assert cluster.http.post(f"{cluster.controller_url}/tables/{TABLE}/forceCommit").status_code < 300
    wait_until(lambda: len(cluster.committed_segments(TABLE)) == 2, 30, message="force commit did not commit")
    segment = sorted(cluster.committed_segments(TABLE))[0]

    def told() -> list | None:
        events = cluster.http.get(f"{cluster.controller_url}/segments/{TABLE}/{segment}/story").json()["events"]
        kinds = [e["kind"] for e in events]
        online = [e for e in events if e["kind"] == "transition" and e["toState"] == "ONLINE"]
        return events if "committed" in kinds and kinds.count("built") >= 2 and len(online) == 2 else None

    events = wait_until(told, 30, message="the story never told the commit")
    kinds = [e["kind"] for e in events]
    assert [e["timeMs"] for e in events] == sorted(e["timeMs"] for e in events)
    assert kinds.count("consumingStarted") == 2 and {e["role"] for e in events} == {"controller", "server"}
    order = [kinds.index(k) for k in ("consumingStarted", "segmentConsumed", "segmentCommitStart", "uploaded",
                                      "committed")]
    assert order == sorted(order), kinds
    [committed] = [e for e in events if e["kind"] == "committed"]
    assert committed["endOffset"] == cluster.segment_metadata(TABLE, segment)["endOffset"]
    transitions = [(e["instance"], e["fromState"], e["toState"]) for e in events if e["kind"] == "transition"]
    assert sorted(t[1:] for t in transitions) == [("CONSUMING", "ONLINE")] * 2 + [("OFFLINE", "CONSUMING")] * 2
    assert kinds.index("transition") < kinds.index("segmentConsumed")  # OFFLINE -> CONSUMING came first
    commit_end = [e for e in events if e["kind"] == "segmentCommitEnd"]
    assert commit_end and commit_end[-1]["answer"] == "COMMIT_SUCCESS"
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["status", "--controller", cluster.controller_url, "--segment", segment]) == 0
    printed = capsys.readouterr().out
    assert f"story of {segment}" in printed and "segmentCommitStart" in printed and "committed" in printed


def _paused_and_committed(cluster: InProcessCluster) -> list[str]:
    """Pause, commit every consuming segment, and wait until no partition consumes; returns the committed ones."""
    ctl = cluster.controller_url
    assert cluster.http.post(f"{ctl}/tables/{TABLE}/pauseConsumption").json()["pauseFlag"] is True
    committed = cluster.http.post(f"{ctl}/tables/{TABLE}/forceCommit").json()["segments"]
    wait_until(lambda: not cluster.http.get(f"{ctl}/tables/{TABLE}/pauseStatus").json()["consumingSegments"], 30,
               message="the consuming segments never committed")
    return committed


def _ends(cluster: InProcessCluster, segments: list[str]) -> dict[int, int]:
    return {int(s.split("__")[1]): cluster.segment_metadata(TABLE, s)["endOffset"] for s in segments}


def test_resume_from_largest_skips_the_rows_produced_while_paused(cluster: InProcessCluster) -> None:
    _produce(cluster, 0, 100)
    wait_until(lambda: _count(cluster) == 100, 30)
    committed = _paused_and_committed(cluster)
    _produce(cluster, 100, 150)  # produced while paused: skipped
    resumed = cluster.http.post(f"{cluster.controller_url}/tables/{TABLE}/resumeConsumption",
                                params={"consumeFrom": "LARGEST"})
    assert resumed.status_code == 200, resumed.text
    body = resumed.json()
    assert body["pauseFlag"] is False and body["paused"] is False and len(body["createdSegments"]) == 2
    ends = _ends(cluster, committed)
    for segment in body["createdSegments"]:  # each starts at the stream's end, past the rows produced meanwhile
        meta = cluster.segment_metadata(TABLE, segment)
        assert meta["startOffset"] > ends[int(segment.split("__")[1])]
    assert sum(cluster.segment_metadata(TABLE, s)["startOffset"] - ends[int(s.split("__")[1])]
               for s in body["createdSegments"]) == 50
    _produce(cluster, 150, 180)
    wait_until(lambda: _count(cluster) == 130, 30)
    assert cluster.scalar(f"SELECT COUNT(*) FROM {TABLE} WHERE id BETWEEN 100 AND 149") == 0
    assert cluster.scalar(f"SELECT COUNT(DISTINCT id) FROM {TABLE}") == 130
    segment = body["createdSegments"][0]

    def told() -> dict | None:
        events = cluster.http.get(f"{cluster.controller_url}/segments/{TABLE}/{segment}/story").json()["events"]
        return next((e for e in events if e["kind"] == "consumeFrom"), None)

    event = wait_until(told, 10, message="the story never told the skip")
    assert event["consumeFrom"] == "largest" and event["offsetsSkipped"] == event["startOffset"] - event[
        "previousEndOffset"] > 0


def test_resume_from_smallest_reads_the_stream_again_from_its_start(cluster: InProcessCluster) -> None:
    _produce(cluster, 0, 100)
    wait_until(lambda: _count(cluster) == 100, 30)
    _paused_and_committed(cluster)
    _produce(cluster, 100, 120)
    resumed = cluster.http.post(f"{cluster.controller_url}/tables/{TABLE}/resumeConsumption?consumeFrom=smallest")
    assert resumed.status_code == 200, resumed.text
    for segment in resumed.json()["createdSegments"]:
        assert cluster.segment_metadata(TABLE, segment)["startOffset"] == 0
    # the 100 committed rows, and all 120 of the stream once more: re-read, as asked
    wait_until(lambda: _count(cluster) == 220, 30, message=lambda: f"count {_count(cluster)}")
    assert cluster.scalar(f"SELECT COUNT(DISTINCT id) FROM {TABLE}") == 120


def test_consume_from_restarts_a_next_segment_a_pause_left_between_commit_steps(cluster: InProcessCluster) -> None:
    """A pause landing between a commit's steps 2 and 3 leaves the next segment's record (from the committed end
    offset) in no ideal state. ``consumeFrom=smallest`` reuses it, and must start it where it says: the stored
    record, the story and the rows all re-read from the stream's start (the record kept its old start offset while
    the answer and story said 0)."""
    ctl, store, table = cluster.controller_url, cluster.controller.store, f"{TABLE}_REALTIME"
    _produce(cluster, 0, 100)
    wait_until(lambda: _count(cluster) == 100, 30)

    def pause_now() -> None:  # an operator's pauseConsumption, landing between the first commit's steps 2 and 3
        store.update_ideal_state(table, lambda ideal: dataclasses.replace(ideal, paused=True))

    faults.HOOKS[faults.COMMIT_AFTER_STEP2] = pause_now
    try:
        assert cluster.http.post(f"{ctl}/tables/{TABLE}/forceCommit").status_code == 200
        wait_until(lambda: cluster.http.get(f"{ctl}/tables/{TABLE}/pauseStatus").json()["paused"], 30,
                   message="no commit reached step 2")
    finally:
        faults.reset()
    # the other partition's commit may have placed its successor before the pause: commit it too (while paused,
    # a commit places none), as an operator preparing consumeFrom does
    assert cluster.http.post(f"{ctl}/tables/{TABLE}/forceCommit").status_code == 200
    wait_until(lambda: not cluster.http.get(f"{ctl}/tables/{TABLE}/pauseStatus").json()["consumingSegments"], 30,
               message="the consuming segments never committed")
    ideal = cluster.ideal_state(table)
    leftovers = [s for s in store.segment_names(table) if s not in ideal]
    assert leftovers and all(store.segment(table, s).record.start_offset > 0 for s in leftovers)
    resumed = cluster.http.post(f"{ctl}/tables/{TABLE}/resumeConsumption", params={"consumeFrom": "smallest"})
    assert resumed.status_code == 200, resumed.text
    created = resumed.json()["createdSegments"]
    assert set(leftovers) <= set(created) and len(created) == 2
    for segment in created:
        assert cluster.segment_metadata(TABLE, segment)["startOffset"] == 0
        events = cluster.http.get(f"{ctl}/segments/{TABLE}/{segment}/story").json()["events"]
        told = next(e for e in events if e["kind"] == "consumeFrom")
        assert told["startOffset"] == 0 and told["offsetsReRead"] == told["previousEndOffset"] > 0
    wait_until(lambda: _count(cluster) == 200, 30, message=lambda: f"count {_count(cluster)}")


def test_consume_from_is_refused_where_it_cannot_apply(cluster: InProcessCluster) -> None:
    ctl = cluster.controller_url
    _produce(cluster, 0, 20)
    wait_until(lambda: _count(cluster) == 20, 30)
    bad = cluster.http.post(f"{ctl}/tables/{TABLE}/resumeConsumption?consumeFrom=oldest")
    assert bad.status_code == 400 and "consumeFrom param 'oldest' is not valid" in bad.json()["error"]
    not_paused = cluster.http.post(f"{ctl}/tables/{TABLE}/resumeConsumption?consumeFrom=largest")
    assert not_paused.status_code == 409 and "not paused" in not_paused.json()["error"]
    assert cluster.http.post(f"{ctl}/tables/{TABLE}/pauseConsumption").status_code == 200
    consuming = cluster.http.post(f"{ctl}/tables/{TABLE}/resumeConsumption?consumeFrom=largest")
    assert consuming.status_code == 409 and "still consume" in consuming.json()["error"]
    assert cluster.http.get(f"{ctl}/tables/{TABLE}/pauseStatus").json()["paused"] is True  # nothing changed


def test_force_commit_of_one_partition_commits_only_that_partition(cluster: InProcessCluster) -> None:
    ctl = cluster.controller_url
    _produce(cluster, 0, 200)
    wait_until(lambda: _count(cluster) == 200, 30)
    before = {s.split("__")[1]: s for s, r in cluster.ideal_state(f"{TABLE}_REALTIME").items()
              if "CONSUMING" in r.values()}
    for params, fragment in [({"partitions": "0,5"}, "no partition(s) 5"), ({"partitions": "x"}, "not a partition"),
                             ({"segments": "nope"}, "not consuming: nope"),
                             ({"partitions": "0", "segments": before["0"]}, "not both")]:
        refused = cluster.http.post(f"{ctl}/tables/{TABLE}/forceCommit", params=params)
        assert refused.status_code == 400 and fragment in refused.json()["error"], refused.text
    answer = cluster.http.post(f"{ctl}/tables/{TABLE}/forceCommit", params={"partitions": "1"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["forceCommitStatus"] == "SUCCESS" and body["segments"] == [before["1"]]
    wait_until(lambda: cluster.committed_segments(TABLE) == [before["1"]], 30, message="partition 1 never committed")
    ideal = cluster.ideal_state(f"{TABLE}_REALTIME")
    assert set(ideal[before["0"]].values()) == {"CONSUMING"}  # partition 0 still consumes the same segment
    status = cluster.http.get(f"{ctl}/tables/forceCommitStatus/{body['forceCommitJobId']}").json()
    assert status["numberOfSegmentsYetToBeCommitted"] == 0 and status["jobType"] == "FORCE_COMMIT"
    by_segment = cluster.http.post(f"{ctl}/tables/{TABLE}/forceCommit", params={"segments": before["0"]}).json()
    assert by_segment["segments"] == [before["0"]]
    wait_until(lambda: before["0"] in cluster.committed_segments(TABLE), 30)
    assert _count(cluster) == 200
    cluster.check_invariants(f"{TABLE}_REALTIME", replicas=2)
