"""Pinot's scalar functions with Pinot's names, argument orders and result types, run through the planner and
DuckDB; expected values are computed here independently (datetime/zoneinfo, hashlib, json, Decimal)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import re
from decimal import ROUND_DOWN, ROUND_HALF_UP, Decimal
from zoneinfo import ZoneInfo

import pyarrow as pa
import pytest

from cuvee.spi.stream import murmur2
from cuvee.query import QueryError, QueryErrorCode
from cuvee.query.execute import merge_partials, run_server_step
from cuvee.query.parse import TableInfo
from cuvee.query.rewrite import plan_sql

UTC = dt.timezone.utc
MOMENTS = [dt.datetime(2024, 3, 10, 9, 47, 31, 250_000, tzinfo=UTC),  # a Sunday; LA changes to DST that day
           dt.datetime(2023, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC),
           dt.datetime(1969, 7, 20, 20, 17, 40, tzinfo=UTC)]  # before the epoch: negative millis
MILLIS = [int(m.timestamp() * 1000) for m in MOMENTS]
DOCS = [{"a": "x", "n": 7, "f": 2.5, "ok": True, "arr": [1, 2, 3], "o": {"k1": 1, "k2": "v"}},
        {"a": "y", "n": -3, "arr": [], "o": {}},
        {"n": "12", "t": 1700000000123}]
DAYS = [16091, 0, -1]  # an INT (int32) column of days since the epoch
TABLE = TableInfo("t", ("id", "ts", "ms", "s", "j", "x", "b", "days"), timestamp_columns=frozenset({"ts"}),
                  number_columns=frozenset({"id", "ms", "x", "days"}))
ROWS = pa.table({
    "id": [0, 1, 2],
    "ts": pa.array([m.replace(tzinfo=None) for m in MOMENTS], pa.timestamp("ms")),
    "ms": pa.array(MILLIS, pa.int64()),
    "s": ["a,b,,c", "hello world", "ab"],
    "j": [json.dumps(d) for d in DOCS],
    "x": [2.345, -2.675, 1.005],
    "b": [b"\x01\x02", b"abc", b""],
    "days": pa.array(DAYS, pa.int32()),
})


def answer(sql: str) -> list[tuple]:
    plan = plan_sql(sql, lambda _: TABLE)
    merged = merge_partials(plan, [run_server_step(plan, [ROWS])], ROWS.schema)
    return [tuple(r.values()) for r in merged.to_pylist()]


def column(sql: str) -> list:
    """The first column of ``SELECT <expr>, id FROM t ORDER BY id``."""
    return [row[0] for row in answer(f"SELECT {sql}, id FROM t ORDER BY id")]


def types(sql: str) -> list[pa.DataType]:
    plan = plan_sql(sql, lambda _: TABLE)
    return list(merge_partials(plan, [run_server_step(plan, [ROWS])], ROWS.schema).schema.types)


def refused(sql: str, words: str) -> None:
    with pytest.raises(QueryError) as caught:
        answer(sql)
    assert caught.value.code is QueryErrorCode.SQL_PARSING, caught.value
    assert words in str(caught.value), caught.value


def floor_to(moment: dt.datetime, unit: str) -> dt.datetime:
    """An independent truncation: datetime fields zeroed from ``unit`` down (week: back to Monday)."""
    fields = ["microsecond", "second", "minute", "hour"]
    cut = {"second": 1, "minute": 2, "hour": 3, "day": 4, "week": 4, "month": 4, "quarter": 4, "year": 4}[unit]
    moment = moment.replace(**{f: 0 for f in fields[:cut]})
    if unit == "week":
        moment -= dt.timedelta(days=moment.weekday())
    if unit in ("month", "quarter", "year"):
        moment = moment.replace(day=1)
    if unit == "quarter":
        moment = moment.replace(month=(moment.month - 1) // 3 * 3 + 1)
    if unit == "year":
        moment = moment.replace(month=1)
    return moment


def millis_of(moment: dt.datetime) -> int:
    return int(moment.timestamp() * 1000)


# ---- date-time ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("unit", ["second", "minute", "hour", "day", "week", "month", "quarter", "year"])
def test_date_trunc_answers_epoch_millis_in_utc(unit: str) -> None:
    expected = [millis_of(floor_to(m, unit)) for m in MOMENTS]
    assert column(f"DATETRUNC('{unit}', ms)") == expected
    assert column(f"DATE_TRUNC('{unit}', ts)") == expected  # a TIMESTAMP column is millis to Pinot: a LONG back
    assert types(f"SELECT DATE_TRUNC('{unit}', ts) FROM t") == [pa.int64()]


@pytest.mark.parametrize("unit", ["hour", "day", "week", "month"])
def test_date_trunc_in_a_time_zone_with_input_and_output_units(unit: str) -> None:
    zone = ZoneInfo("America/Los_Angeles")
    expected = [millis_of(floor_to(m.astimezone(zone), unit)) for m in MOMENTS]
    assert column(f"DATETRUNC('{unit}', ms, 'MILLISECONDS', 'America/Los_Angeles')") == expected
    seconds = [int(e / 1000) for e in expected]  # Java's division toward zero
    assert column(f"DATETRUNC('{unit}', ms / 1000, 'SECONDS', 'America/Los_Angeles')") == seconds
    assert column(f"DATETRUNC('{unit}', ms, 'MILLISECONDS', 'America/Los_Angeles', 'SECONDS')") == seconds


def test_superset_time_grain_answers_the_five_minute_bucket_as_a_timestamp() -> None:
    def bucket(m: dt.datetime) -> dt.datetime:
        millis = millis_of(floor_to(m, "minute"))
        return dt.datetime.fromtimestamp(int(millis / 300_000) * 300_000 / 1000, UTC).replace(tzinfo=None)

    expected = [bucket(m) for m in MOMENTS]
    for col in ("ms", "ts"):
        sql = f"CAST(ROUND(DATE_TRUNC('minute', CAST({col} AS TIMESTAMP)), 300000) AS TIMESTAMP)"
        assert column(sql) == expected
        assert types(f"SELECT {sql} FROM t") == [pa.timestamp("us")]


def test_timestamps_are_millis_to_arithmetic_and_casts() -> None:
    assert column("ts + 1000") == [m + 1000 for m in MILLIS]
    assert column("ts - ms") == [0, 0, 0]
    assert column("CAST(ms AS TIMESTAMP)") == [m.replace(tzinfo=None) for m in MOMENTS]
    assert column("ROUND(ms, 1000)") == [int(m / 1000) * 1000 for m in MILLIS]


def test_date_time_convert_between_epoch_and_date_formats() -> None:
    # buckets are the calendar's (floor, also before 1970); a coarser output unit divides as Java does
    assert column("DATETIMECONVERT(ms, '1:MILLISECONDS:EPOCH', '1:SECONDS:EPOCH', '15:MINUTES')") == \
        [int(m // 900_000 * 900_000 / 1000) for m in MILLIS]
    assert column("DATETIMECONVERT(ms, 'EPOCH|MILLISECONDS|1', '5:MINUTES:EPOCH', '1:HOURS')") == \
        [int(m // 3_600_000 * 3_600_000 / 300_000) for m in MILLIS]
    assert column("DATETIMECONVERT(ms, '1:MILLISECONDS:EPOCH', '1:DAYS:SIMPLE_DATE_FORMAT:yyyy-MM-dd', '1:DAYS')") \
        == [m.strftime("%Y-%m-%d") for m in MOMENTS]
    zone = ZoneInfo("Asia/Kolkata")
    assert column("DATETIMECONVERT(ts, 'TIMESTAMP', 'SIMPLE_DATE_FORMAT|yyyy-MM-dd HH:mm:ss|Asia/Kolkata', "
                  "'1:HOURS')") == [m.astimezone(zone).strftime("%Y-%m-%d %H:00:00") for m in MOMENTS]
    assert column("DATETIMECONVERT(DATETIMECONVERT(ms, '1:MILLISECONDS:EPOCH', '1:DAYS:SIMPLE_DATE_FORMAT:"
                  "yyyy-MM-dd', '1:DAYS'), '1:DAYS:SIMPLE_DATE_FORMAT:yyyy-MM-dd', 'TIMESTAMP', '1:DAYS')") == \
        [floor_to(m, "day").replace(tzinfo=None) for m in MOMENTS]
    assert column("DATETIMECONVERT(ms / 1000, '1:SECONDS:EPOCH', '1:MILLISECONDS:EPOCH', '1:SECONDS')") == \
        [int(m / 1000) * 1000 for m in MILLIS]  # ms / 1000 is a DOUBLE here; its seconds are floored


def test_to_and_from_date_time_with_a_zone() -> None:
    zone = ZoneInfo("Europe/Berlin")
    texts = [m.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S") for m in MOMENTS]
    assert column("toDateTime(ms, 'yyyy-MM-dd HH:mm:ss', 'Europe/Berlin')") == texts
    assert column("toDateTime(ts, 'yyyy-MM-dd HH:mm:ss', 'Europe/Berlin')") == texts
    back = column("fromDateTime(toDateTime(ms, 'yyyy-MM-dd HH:mm:ss', 'Europe/Berlin'), 'yyyy-MM-dd HH:mm:ss', "
                  "'Europe/Berlin')")
    assert back == [millis_of(m.replace(microsecond=0)) for m in MOMENTS]
    assert column("fromDateTime('2024-01-02', 'yyyy-MM-dd')") == [1704153600000] * 3


@pytest.mark.parametrize(("zone", "offset"), [("+05:30", (5, 30)), ("GMT+05:30", (5, 30)), ("UTC-08:00", (-8, 0)),
                                             ("-3", (-3, 0)), ("+0945", (9, 45)), ("UT+01:00", (1, 0))])
def test_fixed_offset_zones_as_pinot_reads_zone_ids(zone: str, offset: tuple[int, int]) -> None:
    hours, minutes = offset
    shift = dt.timezone(dt.timedelta(hours=hours, minutes=minutes if hours >= 0 else -minutes))
    texts = [m.astimezone(shift).strftime("%Y-%m-%d %H:%M:%S") for m in MOMENTS]
    assert column(f"toDateTime(ms, 'yyyy-MM-dd HH:mm:ss', '{zone}')") == texts
    assert column(f"fromDateTime(toDateTime(ms, 'yyyy-MM-dd HH:mm:ss', '{zone}'), 'yyyy-MM-dd HH:mm:ss', "
                  f"'{zone}')") == [millis_of(m.replace(microsecond=0)) for m in MOMENTS]
    assert column(f"DATETRUNC('day', ms, 'MILLISECONDS', '{zone}')") == \
        [millis_of(floor_to(m.astimezone(shift), "day")) for m in MOMENTS]
    assert column(f"DATETIMECONVERT(ms, '1:MILLISECONDS:EPOCH', '1:HOURS:SIMPLE_DATE_FORMAT:yyyy-MM-dd HH tz({zone})', "
                  "'1:HOURS')") == [m.astimezone(shift).strftime("%Y-%m-%d %H") for m in MOMENTS]


def test_zone_names_in_any_case_and_etc_gmt_as_the_tz_database_means_it() -> None:
    kolkata = [m.astimezone(ZoneInfo("Asia/Kolkata")).strftime("%H:%M") for m in MOMENTS]
    assert column("toDateTime(ms, 'HH:mm', 'asia/KOLKATA')") == kolkata
    assert column("toDateTime(ms, 'HH:mm', 'Etc/GMT+5')") == \
        [m.astimezone(dt.timezone(dt.timedelta(hours=-5))).strftime("%H:%M") for m in MOMENTS]  # 5 hours behind
    assert column("toDateTime(ms, 'HH:mm', 'zulu')") == column("toDateTime(ms, 'HH:mm', 'GMT+00:00')") == \
        [m.strftime("%H:%M") for m in MOMENTS]
    for bad in ("+19:00", "+05:60", "GMT+5:3", "Mars/Olympus", "Etc/GMT+05:30"):
        refused(f"SELECT toDateTime(ms, 'HH:mm', '{bad}') FROM t", f"unknown time zone '{bad}'")


def test_time_convert_and_epoch_buckets() -> None:
    assert column("timeConvert(ms, 'MILLISECONDS', 'HOURS')") == [int(m / 3_600_000) for m in MILLIS]
    assert column("timeConvert(id, 'DAYS', 'SECONDS')") == [0, 86_400, 172_800]
    assert column("toEpochMinutesRounded(ms, 15)") == [int(int(m / 60_000) / 15) * 15 for m in MILLIS]
    assert column("toEpochHoursBucket(ts, 6)") == [int(int(m / 3_600_000) / 6) for m in MILLIS]
    assert column("fromEpochDaysBucket(id, 7)") == [i * 7 * 86_400_000 for i in range(3)]
    assert column("toEpochSeconds(ts)") == [int(m / 1000) for m in MILLIS]


def test_an_int_column_of_days_converts_to_millis_without_int32_overflow() -> None:
    # Pinot's time functions take a Java long: the INT is widened before it is multiplied (DuckDB's INT32 product
    # overflowed: a 200 for any date after 1970-01-25)
    millis = [d * 86_400_000 for d in DAYS]
    assert column("fromEpochDays(days)") == millis
    assert column("fromEpochDaysBucket(days, 1)") == millis
    assert column("timeConvert(days, 'DAYS', 'MILLISECONDS')") == millis
    month_starts = [(dt.date(1970, 1, 1) + dt.timedelta(days=d)).replace(day=1) for d in DAYS]
    assert column("DATETRUNC('month', days, 'DAYS')") == [(m - dt.date(1970, 1, 1)).days for m in month_starts]
    assert column("DATETRUNC('hour', 1700000000, 'SECONDS', 'UTC', 'MILLISECONDS')") == [1699999200000] * 3
    assert column("timeConvert(1.9, 'SECONDS', 'MILLISECONDS')") == [1000] * 3  # a long: the fraction dropped


def test_date_time_mistakes_are_150_naming_the_function() -> None:
    refused("SELECT DATETRUNC('fortnight', ms) FROM t", "DATETRUNC: unknown unit 'fortnight'")
    refused("SELECT DATETRUNC('day', ms, 'MILLISECONDS', 'Mars/Olympus') FROM t", "unknown time zone 'Mars/Olympus'")
    refused("SELECT DATETRUNC('day', ms, 'EONS') FROM t", "unknown input time unit 'EONS'")
    refused("SELECT DATETRUNC(s, ms) FROM t", "the unit must be a string literal")
    refused("SELECT DATETIMECONVERT(ms, '1:MILLISECONDS:EPOCH', '1:SECONDS:EPOCH') FROM t", "takes 4 arguments")
    refused("SELECT DATETIMECONVERT(ms, '1:FORTNIGHTS:EPOCH', '1:SECONDS:EPOCH', '1:SECONDS') FROM t",
            "bad input format")
    refused("SELECT toDateTime(ms, 'yyyy', 'Nowhere/Land') FROM t", "TODATETIME: unknown time zone")
    refused("SELECT timeConvert(ms, 'MILLISECONDS', 'WEEKS') FROM t", "unknown to unit 'WEEKS'")


# ---- JSON -----------------------------------------------------------------------------------------------------


def test_json_extract_scalar_types_defaults_and_missing_paths() -> None:
    assert column("JSON_EXTRACT_SCALAR(j, '$.a', 'STRING')") == [d.get("a") for d in DOCS]
    assert column("JSON_EXTRACT_SCALAR(j, '$.a', 'STRING', 'none')") == [d.get("a", "none") for d in DOCS]
    assert column("JSON_EXTRACT_SCALAR(j, '$.n', 'INT')") == [int(d["n"]) for d in DOCS]
    assert column("JSON_EXTRACT_SCALAR(j, '$.f', 'DOUBLE', -1.5)") == [d.get("f", -1.5) for d in DOCS]
    assert column("JSON_EXTRACT_SCALAR(j, '$.ok', 'BOOLEAN')") == [True, None, None]
    assert column("JSON_EXTRACT_SCALAR(j, '$.arr', 'INT_ARRAY')") == [d.get("arr", []) for d in DOCS]
    assert column("JSON_EXTRACT_SCALAR(j, '$.t', 'TIMESTAMP')") == [
        None, None, dt.datetime.fromtimestamp(1700000000.123, UTC).replace(tzinfo=None)]
    assert column("jsonPathLong(j, '$.n')") == [7, -3, 12]
    assert column("jsonPathString(j, '$.o.k2', 'missing')") == ["v", "missing", "missing"]
    assert types("SELECT JSON_EXTRACT_SCALAR(j, '$.n', 'LONG') FROM t") == [pa.int64()]
    refused("SELECT JSON_EXTRACT_SCALAR(j, '$.n', 'MONEY') FROM t", "unknown result type 'MONEY'")
    refused("SELECT JSON_EXTRACT_SCALAR(j, s, 'INT') FROM t", "the JSON path must be a string literal")
    assert [row[0] for row in answer("SELECT id FROM t WHERE JSON_MATCH(j, '\"$.a\"=''x''') LIMIT 5")] == \
        [i for i, d in enumerate(DOCS) if d.get("a") == "x"]  # more in test_json_match.py


def test_json_numbers_convert_as_java_does_and_malformed_json_gives_the_default() -> None:
    # Number.longValue()/intValue() drop the fraction (DuckDB's cast rounds 12.7 to 13); the extractor reads a JSON
    # boolean as 1/0 for the number types, jsonPathLong does not (Long.parseLong("true") fails: the default)
    assert column("JSON_EXTRACT_SCALAR('{\"a\": 12.7}', '$.a', 'LONG')") == [12] * 3
    assert column("JSON_EXTRACT_SCALAR('{\"a\": -12.7}', '$.a', 'INT')") == [-12] * 3
    assert column("JSON_EXTRACT_SCALAR('{\"a\": 12345678901234567}', '$.a', 'LONG')") == [12345678901234567] * 3
    assert column("JSON_EXTRACT_SCALAR('{\"a\": true}', '$.a', 'INT', 0)") == [1] * 3
    assert column("JSON_EXTRACT_SCALAR('{\"a\": false}', '$.a', 'DOUBLE')") == [0.0] * 3
    assert column("jsonPathLong('{\"a\": 12.7}', '$.a')") == [12] * 3
    assert column("jsonPathLong('{\"a\": true}', '$.a', 9)") == [9] * 3
    # unparsable JSON: the default where there is one (Pinot's answer), else NULL (where Pinot fails the query)
    bad = "CASE WHEN id = 1 THEN '' WHEN id = 2 THEN '{\"a\": ' ELSE j END"
    assert column(f"JSON_EXTRACT_SCALAR({bad}, '$.a', 'STRING', 'd')") == ["x", "d", "d"]
    assert column(f"JSON_EXTRACT_SCALAR({bad}, '$.n', 'INT')") == [7, None, None]
    assert column(f"jsonPathString({bad}, '$.a', 'd')") == ["x", "d", "d"]
    assert column(f"JSON_EXTRACT_SCALAR({bad}, '$.arr', 'INT_ARRAY')") == [[1, 2, 3], [], []]  # Pinot's empty MV
    assert column(f"JSON_EXTRACT_KEY({bad}, '$.o.*')") == [["$['o']['k1']", "$['o']['k2']"], None, None]


def json_text(value: object) -> str | None:
    """A jsonPath value as Pinot hands it on as a string: a string's text, anything else its JSON."""
    return None if value is None else value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def test_json_path_array_lists_what_a_jayway_path_reads() -> None:
    # definite paths: an array's elements, a single value as one element, NULL when missing
    def definite(d: dict, key: str) -> list | None:
        value = d.get(key)
        return None if value is None else [json_text(v) for v in (value if isinstance(value, list) else [value])]

    for key in ("arr", "a", "n", "o", "nope"):
        assert column(f"jsonPathArray(j, '$.{key}')") == [definite(d, key) for d in DOCS], key
        assert column(f"jsonPathArrayDefaultEmpty(j, '$.{key}')") == [definite(d, key) or [] for d in DOCS], key
    assert column("jsonPathArray(j, '$[''o''].k2')") == [["v"], None, None]
    # indefinite paths: every match, an empty list when there is none (JSON null included, missing leaves not)
    nested = {"x": [{"k": 1}, {"k": "v"}, {"j": 2}, {"k": None}, {"k": [1, {"z": True}]}]}
    expected = [json_text(e["k"]) for e in nested["x"] if "k" in e]
    assert column(f"jsonPathArray('{json.dumps(nested)}', '$.x[*].k')") == [expected] * 3
    assert column("jsonPathArray(j, '$.arr[*]')") == [[json_text(v) for v in d.get("arr", [])] for d in DOCS]
    assert column("jsonPathArrayDefaultEmpty('not json', '$.a')") == [[]] * 3
    assert column("jsonPathArray('not json', '$.a')") == [None] * 3  # Pinot fails the query
    assert types("SELECT jsonPathArray(j, '$.arr') FROM t") == [pa.list_(pa.string())]
    refused("SELECT jsonPathArray(j, '$..a') FROM t", "has a form not supported here")
    refused("SELECT jsonPathArray(j, '$.arr[?(@ > 1)]') FROM t", "has a form not supported here")


