"""GAPFILL in Pinot's four query shapes, on the parking-lot data of Pinot's gapfill documentation: the answers the
documentation shows, computed here by the planner's source query (split over servers), the gapfill and the outer
aggregation; and the arguments Pinot refuses."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from cuvee.query import QueryError, QueryErrorCode, TableInfo, merge_partials, plan_sql, run_server_step
from cuvee.query.gapfill import finish, mentions_gapfill, plan_gapfill

PARKING = pa.schema([("lotId", pa.string()), ("event_time", pa.int64()), ("is_occupied", pa.int32())])
INFO = TableInfo("parking_data", tuple(PARKING.names), number_columns=frozenset({"event_time", "is_occupied"}))
_EVENTS = [("P1", "09:01", 1), ("P2", "09:17", 1), ("P1", "09:33", 0), ("P1", "09:47", 1), ("P3", "10:05", 1),
           ("P2", "10:06", 0), ("P2", "10:16", 1), ("P2", "10:31", 0), ("P3", "11:17", 0), ("P1", "11:54", 0)]


def _millis(clock: str) -> int:
    hours, minutes = clock.split(":")
    moment = dt.datetime(2021, 10, 1, int(hours), int(minutes), tzinfo=dt.timezone.utc)
    return int(moment.timestamp() * 1000)


ROWS = pa.table({"lotId": [e[0] for e in _EVENTS], "event_time": [_millis(e[1]) for e in _EVENTS],
                 "is_occupied": pa.array([e[2] for e in _EVENTS], pa.int32())}, schema=PARKING)
FORMAT = "1:MILLISECONDS:SIMPLE_DATE_FORMAT:yyyy-MM-dd HH:mm:ss.SSS"
BUCKET = f"DATETIMECONVERT(event_time, '1:MILLISECONDS:EPOCH', '{FORMAT}', '30:MINUTES')"
WHERE = "WHERE event_time >= 1633078800000 AND event_time <= 1633089600000"
GAPFILL = "'{fmt}', '2021-10-01 09:00:00.000', '2021-10-01 12:00:00.000', '30:MINUTES'".format(fmt=FORMAT)
INNER_AGGREGATE = (f"SELECT {BUCKET} AS time_col, lotId, lastWithTime(is_occupied, event_time, 'INT') AS status "
                   f"FROM parking_data {WHERE} GROUP BY 1, 2 ORDER BY 1 LIMIT 100")


def _resolve(name: str) -> TableInfo | None:
    return INFO if name.lower() == "parking_data" else None


def run(sql: str) -> tuple[list[tuple], tuple[str, ...]]:
    """``sql`` as the broker runs it: its source query over two servers' rows, then the gapfill."""
    query = plan_gapfill(sql)
    assert query is not None
    plan = plan_sql(query.source_sql, _resolve)
    partials = [run_server_step(plan, [part]) for part in (ROWS.slice(0, 5), ROWS.slice(5))]
    answer = merge_partials(plan, partials, PARKING).rename_columns(list(plan.column_names))
    table, names = finish(query, answer)
    return [tuple(r.values()) for r in table.to_pylist()], names


def _t(clock: str) -> str:
    return f"2021-10-01 {clock}:00.000"


def test_aggregate_gapfill_aggregate_counts_occupied_lots_per_bucket() -> None:
    sql = (f"SELECT time_col, SUM(status) AS occupied_slots_count FROM (SELECT GAPFILL(time_col, {GAPFILL}, "
           f"FILL(status, 'FILL_PREVIOUS_VALUE'), TIMESERIESON(lotId)), lotId, status FROM ({INNER_AGGREGATE}) "
           f"LIMIT 100) GROUP BY 1 LIMIT 100")
    rows, names = run(sql)
    assert names == ("time_col", "occupied_slots_count")
    assert rows == [(_t("09:00"), 2.0), (_t("09:30"), 2.0), (_t("10:00"), 3.0), (_t("10:30"), 2.0),
                    (_t("11:00"), 1.0), (_t("11:30"), 0.0)]  # the documentation's answer


