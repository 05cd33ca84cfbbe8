"""The consume loop of a ConsumingSegment against a real embedded-log topic: end criteria, bad messages, data
lost to retention, pause, stream failure. The controller is scripted to answer HOLD, so the segment stays put."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from cuvee.config import TableConfig
from cuvee.protocol.completion import RequestKind, StopReason, hold
from cuvee.server.consuming import ConsumerConfig, ConsumerState, SegmentCompletionClient
from cuvee.stream import open_admin
from cuvee.stream.log import LogAdmin, TopicSettings
from tests.server.test_consuming_support import (
    FAST,
    TOPIC,
    FakeClock,
    ScriptedController,
    event,
    make_replica,
    produce,
    record,
    schema,
    serving,
    stream_configs,
    table,
    wait_until,
)

K = RequestKind


@pytest.fixture
def controller() -> Iterator[tuple[ScriptedController, SegmentCompletionClient]]:
    fake = ScriptedController(lambda request: hold(request.offset))
    with serving(fake) as service:
        client = SegmentCompletionClient(FAST, leader_url=service.url)
        yield fake, client
        client.close()


def first_consumed(fake: ScriptedController):  # noqa: ANN201 - a SegmentConsumed
    return wait_until(lambda: fake.of(K.SEGMENT_CONSUMED), message="no segmentConsumed")[0]


def test_row_threshold_ends_at_exactly_that_row(tmp_path: Path, log_dir: Path, controller, replicas) -> None:
    fake, client = controller
    produce(log_dir, range(250))
    replica = make_replica(tmp_path, log_dir, record(rows=100), instance="s1", client=client)
    replicas.append(replica)
    replica.segment.start()
    sent = first_consumed(fake)
    assert (sent.offset, sent.rows, sent.reason) == (100, 100, StopReason.ROW_LIMIT)
    assert replica.segment.state is ConsumerState.HOLDING
    assert replica.segment.num_docs == 100
    snap = replica.segment.snapshot()
    assert snap.schema == schema().arrow_schema()
    assert snap.column("id").to_pylist() == list(range(100))
    assert snap.column("tags").to_pylist()[4] == event(4)["tags"]
    assert snap.column("country").type == pa.string()
    info = replica.segment.info()
    assert (info["currentOffset"], info["rowsConsumed"], info["partition"]) == (100, 100, 0)
    assert info["consumerState"] == "HOLDING" and info["badRecords"] == 0
    assert (info["upstreamOffset"], info["recordsLag"]) == (250, 150)  # looked at the stream while behind
    assert set(info["memoryByColumn"]) == set(snap.column_names) and info["memoryBytes"] == sum(
        info["memoryByColumn"].values()) > 0
    assert replica.segment.last_ingestion_ms is not None


def test_bad_messages_are_counted_and_inspectable_and_do_not_count_as_rows(tmp_path: Path, log_dir: Path,
                                                                            controller, replicas) -> None:
    fake, client = controller
    produce(log_dir, range(130), bad_at=(5, 50, 110))
    replica = make_replica(tmp_path, log_dir, record(rows=100), instance="s1", client=client)
    replicas.append(replica)
    replica.segment.start()
    sent = first_consumed(fake)
    # 100 good rows are offsets 0..101 without 5 and 50: the segment ends right after offset 101.
    assert (sent.offset, sent.rows) == (102, 100)
    info = replica.segment.info()
    assert info["badRecords"] == 2  # the bad message at 110 belongs to the next segment
    assert [b["offset"] for b in info["recentBadRecords"]] == [5, 50]
    assert info["recentBadRecords"][0]["rawPrefix"] == "{not json" and info["recentBadRecords"][0]["reason"]
    assert 5 not in replica.segment.snapshot().column("id").to_pylist()


def test_time_threshold_with_a_fake_clock(tmp_path: Path, log_dir: Path, controller, replicas) -> None:
    fake, client = controller
    clock = FakeClock()
    produce(log_dir, range(30))
    replica = make_replica(tmp_path, log_dir, record(rows=1000, time_ms=60_000), instance="s1", client=client,
                           clock=clock)
    replicas.append(replica)
    replica.segment.start()
    wait_until(lambda: replica.segment.num_docs == 30)
    assert fake.requests == [] and replica.segment.state is ConsumerState.CONSUMING
    clock.advance(59)
    produce(log_dir, range(30, 35))
    wait_until(lambda: replica.segment.num_docs == 35)
    assert fake.requests == []
    clock.advance(2)
    sent = first_consumed(fake)
    assert (sent.offset, sent.rows, sent.reason) == (35, 35, StopReason.TIME_LIMIT)


def test_force_commit_ends_at_the_current_offset(tmp_path: Path, log_dir: Path, controller, replicas) -> None:
    fake, client = controller
    produce(log_dir, range(10))
    replica = make_replica(tmp_path, log_dir, record(rows=1000), instance="s1", client=client)
    replicas.append(replica)
    replica.segment.start()
    wait_until(lambda: replica.segment.num_docs == 10)
    replica.segment.force_commit()
    sent = first_consumed(fake)
    assert (sent.offset, sent.rows, sent.reason) == (10, 10, StopReason.FORCE_COMMIT)


def _expire(log_dir: Path) -> int:
    """400 messages, of which retention removes the first ones; returns the earliest offset left."""
    admin = open_admin(stream_configs(log_dir))
    assert isinstance(admin, LogAdmin)
    admin.configure_topic(TOPIC, TopicSettings(segment_bytes=2000, retention_bytes=4000))
    for start in range(0, 400, 20):
        produce(log_dir, range(start, start + 20))
    earliest = admin.apply_retention(TOPIC)[0]
    assert earliest > 0
    return earliest


def test_a_lone_replica_counts_offsets_lost_to_retention_and_goes_on(tmp_path: Path, log_dir: Path,
                                                                     controller, replicas) -> None:
    fake, client = controller
    earliest = _expire(log_dir)
    replica = make_replica(tmp_path, log_dir, record(start=0, rows=400 - earliest), instance="s1", client=client,
                           table_config=table(log_dir, replicas=1))
    replicas.append(replica)
    replica.segment.start()
    sent = first_consumed(fake)
    assert (sent.offset, sent.rows) == (400, 400 - earliest)
    assert replica.segment.info()["messagesLost"] == earliest
    assert replica.segment.snapshot().column("id").to_pylist()[0] == earliest
    assert replica.segment.info()["startOffset"] == earliest


def test_a_replica_that_lost_offsets_to_retention_says_so_when_it_reports(tmp_path: Path, log_dir: Path,
                                                                          controller, replicas) -> None:
    """Its copy is incomplete: segmentConsumed carries how many messages it lost, so the controller can prefer a
    complete replica (which it would otherwise lose to this one's larger end offset)."""
    fake, client = controller
    earliest = _expire(log_dir)
    replica = make_replica(tmp_path, log_dir, record(start=0, rows=400 - earliest), instance="s1", client=client)
    replicas.append(replica)
    replica.segment.start()
    sent = first_consumed(fake)
    assert (sent.offset, sent.rows, sent.messages_lost) == (400, 400 - earliest, earliest) and sent.lossy


def test_paused_consumer_fetches_nothing_until_resumed(tmp_path: Path, log_dir: Path, controller, replicas) -> None:
    fake, client = controller
    produce(log_dir, range(20))
    replica = make_replica(tmp_path, log_dir, record(rows=20), instance="s1", client=client)
    replicas.append(replica)
    replica.segment.set_paused(True)
    replica.segment.start()
    with pytest.raises(AssertionError):
        wait_until(lambda: replica.segment.num_docs > 0, timeout=0.3)
    replica.segment.set_paused(False)
    assert first_consumed(fake).offset == 20


def test_a_stream_that_keeps_failing_makes_the_replica_give_up(tmp_path: Path, controller, replicas) -> None:
    fake, client = controller
    missing_topic_dir = tmp_path / "empty-log"  # the topic does not exist: every fetch fails
    config = ConsumerConfig(**{**FAST.__dict__, "stream_error_retries": 2})
    replica = make_replica(tmp_path, missing_topic_dir, record(rows=10), instance="s1", client=client,
                           config=config)
    replicas.append(replica)
    replica.segment.start()
    stopped = wait_until(lambda: fake.of(K.SEGMENT_STOPPED_CONSUMING))[0]
    assert stopped.offset == 0 and "failed 3 times" in stopped.reason
    wait_until(lambda: replica.segment.state is ConsumerState.ERROR)
    assert "failed" in replica.segment.info()["error"]


def test_the_encoded_snapshot_holds_the_same_rows_as_the_decoded_one(tmp_path: Path, log_dir: Path, controller,
                                                                    replicas) -> None:
    """Queries read the encoded snapshot (dictionary columns left encoded); it must mean the same rows."""
    import pyarrow as pa

    _, client = controller
    produce(log_dir, range(40))
    replica = make_replica(tmp_path, log_dir, record(rows=1000), instance="s1", client=client, clock=FakeClock())
    replicas.append(replica)
    replica.segment.start()
    wait_until(lambda: replica.segment.num_docs == 40)
    encoded = replica.segment.encoded_snapshot()
    decoded = replica.segment.snapshot()
    assert encoded.num_rows == decoded.num_rows == 40
    assert any(pa.types.is_dictionary(f.type) for f in encoded.schema), "nothing was left encoded"
    assert encoded.cast(decoded.schema).equals(decoded)


def test_the_tables_transforms_and_filter_apply_while_consuming(tmp_path: Path, log_dir: Path, controller,
                                                                replicas) -> None:
    """Filtered messages are consumed (the offsets move on) but not kept, and counted; the row limit counts the
    rows kept; transformed columns are what the segment holds."""
    fake, client = controller
    produce(log_dir, range(40))
    doc = table(log_dir).to_json()
    doc["ingestionConfig"] = {"transformConfigs": [{"columnName": "clicks", "transformFunction": "clicks * 100"}],
                              "filterConfig": {"filterFunction": "country = 'fr'"}}
    filtered_table = TableConfig.from_json(doc)
    replica = make_replica(tmp_path, log_dir, record(start=0, rows=21), instance="s1", client=client,
                           table_config=filtered_table)
    replicas.append(replica)
    replica.segment.start()
    sent = first_consumed(fake)
    # ids 0, 4, 8... are 'fr': the 21st kept row is id 27, so the segment ends at offset 28 with 7 rows dropped
    assert (sent.offset, sent.rows) == (28, 21)
    assert replica.segment.info()["rowsFiltered"] == 7
    snapshot = replica.segment.snapshot()
    assert "fr" not in snapshot.column("country").to_pylist()
    assert snapshot.column("clicks").to_pylist()[:3] == [100, 200, 300]  # ids 1, 2, 3


def test_a_transform_failing_on_a_batch_counts_its_rows_as_bad_and_consumption_goes_on(
        tmp_path: Path, log_dir: Path, controller, replicas) -> None:
    fake, client = controller
    produce(log_dir, range(30))
    doc = table(log_dir).to_json()
    doc["ingestionConfig"] = {"transformConfigs": [{"columnName": "clicks", "transformFunction": "clicks + 1"}]}
    replica = make_replica(tmp_path, log_dir, record(start=0, rows=20), instance="s1", client=client,
                           table_config=TableConfig.from_json(doc))
    replicas.append(replica)
    transformer = replica.segment._consumer.transformer
    assert transformer is not None
    real, calls = transformer.apply, []

    def fail_first(batch, offsets):  # type: ignore[no-untyped-def]
        calls.append(len(offsets))
        if len(calls) == 1:
            raise RuntimeError("the expression blew up")
        return real(batch, offsets)

    transformer.apply = fail_first  # type: ignore[method-assign]
    replica.segment.start()
    wait_until(lambda: replica.segment.info()["badRecords"] == 30, message="the failed batch was not counted")
    produce(log_dir, range(30, 60))
    sent = first_consumed(fake)
    failed = calls[0]
    assert replica.segment.info()["badRecords"] == failed
    assert "ingestion transform failed: RuntimeError" in replica.segment.info()["recentBadRecords"][0]["reason"]
    assert sent.rows == 20 and sent.offset == failed + 20  # the failed batch's offsets were consumed, not kept


def test_a_row_whose_transform_fails_is_a_bad_record_by_default(tmp_path: Path, log_dir: Path, controller,  # type: ignore[no-untyped-def]
                                                                 replicas) -> None:
    """Pinot's continueOnError false (its default): the row is skipped and counted, with the reason, not kept with
    NULL (what continueOnError true does)."""
    fake, client = controller
    produce(log_dir, range(30))
    doc = table(log_dir).to_json()
    doc["ingestionConfig"] = {"transformConfigs": [{
        "columnName": "clicks", "transformFunction": "CAST(CASE WHEN country = 'fr' THEN 'x' ELSE '1' END AS BIGINT)"}]}
    replica = make_replica(tmp_path, log_dir, record(start=0, rows=20), instance="s1", client=client,
                           table_config=TableConfig.from_json(doc))
    replicas.append(replica)
    replica.segment.start()
    sent = first_consumed(fake)
    # ids 0, 4, 8... are 'fr': the 20th row kept is id 26, so the segment ends at offset 27 with 7 bad records
    assert (sent.offset, sent.rows) == (27, 20)
    info = replica.segment.info()
    assert info["badRecords"] == 7 and info["rowsFiltered"] == 0
    assert info["recentBadRecords"][0]["reason"].startswith("ingestion transform failed: the transform of column "
                                                            "'clicks'")
    assert set(replica.segment.snapshot().column("clicks").to_pylist()) == {1}
