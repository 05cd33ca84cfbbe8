"""Ingestion transforms and filter (ingestionConfig) over decoded batches: computed columns, source fields that
are not in the schema, rows dropped with their offsets, per-row failures, and mistakes refused with JSON paths."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest

from cuvee.config import Schema, TableConfig
from cuvee.decode import JsonDecoder
from cuvee.decode.transform import (
    TransformConfigError,
    compile_ingestion,
    decode_schema,
    ingestion_issues,
)

SCHEMA = Schema.from_json({
    "schemaName": "events",
    "dimensionFieldSpecs": [{"name": "country", "dataType": "STRING"}, {"name": "day", "dataType": "STRING"}],
    "metricFieldSpecs": [{"name": "amount", "dataType": "DOUBLE"}, {"name": "clicks", "dataType": "LONG"}],
    "dateTimeFieldSpecs": [{"name": "ts", "dataType": "TIMESTAMP", "format": "1:MILLISECONDS:EPOCH",
                            "granularity": "1:MILLISECONDS"}],
})
DAY_MS = 86_400_000


def ingestion(**config: Any) -> TableConfig:
    return TableConfig.from_json({
        "tableName": "events", "tableType": "REALTIME", "ingestionConfig": config,
        "tableIndexConfig": {"streamConfigs": {"streamType": "log", "stream.log.topic.name": "t",
                                               "stream.log.dir": "/tmp/unused"}}})


def decode(rows: list[dict[str, Any]], table: TableConfig):  # type: ignore[no-untyped-def]
    transformer = compile_ingestion(SCHEMA, table.ingestion)
    assert transformer is not None
    result = JsonDecoder(decode_schema(SCHEMA, transformer)).decode([orjson.dumps(r) for r in rows],
                                                                    list(range(100, 100 + len(rows))))
    assert result.bad == []
    return transformer.apply(result.batch, result.offsets)


def test_transforms_compute_columns_from_schema_columns_and_source_fields_and_the_filter_drops_rows() -> None:
    table = ingestion(
        transformConfigs=[{"columnName": "day", "transformFunction": "toDateTime(ts, 'yyyy-MM-dd')"},
                          {"columnName": "amount", "transformFunction": "CAST(amount_cents AS DOUBLE) / 100"},
                          {"columnName": "country", "transformFunction": "upper(country)"}],
        filterConfig={"filterFunction": "is_bot = 'true' OR clicks > 100"})
    rows = [{"country": "nz", "ts": 0, "amount_cents": "1250", "clicks": 1, "is_bot": "false"},
            {"country": "fr", "ts": DAY_MS, "amount_cents": "5", "clicks": 2, "is_bot": "true"},  # dropped
            {"country": "de", "ts": 2 * DAY_MS, "amount_cents": "99", "clicks": 500},  # dropped
            {"country": "us", "ts": 3 * DAY_MS, "clicks": 3}]  # no amount_cents: amount is null
    result = decode(rows, table)
    assert result.batch.schema.names == SCHEMA.column_names  # the source fields are not stored
    got = result.batch.to_pylist()
    assert [(r["country"], r["day"], r["amount"]) for r in got] == [("NZ", "1970-01-01", 12.5),
                                                                      ("US", "1970-01-04", None)]
    assert result.offsets.tolist() == [100, 103] and result.dropped_offsets.tolist() == [101, 102]


def test_with_continue_on_error_a_failing_transform_gives_null_and_a_failing_filter_keeps_the_row() -> None:
    table = ingestion(transformConfigs=[{"columnName": "amount", "transformFunction": "CAST(raw AS DOUBLE)"}],
                      filterConfig={"filterFunction": "CAST(flag AS INTEGER) = 1"}, continueOnError=True)
    result = decode([{"raw": "2.5", "flag": "0"}, {"raw": "oops", "flag": "zero"}, {"raw": "1", "flag": "1"}], table)
    assert [r["amount"] for r in result.batch.to_pylist()] == [2.5, None]
    assert result.offsets.tolist() == [100, 101] and result.dropped_offsets.tolist() == [102]
    assert result.failed == ()
    assert table.to_json()["ingestionConfig"]["continueOnError"] is True


@pytest.mark.parametrize("setting", [{}, {"continueOnError": False}, {"continueOnError": "false"}])
def test_by_default_a_row_whose_transform_or_filter_fails_is_skipped_as_failed(setting: dict[str, Any]) -> None:
    """Pinot's default (continueOnError false): the row is not stored; it is reported with DuckDB's reason. Rows
    whose expressions give NULL without failing (a missing field) are kept."""
    table = ingestion(transformConfigs=[{"columnName": "amount", "transformFunction": "CAST(raw AS DOUBLE)"}],
                      filterConfig={"filterFunction": "CAST(flag AS INTEGER) = 1"}, **setting)
    rows = [{"raw": "2.5", "flag": "0"}, {"raw": "oops", "flag": "0"}, {"raw": "1", "flag": "1"},
            {"flag": "0"}, {"raw": "3", "flag": "zero"}, {"raw": "4", "flag": "0"}]
    result = decode(rows, table)
    assert [r["amount"] for r in result.batch.to_pylist()] == [2.5, None, 4.0]
    assert result.offsets.tolist() == [100, 103, 105] and result.dropped_offsets.tolist() == [102]
    assert [row for row, _ in result.failed] == [1, 4]
    assert "oops" in result.failed[0][1] and "zero" in result.failed[1][1]


@pytest.mark.parametrize("continue_on_error", [True, False])
def test_transforms_sharing_a_subexpression_fail_only_on_the_bad_row(continue_on_error: bool) -> None:
    """DuckDB's common-subexpression elimination moved CAST(raw AS DOUBLE), shared by two transforms, out of their
    try: one bad row failed the whole batch (every row a bad record)."""
    table = ingestion(transformConfigs=[{"columnName": "amount", "transformFunction": "CAST(raw AS DOUBLE)"},
                                        {"columnName": "clicks", "transformFunction": "CAST(raw AS DOUBLE) * 2"}],
                      continueOnError=continue_on_error)
    result = decode([{"raw": "1.5"}, {"raw": "oops"}, {"raw": "2"}], table)
    got = [(r["amount"], r["clicks"]) for r in result.batch.to_pylist()]
    if continue_on_error:
        assert got == [(1.5, 3), (None, None), (2.0, 4)] and result.failed == ()
    else:
        assert got == [(1.5, 3), (2.0, 4)] and [row for row, _ in result.failed] == [1]
        assert result.failed[0][1].startswith("the transform of column 'amount': ") and "oops" in result.failed[0][1]


def test_every_failing_row_of_a_large_batch_is_found() -> None:
    table = ingestion(transformConfigs=[{"columnName": "amount", "transformFunction": "CAST(raw AS DOUBLE)"}])
    rows = [{"raw": "x" if i % 97 == 0 else str(i)} for i in range(5_000)]
    result = decode(rows, table)
    assert [row for row, _ in result.failed] == [i for i in range(5_000) if i % 97 == 0]
    assert result.batch.num_rows == 5_000 - len(result.failed)


def test_a_batch_where_everything_is_filtered_is_empty_with_the_schema() -> None:
    result = decode([{"clicks": 1}, {"clicks": 2}], ingestion(filterConfig={"filterFunction": "clicks > 0"}))
    assert result.batch.num_rows == 0 and result.batch.schema.names == SCHEMA.column_names
    assert result.dropped_offsets.tolist() == [100, 101]


def test_nothing_configured_compiles_to_nothing() -> None:
    assert compile_ingestion(SCHEMA, ingestion().ingestion) is None
    assert decode_schema(SCHEMA, None) is SCHEMA


@pytest.mark.parametrize(("config", "path", "message"), [
    ({"filterConfig": {"filterFunction": "Groovy({clicks > 1}, clicks)"}},
     "$.ingestionConfig.filterConfig.filterFunction", "Groovy scripts are not supported"),
    ({"transformConfigs": [{"columnName": "day", "transformFunction": "no_such_function(country)"}]},
     "$.ingestionConfig.transformConfigs[0].transformFunction", "no_such_function does not exist"),
    ({"transformConfigs": [{"columnName": "day", "transformFunction": "cuvee_sha512(CAST(country AS BLOB))"}]},
     "$.ingestionConfig.transformConfigs[0].transformFunction", "unknown function"),
    ({"transformConfigs": [{"columnName": "day", "transformFunction": "upper(country"}]},
     "$.ingestionConfig.transformConfigs[0].transformFunction", "cannot parse"),
    ({"transformConfigs": [{"columnName": "day", "transformFunction": "SELECT 1"}]},
     "$.ingestionConfig.transformConfigs[0].transformFunction", "not an expression"),
    ({"filterConfig": {"filterFunction": "toDateTime(ts)"}},
     "$.ingestionConfig.filterConfig.filterFunction", "TODATETIME takes"),
])
def test_mistakes_are_reported_with_the_json_path(config: dict[str, Any], path: str, message: str) -> None:
    issues = ingestion_issues(SCHEMA, ingestion(**config).ingestion)
    assert [i.path for i in issues] == [path] and message in issues[0].message, issues
    with pytest.raises(TransformConfigError, match="cannot|not supported|takes"):
        compile_ingestion(SCHEMA, ingestion(**config).ingestion)


def test_apply_keeps_offsets_aligned_over_random_filters() -> None:
    rng = np.random.default_rng(3)
    clicks = rng.integers(0, 10, 500).tolist()
    rows = [{"clicks": c, "country": f"c{i}"} for i, c in enumerate(clicks)]
    result = decode(rows, ingestion(filterConfig={"filterFunction": "clicks % 3 = 0"}))
    kept = [i for i, c in enumerate(clicks) if c % 3 != 0]
    assert result.offsets.tolist() == [100 + i for i in kept]
    assert [r["country"] for r in result.batch.to_pylist()] == [f"c{i}" for i in kept]
    assert sorted(result.offsets.tolist() + result.dropped_offsets.tolist()) == list(range(100, 600))


@pytest.mark.parametrize("config", [
    {"transformConfigs": [{"columnName": "amount", "transformFunction": "random()"}]},
    {"transformConfigs": [{"columnName": "clicks", "transformFunction": "row_number() OVER ()"}]},
    {"filterConfig": {"filterFunction": "sum(clicks) > 0"}},
])
def test_expressions_that_bind_alone_but_cannot_run_in_the_statement_are_refused(config: dict[str, Any]) -> None:
    issues = ingestion_issues(SCHEMA, ingestion(**config).ingestion)
    assert issues and all(i.path.startswith("$.ingestionConfig") for i in issues), issues


def test_source_field_names_of_cuvees_own_are_refused() -> None:
    issues = ingestion_issues(SCHEMA, ingestion(filterConfig={"filterFunction": "__cuvee_row > 3"}).ingestion)
    assert any(i.path == "$.ingestionConfig" and "'__cuvee_row' is reserved" in i.message for i in issues), issues


LIMITED = Schema.from_json({"schemaName": "t", "dimensionFieldSpecs": [
    {"name": "s", "dataType": "STRING", "maxLength": 3},
    {"name": "d", "dataType": "STRING", "maxLength": 3, "maxLengthExceedStrategy": "SUBSTITUTE_DEFAULT_VALUE"},
    {"name": "m", "dataType": "STRING", "singleValueField": False, "maxLength": 2},
    {"name": "j", "dataType": "JSON", "maxLength": 4, "maxLengthExceedStrategy": "TRIM_LENGTH"},
    {"name": "b", "dataType": "BYTES", "maxLength": 2, "maxLengthExceedStrategy": "TRIM_LENGTH"},
    {"name": "n", "dataType": "JSON", "maxLength": 2},  # JSON's default strategy is NO_ACTION, as in Pinot
    {"name": "free", "dataType": "STRING"}]})  # no maxLength: kept whole (Pinot would cut it at 512)


def test_the_schemas_max_length_applies_at_ingestion_as_pinots_sanitization_does() -> None:
    transformer = compile_ingestion(LIMITED, ingestion().ingestion)
    assert transformer is not None  # a length limit alone needs the transform step
    rows = [{"s": "abcdé", "d": "abcd", "m": ["abc", "d"], "j": '{"é":1}', "b": "010203", "n": "long",
             "free": "x" * 600},
            {"s": "ab", "d": "x", "m": [], "j": "{}", "b": "", "n": "x", "free": "y"}]
    decoded = JsonDecoder(decode_schema(LIMITED, transformer)).decode([orjson.dumps(r) for r in rows], [0, 1])
    got = transformer.apply(decoded.batch, decoded.offsets).batch.to_pylist()
    # JSON counts characters: a cut never falls inside a multi-byte character (that failed the whole batch)
    assert got[0] == {"s": "abc", "d": "null", "m": ["ab", "d"], "j": '{"é"', "b": b"\x01\x02", "n": "long",
                      "free": "x" * 600}
    assert got[1] == {"s": "ab", "d": "x", "m": [], "j": "{}", "b": b"", "n": "x", "free": "y"}
    assert compile_ingestion(Schema.from_json({"schemaName": "t", "dimensionFieldSpecs": [
        {"name": "n", "dataType": "JSON", "maxLength": 2}]}), ingestion().ingestion) is None  # NO_ACTION only


def test_a_failure_whose_message_duckdb_cuts_mid_character_still_skips_only_its_row() -> None:
    """DuckDB cuts 'Malformed JSON ... Input:' inside a UTF-8 character: reading the reason raised
    UnicodeDecodeError, which failed the whole batch (every row a bad record)."""
    table = ingestion(transformConfigs=[{"columnName": "country",
                                         "transformFunction": "json_extract_string(payload, '$.city')"}])
    rows = [{"payload": orjson.dumps({"city": f"Zürich {i}"}).decode()} for i in range(20)]
    rows[10]["payload"] = '{"a": ' + "é" * 100 + " }"
    result = decode(rows, table)
    assert [row for row, _ in result.failed] == [10] and result.batch.num_rows == 19
    assert result.failed[0][1].startswith("the transform of column 'country'")


def _invalidate_the_ingestion_database(monkeypatch: pytest.MonkeyPatch) -> None:
    """DuckDB's own internal failure (as tests/query/test_engine_failure.py's) on the ingestion database."""
    import pyarrow as pa

    from cuvee.query import execute

    blobs = pa.table({"b": pa.DictionaryArray.from_arrays(pa.array([0, 1] * 60, pa.int32()),
                                                          pa.array([b"\xab\xcd", b"\xff"], pa.binary()))})
    with monkeypatch.context() as patch:
        patch.setattr(execute, "duckdb_readable", lambda t: t)
        con = execute.sandboxed_cursor(exact_try=True)
        with pytest.raises(Exception, match="unique_ptr"):
            execute.register(con, "t", blobs)
            con.sql("SELECT count(*) FROM t WHERE b = from_hex('abcd')").fetchall()
        con.close()


def test_ingestion_meeting_an_invalidated_database_runs_again_on_a_new_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """DuckDB invalidates a database after an internal error (a statement on another thread can cause it): every
    later statement fails with "database has been invalidated". A batch's transforms and a table's compile replace
    the database and run again, so rows are stored, not turned into bad records."""
    table = ingestion(transformConfigs=[{"columnName": "country", "transformFunction": "upper(country)"}])
    transformer = compile_ingestion(SCHEMA, table.ingestion)
    assert transformer is not None
    rows = [{"country": "nz", "ts": 0}, {"country": "fr", "ts": 1}]
    decoded = JsonDecoder(decode_schema(SCHEMA, transformer)).decode([orjson.dumps(r) for r in rows], [7, 8])
    _invalidate_the_ingestion_database(monkeypatch)
    result = transformer.apply(decoded.batch, decoded.offsets)
    assert [r["country"] for r in result.batch.to_pylist()] == ["NZ", "FR"] and result.failed == ()
    _invalidate_the_ingestion_database(monkeypatch)
    assert decode(rows, table).batch.num_rows == 2  # compile_ingestion (binding, types) runs again too