def test_json_extract_scalar_array_types_answer_empty_lists_and_check_their_default() -> None:
    assert column("JSON_EXTRACT_SCALAR(j, '$.arr', 'INT_ARRAY', '0')") == [d.get("arr", []) for d in DOCS]
    assert column("JSON_EXTRACT_SCALAR(j, '$.arr[*]', 'LONG_ARRAY', -1)") == [d.get("arr", []) for d in DOCS]
    assert column("JSON_EXTRACT_SCALAR(j, '$.arr', 'DOUBLE_ARRAY', 0.5)") == \
        [[float(v) for v in d.get("arr", [])] for d in DOCS]
    assert types("SELECT JSON_EXTRACT_SCALAR(j, '$.arr', 'INT_ARRAY', 0) FROM t") == [pa.list_(pa.int32())]
    refused("SELECT JSON_EXTRACT_SCALAR(j, '$.arr', 'INT_ARRAY', '[]') FROM t", "the default '[]' does not read as INT")


def test_json_extract_key_lists_an_objects_key_paths() -> None:
    expected = [[f"$['o']['{k}']" for k in d["o"]] if "o" in d else None for d in DOCS]
    assert column("JSON_EXTRACT_KEY(j, '$.o.*')") == expected
    assert column("JSON_EXTRACT_KEY(j, '$.*')")[2] == [f"$['{k}']" for k in DOCS[2]]