def test_aggregate_gapfill_fills_each_lot_in_each_bucket() -> None:
    sql = (f"SELECT GAPFILL(time_col, {GAPFILL}, FILL(status, 'FILL_PREVIOUS_VALUE'), TIMESERIESON(lotId)), "
           f"lotId, status FROM ({INNER_AGGREGATE}) LIMIT 100")
    rows, names = run(sql)
    assert names == ("time_col", "lotId", "status")
    table = {(t, lot): status for t, lot, status in rows}
    assert len(rows) == 18 == len(table)
    expected = {"09:00": (1, 1, 0), "09:30": (1, 1, 0), "10:00": (1, 1, 1), "10:30": (1, 0, 1), "11:00": (1, 0, 0),
                "11:30": (0, 0, 0)}
    assert {(t, lot): s for t, lot, s in rows} == {
        (_t(clock), lot): value for clock, values in expected.items() for lot, value in zip(("P1", "P2", "P3"), values)}
    assert [t for t, _, _ in rows] == sorted(t for t, _, _ in rows), "bucket by bucket"


def test_select_gapfill_keeps_every_row_and_fills_the_missing_lots() -> None:
    sql = (f"SELECT GAPFILL({BUCKET}, {GAPFILL}, FILL(is_occupied, 'FILL_PREVIOUS_VALUE'), TIMESERIESON(lotId)) "
           f"AS time_col, lotId, is_occupied FROM parking_data {WHERE} ORDER BY 1 LIMIT 100")
    rows, names = run(sql)
    assert names == ("time_col", "lotId", "is_occupied")
    assert len(rows) == 20  # the documentation's 20 rows: the 10 events and 10 filled ones
    by_bucket: dict[str, list[tuple[str, int]]] = {}
    for t, lot, occupied in rows:
        by_bucket.setdefault(t, []).append((lot, occupied))
    assert sorted(by_bucket[_t("09:00")]) == [("P1", 1), ("P2", 1), ("P3", 0)]
    assert sorted(by_bucket[_t("09:30")]) == [("P1", 0), ("P1", 1), ("P2", 1), ("P3", 0)]
    assert sorted(by_bucket[_t("11:30")]) == [("P1", 0), ("P2", 0), ("P3", 0)]


def test_gapfill_aggregate_sums_the_gapfilled_rows() -> None:
    sql = (f"SELECT time_col, SUM(is_occupied) AS occupied_slots_count FROM (SELECT GAPFILL({BUCKET}, {GAPFILL}, "
           f"FILL(is_occupied, 'FILL_PREVIOUS_VALUE'), TIMESERIESON(lotId)) AS time_col, lotId, is_occupied "
           f"FROM parking_data {WHERE} ORDER BY 1 LIMIT 100) GROUP BY 1 LIMIT 100")
    rows, _ = run(sql)
    # each bucket's rows: its events and its filled lots (the 09:30 bucket has two P1 events: 0 then 1)
    assert rows == [(_t("09:00"), 2.0), (_t("09:30"), 2.0), (_t("10:00"), 3.0), (_t("10:30"), 2.0),
                    (_t("11:00"), 1.0), (_t("11:30"), 0.0)]


def test_the_gapfill_select_may_order_by_its_time_column_ascending() -> None:
    """The order the gapfilled rows come in anyway: accepted, with the same answer."""
    base = (f"SELECT GAPFILL(time_col, {GAPFILL}, FILL(status, 'FILL_PREVIOUS_VALUE'), TIMESERIESON(lotId)), "
            f"lotId, status FROM ({INNER_AGGREGATE})")
    assert run(base + " ORDER BY time_col LIMIT 100") == run(base + " ORDER BY 1 ASC LIMIT 100") == \
        run(base + " LIMIT 100")
    aliased = base.replace("TIMESERIESON(lotId)), ", "TIMESERIESON(lotId)) AS g, ")
    assert run(aliased + " ORDER BY g LIMIT 100")[0] == run(base + " LIMIT 100")[0]  # by the item's alias


def test_default_fill_limit_and_an_aggregation_window() -> None:
    base = (f"SELECT GAPFILL(time_col, {GAPFILL}, FILL(status, 'FILL_DEFAULT_VALUE'), TIMESERIESON(lotId)), "
            f"lotId, status FROM ({INNER_AGGREGATE})")
    rows, _ = run(base + " LIMIT 100")
    assert {s for t, lot, s in rows if (t, lot) == (_t("09:30"), "P2")} == {0}  # the default, not P2's 1
    assert len(run(base + " LIMIT 7")[0]) == 7
    assert len(run(base)[0]) == 10  # Pinot's default LIMIT
    hourly = (f"SELECT time_col, COUNT(*) AS n FROM (SELECT GAPFILL(time_col, {GAPFILL[:-1]}', '1:HOURS', "
              f"FILL(status, 'FILL_PREVIOUS_VALUE'), TIMESERIESON(lotId)), lotId, status FROM ({INNER_AGGREGATE}) "
              f"LIMIT 100) GROUP BY 1 LIMIT 100")
    assert run(hourly)[0] == [(_t("09:00"), 6), (_t("10:00"), 6), (_t("11:00"), 6)]


