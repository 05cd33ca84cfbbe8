"""The plain copies committed segments keep for queries stay under the server's byte budget: copies idle long
enough make room (least recently read first), a copy finding no room is declined for a while (no thrashing), a
copy bigger than the budget not kept (its column scanned encoded), a segment's copies gone with it."""

from __future__ import annotations

import gc
from pathlib import Path

import pyarrow as pa

from cuvee.server.plain_copies import Kept, PlainCopies
from cuvee.server.queryable import CommittedSegment
from tests.broker.helpers import committed, event_rows, segment_name


class _Owner:
    """What copies belong to: any object a weak reference can follow (a CommittedSegment on a server)."""


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_least_recently_read_idle_copy_makes_room_and_one_too_big_is_not_kept() -> None:
    clock = _Clock()
    copies = PlainCopies(max_bytes=3 * 800, min_idle_seconds=60, clock=clock)
    owner = _Owner()
    token = copies.owner(owner)
    columns = {name: pa.array(range(100), pa.int64()) for name in "abcd"}  # 800 bytes each
    for name in "abc":
        assert copies.put(token, name, columns[name]) is Kept.KEPT
    clock.now += 61  # all idle
    assert copies.get(token, "a") is not None  # read: now the most recent
    assert copies.put(token, "d", columns["d"]) is Kept.KEPT  # b, the least recently read, goes
    assert copies.get(token, "b") is None and copies.get(token, "a") is not None and copies.bytes == 2400
    assert copies.put(token, "e", pa.array(range(400), pa.int64())) is Kept.TOO_BIG  # over the whole budget
    assert copies.bytes == 2400
    del owner
    gc.collect()
    assert copies.bytes == 0 and copies.get(token, "a") is None  # the owner's copies left with it


def test_a_segment_scans_a_column_encoded_when_its_copy_cannot_be_kept(tmp_path: Path) -> None:
    rows = event_rows(400, 0, 7)
    built = committed(tmp_path, segment_name(0, 0), rows).segment
    none_kept = CommittedSegment(built, PlainCopies(max_bytes=0))  # a server with plain_copy_bytes = 0
    shown = none_kept.with_plain(none_kept.query_table().select(["id"]))
    assert pa.types.is_dictionary(shown.schema.field("id").type)
    assert shown.column("id").to_pylist() == rows.column("id").to_pylist()


def test_copies_in_use_are_not_evicted_and_a_declined_column_waits_before_it_is_decoded_again() -> None:
    """More columns read than the budget holds (a ``SELECT *`` at 10M rows): plain LRU would decode and evict on
    every query. The kept copies stay; the others are declined and scanned encoded until the budget's copies idle."""
    clock = _Clock()
    copies = PlainCopies(max_bytes=2 * 800, min_idle_seconds=60, clock=clock)
    owner = _Owner()
    token = copies.owner(owner)
    column = pa.array(range(100), pa.int64())
    assert copies.put(token, "a", column) is Kept.KEPT and copies.put(token, "b", column) is Kept.KEPT
    clock.now += 30  # read half a minute ago: in use
    assert copies.worth_decoding(token, "c")
    assert copies.put(token, "c", column) is Kept.DECLINED
    assert copies.get(token, "a") is not None and copies.get(token, "b") is not None and copies.bytes == 1600
    assert not copies.worth_decoding(token, "c")  # declined lately: scanned encoded, not decoded again
    clock.now += 59
    assert not copies.worth_decoding(token, "c")
    assert copies.get(token, "a") is not None  # a is read again; b stays idle
    clock.now += 2  # b idle for 61 s, c declined 61 s ago
    assert copies.worth_decoding(token, "c")
    assert copies.put(token, "c", column) is Kept.KEPT  # b, idle, makes room; a, read lately, stays
    assert copies.get(token, "b") is None and copies.get(token, "a") is not None