# ---- strings --------------------------------------------------------------------------------------------------


def java_ordinal_index(text: str, find: str, n: int) -> int:
    at = -1
    for _ in range(n):
        at = text.find(find, at + 1)
        if at < 0:
            return -1
    return at


def test_strpos_is_zero_based_with_minus_one_when_absent() -> None:
    assert column("strpos(s, 'b')") == [s.find("b") for s in ROWS["s"].to_pylist()]
    assert column("strpos(s, ',', 2)") == [java_ordinal_index(s, ",", 2) for s in ROWS["s"].to_pylist()]
    assert column("strpos(s, 'o', 2)") == [java_ordinal_index(s, "o", 2) for s in ROWS["s"].to_pylist()]


def test_substr_uses_a_zero_based_begin_and_an_exclusive_end() -> None:
    strings = ROWS["s"].to_pylist()
    assert column("substr(s, 1, 3)") == [s[1:3] for s in strings]
    assert column("substr(s, 2)") == [s[2:] for s in strings]
    assert column("substr(s, 1, -1)") == [s[1:] for s in strings]
    assert column("substr(s, -2)") == [s[-2:] for s in strings]
    assert column("SUBSTRING(s, 1, 3)") == [s[0:3] for s in strings]  # SQL's SUBSTRING stays 1-based