@pytest.mark.parametrize(("sql", "words"), [
    ("SELECT GAPFILL(event_time, '1:MILLISECONDS:EPOCH', '0', '10', '1:MILLISECONDS') FROM parking_data",
     "TIMESERIESON"),
    ("SELECT GAPFILL(event_time, '1:MILLISECONDS:EPOCH', '0', '10') FROM parking_data", "GAPFILL takes"),
    ("SELECT GAPFILL(event_time, '1:LIGHTYEARS:EPOCH', '0', '10', '1:MILLISECONDS', TIMESERIESON(lotId)) "
     "FROM parking_data", "LIGHTYEARS"),
    ("SELECT GAPFILL(event_time, '1:MILLISECONDS:EPOCH', '10', '0', '1:MILLISECONDS', TIMESERIESON(lotId)) "
     "FROM parking_data", "after its start"),
    ("SELECT GAPFILL(event_time, '1:MILLISECONDS:EPOCH', '0', '100000000', '1:MILLISECONDS', TIMESERIESON(lotId)) "
     "FROM parking_data", "at most 100000"),
    ("SELECT GAPFILL(event_time, '1:MILLISECONDS:EPOCH', '0', '10', '1:MILLISECONDS', FILL(is_occupied, 'LAST'), "
     "TIMESERIESON(lotId)) FROM parking_data", "FILL's type"),
    ("SELECT GAPFILL(event_time, '1:MILLISECONDS:EPOCH', '0', '10', '1:MILLISECONDS', LATER(lotId), "
     "TIMESERIESON(lotId)) FROM parking_data", "does not take LATER"),
    ("SELECT COUNT(*) FROM parking_data WHERE GAPFILL(event_time) > 0", "select item"),
    # below a millisecond the buckets would be 0 ms apart (a division by zero, 450, before)
    ("SELECT GAPFILL(event_time, '1:MILLISECONDS:EPOCH', '0', '10', '1:MICROSECONDS', TIMESERIESON(lotId)) "
     "FROM parking_data", "whole number of milliseconds"),
    ("SELECT GAPFILL(event_time, '1:MILLISECONDS:EPOCH', '0', '10', '1:MILLISECONDS', '1:NANOSECONDS', "
     "TIMESERIESON(lotId)) FROM parking_data", "whole number of milliseconds"),
    # Pinot filters (and orders) the gapfilled rows with these; dropping them answered other rows (before)
    (f"SELECT GAPFILL(time_col, {GAPFILL}, FILL(status, 'FILL_PREVIOUS_VALUE'), TIMESERIESON(lotId)), lotId, status "
     f"FROM ({INNER_AGGREGATE}) WHERE status = 1 LIMIT 100", "WHERE in the GAPFILL select"),
    (f"SELECT time_col, COUNT(*) FROM (SELECT GAPFILL(time_col, {GAPFILL}, FILL(status, 'FILL_PREVIOUS_VALUE'), "
     f"TIMESERIESON(lotId)), lotId, status FROM ({INNER_AGGREGATE}) WHERE lotId = 'P1' LIMIT 100) GROUP BY 1",
     "WHERE in the GAPFILL select"),
    (f"SELECT GAPFILL(time_col, {GAPFILL}, FILL(status, 'FILL_PREVIOUS_VALUE'), TIMESERIESON(lotId)), lotId, status "
     f"FROM ({INNER_AGGREGATE}) ORDER BY status DESC LIMIT 100", "only be its time column"),
    (f"SELECT GAPFILL(time_col, {GAPFILL}, FILL(status, 'FILL_PREVIOUS_VALUE'), TIMESERIESON(lotId)), lotId, status "
     f"FROM ({INNER_AGGREGATE}) ORDER BY 1 DESC LIMIT 100", "only be its time column"),
])
def test_bad_gapfill_queries_are_refused_with_150(sql: str, words: str) -> None:
    assert mentions_gapfill(sql)
    with pytest.raises(QueryError) as caught:
        plan_gapfill(sql)
    assert caught.value.code == QueryErrorCode.SQL_PARSING
    assert words in caught.value.message


def test_queries_without_gapfill_are_left_alone() -> None:
    assert not mentions_gapfill("SELECT COUNT(*) FROM parking_data")
    assert plan_gapfill("SELECT gapfilled FROM parking_data") is None