def test_a_segment_over_its_budget_scans_declined_columns_encoded(tmp_path: Path) -> None:
    """Through a committed segment whose budget holds one of the two columns read: the first query scans both
    decoded (it decoded them), the next the kept one decoded and the declined one encoded (the same values)."""
    rows = event_rows(400, 0, 7)
    built = committed(tmp_path, segment_name(0, 0), rows).segment
    clock = _Clock()
    city_bytes = built.column("city", decode=True).nbytes
    segment = CommittedSegment(built, PlainCopies(max_bytes=city_bytes + 100, min_idle_seconds=60, clock=clock))
    first = segment.with_plain(segment.query_table().select(["city", "id"]))
    assert not any(pa.types.is_dictionary(field.type) for field in first.schema)
    again = segment.with_plain(segment.query_table().select(["city", "id"]))
    assert not pa.types.is_dictionary(again.schema.field("city").type)  # kept
    assert pa.types.is_dictionary(again.schema.field("id").type)  # declined: encoded, not decoded again
    assert again.column("id").to_pylist() == rows.column("id").to_pylist()
    assert again.column("city").to_pylist() == rows.column("city").to_pylist()


def test_a_query_over_kept_and_declined_copies_reads_each_column_in_one_form(tmp_path: Path) -> None:
    """The budget holds one segment's copy of ``city`` and declines the other's: the query reads ``city`` encoded
    in both (zero-copy) instead of decoding the encoded part on every query, and answers the same."""
    from cuvee.protocol.query import ServerQueryRequest
    from cuvee.server.query_executor import QueryExecutor, _alike
    from cuvee.server.registry import SegmentRegistry
    from tests.broker.helpers import TABLE

    rows = [event_rows(400, 0, 7), event_rows(300, 400, 8)]
    built = [committed(tmp_path, segment_name(0, i), part).segment for i, part in enumerate(rows)]
    copies = PlainCopies(max_bytes=built[0].column("city", decode=True).nbytes + 100, min_idle_seconds=60,
                         clock=_Clock())
    segments = [CommittedSegment(segment, copies) for segment in built]
    views = [s.with_plain(s.query_table().select(["city"])) for s in segments]  # the first read decodes both
    views = [s.with_plain(s.query_table().select(["city"])) for s in segments]  # the second: one kept, one not
    assert [pa.types.is_dictionary(v.schema.field("city").type) for v in views] == [False, True]
    request = ServerQueryRequest("1", TABLE, "SELECT city FROM cuvee_segments", ("a", "b"), 1000)
    assert all(pa.types.is_dictionary(v.schema.field("city").type) for v in _alike(views, segments, request))
    registry = SegmentRegistry()
    for segment in segments:
        registry.put(TABLE, segment)
    result, stats = QueryExecutor(registry).execute(ServerQueryRequest(
        "1", TABLE, "SELECT city, count(*) AS n FROM cuvee_segments GROUP BY city ORDER BY city NULLS LAST",
        tuple(s.name for s in segments), 10_000))
    assert stats.exceptions == () and result is not None
    every = pa.concat_tables(rows).group_by("city").aggregate([("id", "count")]).sort_by("city")
    assert sorted(result.to_pylist(), key=lambda r: (r["city"] is None, r["city"] or "")) == \
        sorted(({"city": r["city"], "n": r["id_count"]} for r in every.to_pylist()),
               key=lambda r: (r["city"] is None, r["city"] or ""))


def test_a_consuming_segments_plain_column_keeps_the_join_as_before(tmp_path: Path) -> None:
    """With a consuming segment's plain column in the query, the committed copies stay (the encoded parts are
    decoded to join them, as before): swapping the copies out would decode every committed part instead."""
    from cuvee.protocol.query import ServerQueryRequest
    from cuvee.server.query_executor import _alike
    from tests.broker.helpers import TABLE, MutableView

    rows = [event_rows(400, 0, 7), event_rows(300, 400, 8)]
    built = [committed(tmp_path, segment_name(0, i), part).segment for i, part in enumerate(rows)]
    copies = PlainCopies(max_bytes=built[0].column("city", decode=True).nbytes + 100, min_idle_seconds=60,
                         clock=_Clock())
    segments = [CommittedSegment(segment, copies) for segment in built]
    for _ in range(2):
        views = [s.with_plain(s.query_table().select(["city"])) for s in segments]
    consuming = MutableView(segment_name(0, 2), event_rows(50, 700, 9), last_ingestion_ms=1)
    views.append(consuming.to_arrow().select(["city"]))
    assert not pa.types.is_dictionary(views[2].schema.field("city").type)
    request = ServerQueryRequest("1", TABLE, "SELECT city FROM cuvee_segments", ("a", "b", "c"), 1000)
    assert _alike(views, [*segments, consuming], request) == views