def commons_substring(text: str, begin: int, end: int | None = None) -> str:
    """Pinot's substr: Commons' StringUtils.substring, negative indexes from the end; an end of -1 is the end."""
    def at(i: int) -> int:
        return max(len(text) + i, 0) if i < 0 else min(i, len(text))
    if end is None or end == -1:
        return text[at(begin):]
    return text[at(begin):at(end)] if at(begin) <= at(end) else ""


def test_strpos_and_substr_edges_follow_commons() -> None:
    strings = ROWS["s"].to_pylist()
    assert column("strpos(s, 'a', 0)") == [-1] * 3  # ordinalIndexOf: an ordinal <= 0 is -1
    assert column("strpos(s, 'a', id - 1)") == [-1, -1, 0]  # (DuckDB's list_extract counted -1 from the end)
    assert column("strpos('aaaa', 'aa', -1)") == [-1] * 3
    assert column("strpos(s, '', 1)") == [0] * 3
    # an expression's negative value counts from the end like a negative literal's; its -1 as the end: the end
    for begin, end in [(-5, None), (-2, None), (-4, -2), (-3, -1), (1, -3), (-9, 2)]:
        args = f"id - 2 + ({begin})" + ("" if end is None else f", id - 2 + ({end})")
        expected = [commons_substring(t, begin + i - 2, None if end is None else end + i - 2)
                    for i, t in enumerate(strings)]
        assert column(f"substr(s, {args})") == expected, args
    assert column("substr('hello', id - 3)") == ["llo", "lo", "o"]


