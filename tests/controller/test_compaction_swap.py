"""The controller's side of an upsert compaction's swap (``POST /segments/{t}/{s}/compacted``), in process: it
reads the compacted archive's own metadata before the swap and refuses a copy that is not what the job claims,
leaving the segment served as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuvee.cluster.records import SegmentRecord, SegmentState, SegmentStatus
from cuvee.cluster.store import ClusterStore
from cuvee.controller.errors import ApiError
from cuvee.controller.segment_push import PushedSegment
from cuvee.deepstore import open_deepstore
from cuvee.metastore import open_metastore
from cuvee.segment.archive import deep_store_key, pack
from tests.segment.test_immutable_builder import build

FULL = "events_REALTIME"
SEGMENT, OTHER = "events__0__3__20261125T1200Z", "events__1__3__20261125T1200Z"
OLD_CRC = 12345
REPLICAS = ("Server_a", "Server_b")


@pytest.fixture
def ctl(tmp_path: Path):
    from cuvee.controller.config import ControllerConfig
    from cuvee.controller.controller import Controller

    deep = tmp_path / "deep"
    deep.mkdir()
    controller = Controller(ControllerConfig(metadata=f"sqlite:///{tmp_path / 'm.db'}", deep_store=deep.as_uri()))
    controller.deep_store = open_deepstore(deep.as_uri())
    controller._store = ClusterStore(open_metastore(f"sqlite:///{tmp_path / 'm.db'}"), "test")  # not started
    controller.store.create_segment(FULL, SegmentRecord(
        SEGMENT, SegmentStatus.DONE, 0, partition=0, sequence=3, start_offset=100, end_offset=106, total_docs=6,
        crc=OLD_CRC, download_uri=controller.deep_store.uri(deep_store_key(FULL, SEGMENT))))
    controller.store.update_ideal_state(FULL, lambda i: i.with_segments_in(SEGMENT, REPLICAS, SegmentState.ONLINE))
    return controller


def _copy(ctl, tmp_path: Path, name: str = SEGMENT, *, end_offset: int = 106, run: str = "run1") -> dict:
    """A compacted copy built and stored in the deep store; returns the claim a job would send for it."""
    segment = build(tmp_path / f"{name}-{run}", name=name, table_name=FULL, start_offset=100, end_offset=end_offset)
    archive = pack(segment.path)
    uri = ctl.deep_store.put(archive, f"{FULL}/{name}.{run}.tar.zst")
    return {"segmentName": name, "downloadUri": uri, "crc": segment.crc, "totalDocs": segment.total_docs,
            "sizeBytes": segment.size_bytes}


def _swap(ctl, claim: dict) -> dict:
    from cuvee.controller.api_compaction import _replace

    pushed = PushedSegment(name=SEGMENT, download_uri=claim["downloadUri"], crc=claim["crc"],
                           total_docs=claim["totalDocs"], size_bytes=claim["sizeBytes"], time_min=None, time_max=None)
    return _replace(ctl, FULL, pushed, OLD_CRC)


def _served_as_before(ctl) -> None:
    record = ctl.store.segment(FULL, SEGMENT).record
    ideal = ctl.store.ideal_state(FULL).record
    assert record.crc == OLD_CRC and record.download_uri.endswith(deep_store_key(FULL, SEGMENT))
    assert ideal.crcs.get(SEGMENT, OLD_CRC) == OLD_CRC
    assert ideal.segments[SEGMENT] == {r: SegmentState.ONLINE for r in REPLICAS}


@pytest.mark.parametrize("wrong, why", [
    ("crc", "its CRC is"),
    ("totalDocs", "docs, not"),
    ("other segment", "it holds segment"),
    ("offsets", "offsets 100..107 are not the segment's 100..106"),
])
def test_a_copy_that_is_not_what_the_job_claims_is_refused_and_the_segment_stays(
        ctl, tmp_path: Path, wrong: str, why: str) -> None:
    if wrong == "other segment":
        claim = {**_copy(ctl, tmp_path, OTHER), "segmentName": SEGMENT}
    elif wrong == "offsets":
        claim = _copy(ctl, tmp_path, end_offset=107)
    else:
        claim = _copy(ctl, tmp_path)
        claim[wrong] += 1
    with pytest.raises(ApiError, match=why) as refused:
        _swap(ctl, claim)
    assert refused.value.status == 400
    _served_as_before(ctl)


def test_an_object_that_is_no_segment_archive_is_refused_without_its_error_text(ctl, tmp_path: Path) -> None:
    junk = tmp_path / "junk"
    junk.write_bytes(b"\x28\xb5\x2f\xfd" + b"not zstd at all" * 10)
    uri = ctl.deep_store.put(junk, f"{FULL}/{SEGMENT}.junk.tar.zst")
    with pytest.raises(ApiError, match="is not a readable segment archive$") as refused:
        _swap(ctl, {"segmentName": SEGMENT, "downloadUri": uri, "crc": 1, "totalDocs": 1, "sizeBytes": 1})
    assert refused.value.status == 400
    _served_as_before(ctl)


def test_the_copy_claimed_is_swapped_in(ctl, tmp_path: Path) -> None:
    claim = _copy(ctl, tmp_path)
    assert "compacted" in _swap(ctl, claim)["status"]
    record = ctl.store.segment(FULL, SEGMENT).record
    assert (record.crc, record.download_uri, record.total_docs) == (claim["crc"], claim["downloadUri"], 6)
    assert ctl.store.ideal_state(FULL).record.crcs[SEGMENT] == claim["crc"]
    assert _swap(ctl, claim)["status"].endswith("is compacted already")  # sent again: done


def _repair_task(ctl):
    from cuvee.controller.repair import RepairTask

    return RepairTask(ctl.store, None, lambda: 0, 0, 60.0, lambda: True)  # type: ignore[arg-type]


def _name_crcs(ctl) -> list:
    ideal = ctl.store.ideal_state(FULL).record
    records = {s: ctl.store.segment(FULL, s).record for s in ideal.segments}
    return _repair_task(ctl).name_crcs(FULL, ideal, records)


def test_a_controller_dying_between_the_record_and_the_ideal_state_is_healed_by_repair(ctl, tmp_path: Path) -> None:
    from cuvee.controller import faults
    from cuvee.controller.repair import NameCrc

    assert _name_crcs(ctl) == []  # a committed segment with no CRC named: left alone
    claim = _copy(ctl, tmp_path)
    faults.FAULTS.add(faults.COMPACTION_AFTER_RECORD)
    with pytest.raises(faults.FaultInjected):
        _swap(ctl, claim)
    assert ctl.store.segment(FULL, SEGMENT).record.crc == claim["crc"]
    assert ctl.store.ideal_state(FULL).record.crcs[SEGMENT] == OLD_CRC  # named before the record moved on

    assert _name_crcs(ctl) == [NameCrc(SEGMENT, OLD_CRC, claim["crc"])]
    ideal = ctl.store.ideal_state(FULL).record
    assert ideal.crcs[SEGMENT] == claim["crc"]  # the replicas reload the copy on record
    assert ideal.segments[SEGMENT] == {r: SegmentState.ONLINE for r in REPLICAS}
    assert _name_crcs(ctl) == []  # nothing left: a second pass changes nothing


def test_the_crc_repair_leaves_consuming_and_unknown_segments_alone() -> None:
    from cuvee.cluster.records import IdealState
    from cuvee.controller.repair import NameCrc, plan_crc_names

    consuming = "events__0__4__20261125T1200Z"
    ideal = IdealState(FULL, {SEGMENT: {"Server_a": SegmentState.ONLINE},
                              consuming: {"Server_a": SegmentState.CONSUMING}},
                       crcs={SEGMENT: 1, consuming: 2, "gone": 3})
    records = {SEGMENT: SegmentRecord(SEGMENT, SegmentStatus.DONE, 0, crc=5),
               consuming: SegmentRecord(consuming, SegmentStatus.IN_PROGRESS, 0, crc=7)}
    assert plan_crc_names(ideal, records) == [NameCrc(SEGMENT, 1, 5)]
    assert plan_crc_names(ideal, {**records, SEGMENT: SegmentRecord(SEGMENT, SegmentStatus.DONE, 0, crc=1)}) == []


def test_a_segment_that_changed_since_it_was_compacted_is_a_conflict_before_the_copy_is_judged(
        ctl, tmp_path: Path) -> None:
    from cuvee.controller.api_compaction import _replace

    claim = {**_copy(ctl, tmp_path), "crc": 1}  # a wrong claim too: the compare-and-set answers first
    pushed = PushedSegment(name=SEGMENT, download_uri=claim["downloadUri"], crc=1, total_docs=claim["totalDocs"],
                           size_bytes=1, time_min=None, time_max=None)
    with pytest.raises(ApiError, match="changed since it was compacted") as refused:
        _replace(ctl, FULL, pushed, OLD_CRC + 1)
    assert refused.value.status == 409  # the job skips the segment rather than failing
    _served_as_before(ctl)