def test_split_split_part_concat_and_pads() -> None:
    strings = ROWS["s"].to_pylist()
    assert column("split(s, ',')") == [[p for p in s.split(",") if p] for s in strings]
    assert column("splitPart(s, ',', 2)") == ["c", "null", "null"]
    assert column("splitPart(s, ',', -1)") == [[p for p in s.split(",") if p][-1] for s in strings]
    assert column("concat(s, 'z', '-')") == [f"{s}-z" for s in strings]
    assert column("concat(s, 'z')") == [f"{s}z" for s in strings]
    assert column("lpad(s, 4, '*')") == [s.rjust(4, "*") for s in strings]  # never shortened, unlike DuckDB's
    assert column("rpad(s, 4, '*')") == [s.ljust(4, "*") for s in strings]
    assert column("lpad('abc', 5, '')") == ["  abc"] * 3  # Commons: an empty pad is a space (DuckDB: an error)
    assert column("rpad('abc', 5, substr(s, 0, 0))") == ["abc  "] * 3


def commons_split(text: str, separator: str, limit: int = 0) -> list[str]:
    """Commons' splitByWholeSeparator, transcribed from its loop: empty parts dropped but the last, and with a
    limit the rest of the text as the last part; an empty separator splits on whitespace runs."""
    if not text:
        return []
    if not separator:
        tokens = [(m.start(), m.group()) for m in re.finditer(r"\S+", text)]
        if 0 < limit <= len(tokens):
            return [t for _, t in tokens[:limit - 1]] + [text[tokens[limit - 1][0]:]]
        return [t for _, t in tokens]
    out: list[str] = []
    begin = 0
    while True:
        end = text.find(separator, begin)
        if end < 0:
            return out + [text[begin:]]
        if end > begin:
            if len(out) + 1 == limit:
                return out + [text[begin:]]
            out.append(text[begin:end])
        begin = end + len(separator)


def test_split_with_a_limit_is_commons_split_by_whole_separator() -> None:
    # Commons' own examples (its javadoc), then every row of s with every limit
    assert commons_split("ab-!-cd-!-ef", "-!-", 5) == ["ab", "cd", "ef"]
    assert commons_split("ab-!-cd-!-ef", "-!-", 2) == ["ab", "cd-!-ef"]
    assert commons_split("ab   de fg", "", 0) == ["ab", "de", "fg"]
    for text, separator, limit in [("ab-!-cd-!-ef", "-!-", 2), ("ab:cd:ef", ":", 2), ("ab   de fg", "", 2),
                                   ("a,b,", ",", 0), (",,a,,b,,", ",", 2), ("x", ",", 1), ("", ",", 3)]:
        assert column(f"split('{text}', '{separator}', {limit})") == [commons_split(text, separator, limit)] * 3
    strings = ROWS["s"].to_pylist()
    for limit in (-1, 0, 1, 2, 3):
        assert column(f"split(s, ',', {limit})") == [commons_split(t, ",", limit) for t in strings]
        assert column(f"split(s, substr(s, 1, 2), {limit})") == [commons_split(t, t[1:2], limit) for t in strings]
    assert column("split(s, ',')") == [commons_split(t, ",") for t in strings]
    assert column("split('a,b,', ',')") == [["a", "b", ""]] * 3  # Commons keeps a trailing empty part
    assert column("splitPart('a,b,', ',', 2)") == [""] * 3
    refused("SELECT split(s, ',', id) FROM t", "the limit must be an integer literal")


def test_string_functions_that_mean_the_same_pass_through() -> None:
    strings = ROWS["s"].to_pylist()
    assert column("reverse(s)") == [s[::-1] for s in strings]
    assert column("upper(s)") == [s.upper() for s in strings]
    assert column("startsWith(s, 'a')") == [s.startswith("a") for s in strings]
    assert column("endsWith(s, 'b')") == [s.endswith("b") for s in strings]
    assert column("contains(s, 'llo')") == ["llo" in s for s in strings]
    assert column("replace(s, 'a', 'A')") == [s.replace("a", "A") for s in strings]
    assert column("trim(concat(' ', s))") == strings
    assert column("codepoint(s)") == [ord(s[0]) for s in strings]
    assert column("chr(65)") == ["A"] * 3


# ---- hashing and math -----------------------------------------------------------------------------------------


def test_hashes_of_bytes_answer_hex() -> None:
    blobs = ROWS["b"].to_pylist()
    assert column("md5(b)") == [hashlib.md5(b).hexdigest() for b in blobs]
    assert column("sha(b)") == [hashlib.sha1(b).hexdigest() for b in blobs]
    assert column("sha256(b)") == [hashlib.sha256(b).hexdigest() for b in blobs]
    assert column("sha256(toUtf8(s))") == [hashlib.sha256(s.encode()).hexdigest() for s in ROWS["s"].to_pylist()]
    assert column("sha512(b)") == [hashlib.sha512(b).hexdigest() for b in blobs]  # more in test_hash_functions.py


def _java_int(value: int) -> int:
    return value - 2**32 if value >= 2**31 else value


def test_a_string_is_hashed_as_the_bytes_its_hex_spells_as_pinot_converts_it() -> None:
    assert column("md5('abcd')") == [hashlib.md5(b"\xab\xcd").hexdigest()] * 3
    assert column("sha256('00FF')") == [hashlib.sha256(b"\x00\xff").hexdigest()] * 3
    assert column("murmurHash2('abcd')") == [_java_int(murmur2(b"\xab\xcd"))] * 3
    with pytest.raises(QueryError, match="toUtf8"):  # not hex: an error that says what to write
        column("sha(s)")


def test_math_with_pinot_meanings_and_double_results() -> None:
    xs = ROWS["x"].to_pylist()
    assert column("roundDecimal(x, 2)") == [float(Decimal(repr(x)).quantize(Decimal("0.01"), ROUND_HALF_UP))
                                           for x in xs]
    assert column("truncate(x, 2)") == [float(Decimal(repr(x)).quantize(Decimal("0.01"), ROUND_DOWN)) for x in xs]
    assert column("roundDecimal(x)") == [2.0, -3.0, 1.0]  # Java's Math.round: half up
    assert column("intDiv(id - 2, 2)") == [-1, -1, 0]  # floor, not toward zero
    assert column("log(exp(id))") == pytest.approx([0.0, 1.0, 2.0])  # Pinot's log is ln
    assert column("ceil(id)") == [0.0, 1.0, 2.0] and types("SELECT ceil(id), abs(id) FROM t") == [pa.float64()] * 2
    assert column("sqrt(id * 4)") == [0.0, 2.0, 2.0 ** 1.5]
    assert column("power(id, 2)") == [0.0, 1.0, 4.0]
    assert column("mod(id + 5, 3)") == [2, 0, 1]
    assert column("least(id, 1)") == [0, 1, 1] and column("greatest(id, 1)") == [1, 1, 2]
    refused("SELECT roundDecimal(x, id) FROM t", "the scale must be an integer literal")


def test_math_answers_java_values_where_duckdb_raises_an_error() -> None:
    # Java's Math.log / log10 / sqrt: -Infinity at 0 and NaN below it (DuckDB: Out of Range Error, a 200)
    for fn in ("log", "ln", "log10", "log2"):
        below, zero, _ = column(f"{fn}(id - 1)")
        assert math.isnan(below) and zero == -math.inf, fn
    assert column("log2(id * 4)")[1:] == [math.log(4) / math.log(2), math.log(8) / math.log(2)]  # Pinot's log2
    assert column("log10(id * 1000)")[1:] == [3.0, math.log10(2000)]
    below, *rest = column("sqrt(id - 1)")
    assert math.isnan(below) and rest == [0.0, 1.0]
    # intDiv is (long) Math.floor(a / b) in doubles: a zero divisor saturates (0 / 0 is NaN, which is 0)
    assert column("intDiv(id - 1, 0)") == [-(2 ** 63), 0, 2 ** 63 - 1]
    # abs takes a DOUBLE: the smallest BIGINT has no BIGINT absolute value
    assert column("abs(-9223372036854775808)") == [9.223372036854776e18] * 3


def test_a_null_is_hashed_to_null_and_nested_hashes_stay_small() -> None:
    assert column("md5(CASE WHEN id > 0 THEN '00' END)") == [None, hashlib.md5(b"\x00").hexdigest(),
                                                             hashlib.md5(b"\x00").hexdigest()]
    nested = "s"
    for _ in range(8):  # each level binds its argument once: the SQL grows by a constant a level
        nested = f"sha256(toUtf8({nested}))"
    plan = plan_sql(f"SELECT {nested} FROM t", lambda _: TABLE)
    assert len(plan.server_sql) < 20_000
    expected = []
    for s in ROWS["s"].to_pylist():
        for _ in range(8):
            s = hashlib.sha256(s.encode()).hexdigest()
        expected.append(s)
    assert column(nested) == expected
