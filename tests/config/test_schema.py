from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cuvee.config import ConfigValidationError, DataType, FieldRole, FieldSpec, Schema
from cuvee.config.datetime_format import TimeFormatKind
from tests.config.conftest import issues_of

Doc = Callable[[str], dict[str, Any]]


def schema(**specs: Any) -> Schema:
    return Schema.from_json({"schemaName": "s", **specs})


def errors(doc: Any) -> dict[str, str]:
    with pytest.raises(ConfigValidationError) as info:
        Schema.from_json(doc)
    return issues_of(info.value)


def dim(name: str, data_type: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "dataType": data_type, **extra}


def test_events_schema_parses(fixture_doc: Doc) -> None:
    events = Schema.from_json(fixture_doc("events_schema"))
    assert events.name == "events"
    assert events.column_names[:3] == ["event_id", "country", "device"]
    assert events.column("tags").single_value is False
    assert events.column("clicks").role is FieldRole.METRIC
    assert events.column("ts").role is FieldRole.DATE_TIME
    assert events.column("day").time_format is not None
    assert events.column("day").time_format.kind is TimeFormatKind.SIMPLE_DATE_FORMAT
    assert events.column("day").time_format.pattern == "yyyy-MM-dd"
    assert events.column("ts").time_format.millis_per_value == 1
    assert events.has_column("revenue") and not events.has_column("nope")
    assert events.primary_key_columns == ()


def test_unknown_column_lookup_names_the_schema(fixture_doc: Doc) -> None:
    with pytest.raises(KeyError, match="schema 'events' has no column 'nope'"):
        Schema.from_json(fixture_doc("events_schema")).column("nope")


def test_arrow_schema_follows_declaration_order_and_types(fixture_doc: Doc) -> None:
    arrow = Schema.from_json(fixture_doc("events_schema")).arrow_schema()
    assert arrow.field("event_id").type == pa.int64()
    assert arrow.field("tags").type == pa.list_(pa.string())
    assert arrow.field("is_bot").type == pa.bool_()
    assert arrow.field("clicks").type == pa.int32()
    assert arrow.field("latency_ms").type == pa.float32()
    assert arrow.field("ts").type == pa.timestamp("ms")
    assert arrow.names[0] == "event_id" and arrow.names[-1] == "day"


@pytest.mark.parametrize("name", ["events_schema", "rsvp_schema", "airline_schema"])
def test_round_trip(fixture_doc: Doc, name: str) -> None:
    parsed = Schema.from_json(fixture_doc(name))
    assert Schema.from_json(parsed.to_json()) == parsed


def test_unknown_keys_are_kept(fixture_doc: Doc) -> None:
    doc = {**fixture_doc("events_schema"), "enableColumnBasedNullHandling": True}
    written = Schema.from_json(doc).to_json()
    assert written["enableColumnBasedNullHandling"] is True
    user_agent = next(f for f in written["dimensionFieldSpecs"] if f["name"] == "user_agent")
    assert user_agent["maxLength"] == 1024


@pytest.mark.parametrize(("data_type", "dimension", "metric"), [
    ("INT", -(2**31), 0),
    ("LONG", -(2**63), 0),
    ("FLOAT", -math.inf, 0.0),
    ("DOUBLE", -math.inf, 0.0),
    ("BYTES", b"", b""),
])
def test_pinot_default_null_values(data_type: str, dimension: Any, metric: Any) -> None:
    parsed = schema(dimensionFieldSpecs=[dim("d", data_type)], metricFieldSpecs=[dim("m", data_type)])
    assert parsed.column("d").null_value == dimension
    assert parsed.column("m").null_value == metric


@pytest.mark.parametrize(("data_type", "default"), [
    ("STRING", "null"), ("JSON", "null"), ("BOOLEAN", False), ("TIMESTAMP", 0)])
def test_pinot_dimension_defaults_for_other_types(data_type: str, default: Any) -> None:
    assert schema(dimensionFieldSpecs=[dim("d", data_type)]).column("d").null_value == default


def test_date_time_columns_use_dimension_defaults() -> None:
    parsed = schema(dateTimeFieldSpecs=[dim("ts", "LONG")])
    assert parsed.column("ts").null_value == -(2**63)
    assert parsed.column("ts").format == "1:MILLISECONDS:EPOCH"


@pytest.mark.parametrize(("data_type", "given", "stored"), [
    ("INT", "5", 5),
    ("INT", 5.0, 5),
    ("LONG", 2**40, 2**40),
    ("FLOAT", "1.5", 1.5),
    ("DOUBLE", 2, 2.0),
    ("BOOLEAN", "true", True),
    ("BOOLEAN", "0", False),
    ("BOOLEAN", False, False),
    ("STRING", "n/a", "n/a"),
    ("JSON", {"a": 1}, '{"a":1}'),
    ("BYTES", "0aff", b"\x0a\xff"),
])
def test_configured_defaults_are_coerced(data_type: str, given: Any, stored: Any) -> None:
    field = schema(dimensionFieldSpecs=[dim("d", data_type, defaultNullValue=given)]).column("d")
    assert field.null_value == stored
    assert type(field.null_value) is type(stored)


@pytest.mark.parametrize(("data_type", "given"), [
    ("INT", "5.5"), ("INT", 2**31), ("INT", True), ("LONG", "many"), ("DOUBLE", "x"), ("DOUBLE", True),
    ("BOOLEAN", "yes"), ("BOOLEAN", 2), ("BYTES", "zz"), ("BYTES", 12),
])
def test_bad_defaults_are_reported_with_their_path(data_type: str, given: Any) -> None:
    found = errors({"schemaName": "s", "dimensionFieldSpecs": [dim("d", data_type, defaultNullValue=given)]})
    assert list(found) == ["$.dimensionFieldSpecs[0].defaultNullValue"]
    assert f"is not a valid {data_type}" in found["$.dimensionFieldSpecs[0].defaultNullValue"]


def test_bytes_default_round_trips_as_hex() -> None:
    parsed = schema(dimensionFieldSpecs=[dim("b", "BYTES", defaultNullValue="00ff10")])
    assert parsed.to_json()["dimensionFieldSpecs"][0]["defaultNullValue"] == "00ff10"
    assert Schema.from_json(parsed.to_json()) == parsed


def test_multi_value_dimensions() -> None:
    parsed = schema(dimensionFieldSpecs=[dim("tags", "INT", singleValueField=False)])
    assert parsed.column("tags").arrow_type() == pa.list_(pa.int32())
    assert parsed.column("tags").null_value == -(2**31)
    assert parsed.to_json()["dimensionFieldSpecs"][0]["singleValueField"] is False


def test_metrics_and_date_times_must_be_single_valued() -> None:
    found = errors({"schemaName": "s",
                    "metricFieldSpecs": [dim("m", "INT", singleValueField=False)],
                    "dateTimeFieldSpecs": [dim("t", "LONG", singleValueField=False)]})
    assert found == {"$.metricFieldSpecs[0].singleValueField": "a metric must be single-valued",
                     "$.dateTimeFieldSpecs[0].singleValueField": "a date-time column must be single-valued"}


@pytest.mark.parametrize("data_type", ["STRING", "BOOLEAN", "TIMESTAMP", "JSON"])
def test_metrics_must_be_numbers_or_bytes(data_type: str) -> None:
    found = errors({"schemaName": "s", "metricFieldSpecs": [dim("m", data_type)]})
    assert found == {"$.metricFieldSpecs[0].dataType":
                     f"a metric must be one of INT, LONG, FLOAT, DOUBLE, BYTES, not {data_type}"}


def test_bytes_metric_is_allowed_for_sketches() -> None:
    assert schema(metricFieldSpecs=[dim("hll", "BYTES")]).column("hll").role is FieldRole.METRIC


def test_bad_types_and_flags() -> None:
    found = errors({"schemaName": "s", "dimensionFieldSpecs": [
        dim("a", "VARCHAR"), {"dataType": "INT"}, dim("c", "INT", singleValueField="no"), "d"]})
    assert found == {
        "$.dimensionFieldSpecs[0].dataType":
            "'VARCHAR' is not one of INT, LONG, FLOAT, DOUBLE, BOOLEAN, TIMESTAMP, STRING, BYTES, JSON",
        "$.dimensionFieldSpecs[1].name": "required, a non-empty string",
        "$.dimensionFieldSpecs[2].singleValueField": "must be true or false",
        "$.dimensionFieldSpecs[3]": "a field spec must be a JSON object",
    }


def test_duplicate_columns_are_refused_even_across_roles() -> None:
    found = errors({"schemaName": "s", "dimensionFieldSpecs": [dim("a", "INT"), dim("a", "LONG")],
                    "metricFieldSpecs": [dim("a", "INT")]})
    assert found == {"$.dimensionFieldSpecs[1].name": "duplicate column 'a'",
                     "$.metricFieldSpecs[0].name": "duplicate column 'a'"}


@pytest.mark.parametrize(("data_type", "fmt", "kind", "millis"), [
    ("LONG", "1:MILLISECONDS:EPOCH", TimeFormatKind.EPOCH, 1),
    ("INT", "1:DAYS:EPOCH", TimeFormatKind.EPOCH, 86_400_000),
    ("LONG", "5:MINUTES:EPOCH", TimeFormatKind.EPOCH, 300_000),
    ("LONG", "EPOCH|SECONDS", TimeFormatKind.EPOCH, 1000),
    ("LONG", "EPOCH|HOURS|2", TimeFormatKind.EPOCH, 7_200_000),
    ("STRING", "1:SECONDS:SIMPLE_DATE_FORMAT:yyyy-MM-dd HH:mm:ss", TimeFormatKind.SIMPLE_DATE_FORMAT, 1000),
    ("INT", "1:DAYS:SIMPLE_DATE_FORMAT:yyyyMMdd", TimeFormatKind.SIMPLE_DATE_FORMAT, 86_400_000),
    ("STRING", "SIMPLE_DATE_FORMAT|yyyy-MM-dd", TimeFormatKind.SIMPLE_DATE_FORMAT, 1),
    ("TIMESTAMP", "TIMESTAMP", TimeFormatKind.TIMESTAMP, 1),
])
def test_date_time_formats(data_type: str, fmt: str, kind: TimeFormatKind, millis: int) -> None:
    parsed = schema(dateTimeFieldSpecs=[dim("t", data_type, format=fmt, granularity="1:SECONDS")])
    time_format = parsed.column("t").time_format
    assert time_format is not None
    assert time_format.kind is kind
    assert time_format.millis_per_value == millis


@pytest.mark.parametrize(("data_type", "fmt", "message"), [
    ("STRING", None, "required for a STRING date-time column"),
    ("LONG", "1:FORTNIGHTS:EPOCH", "'FORTNIGHTS' is not one of NANOSECONDS"),
    ("LONG", "0:SECONDS:EPOCH", "size '0' must be a positive integer"),
    ("LONG", "1:SECONDS", "is not a format like"),
    ("LONG", "1:SECONDS:ISO8601", "'ISO8601' is not one of EPOCH"),
    ("STRING", "1:DAYS:SIMPLE_DATE_FORMAT", "SIMPLE_DATE_FORMAT needs a pattern"),
    ("STRING", "1:SECONDS:EPOCH", "a EPOCH format needs dataType INT, LONG, TIMESTAMP, not STRING"),
    ("LONG", "EPOCH", "'EPOCH' is not a format like"),
])
def test_bad_date_time_formats(data_type: str, fmt: str | None, message: str) -> None:
    spec = dim("t", data_type) if fmt is None else dim("t", data_type, format=fmt)
    found = errors({"schemaName": "s", "dateTimeFieldSpecs": [spec]})
    assert list(found) == ["$.dateTimeFieldSpecs[0].format"]
    assert message in found["$.dateTimeFieldSpecs[0].format"]


@pytest.mark.parametrize("granularity", ["EONS", "1:EONS", "x:SECONDS", 5])
def test_bad_granularity(granularity: Any) -> None:
    found = errors({"schemaName": "s", "dateTimeFieldSpecs": [dim("t", "LONG", granularity=granularity)]})
    assert list(found) == ["$.dateTimeFieldSpecs[0].granularity"]


def test_primary_key_rules() -> None:
    specs = [dim("a", "INT"), dim("m", "INT", singleValueField=False)]
    found = errors({"schemaName": "s", "dimensionFieldSpecs": specs,
                    "primaryKeyColumns": ["a", "a", "zz", "m"]})
    assert found == {
        "$.primaryKeyColumns[1]": "column 'a' is listed twice",
        "$.primaryKeyColumns[2]": "unknown column 'zz'",
        "$.primaryKeyColumns[3]": "column 'm' is multi-valued; a primary key column must not be",
    }
    assert errors({"schemaName": "s", "dimensionFieldSpecs": [dim("a", "INT")], "primaryKeyColumns": "a"}) == {
        "$.primaryKeyColumns": "must be a list of column names"}


def test_primary_key_is_kept(fixture_doc: Doc) -> None:
    assert Schema.from_json(fixture_doc("rsvp_schema")).primary_key_columns == ("event_id", "member_id")


def test_legacy_and_unsupported_features_are_refused_clearly() -> None:
    found = errors({"schemaName": "s", "timeFieldSpec": {},
                    "dimensionFieldSpecs": [dim("a", "STRING", transformFunction="upper(b)")]})
    assert "incomingGranularitySpec" in found["$.timeFieldSpec"]
    assert "ingestionConfig.transformConfigs" in found["$.dimensionFieldSpecs[0].transformFunction"]
    converted = errors({"schemaName": "s", "timeFieldSpec": {
        "incomingGranularitySpec": {"name": "ms", "dataType": "LONG", "timeType": "MILLISECONDS"},
        "outgoingGranularitySpec": {"name": "days", "dataType": "INT", "timeType": "DAYS"}}})
    assert "ingestion transform" in converted["$.timeFieldSpec.outgoingGranularitySpec"]


def test_pinots_older_and_shorter_schema_forms_load_as_pinot_reads_them() -> None:
    """A legacy timeFieldSpec becomes the date-time column Pinot converts it to; a bare granularity unit is size 1
    (Pinot's own compatibility-test schema uses ``"granularity": "DAYS"`` with ``"format": "EPOCH|DAYS"``)."""
    legacy = Schema.from_json({"schemaName": "s", "dimensionFieldSpecs": [dim("a", "STRING")], "timeFieldSpec": {
        "incomingGranularitySpec": {"name": "day", "dataType": "STRING", "timeType": "DAYS",
                                    "timeFormat": "SIMPLE_DATE_FORMAT:yyyyMMdd"}}})
    assert legacy.to_json()["dateTimeFieldSpecs"] == [{"name": "day", "dataType": "STRING", "granularity": "1:DAYS",
                                                       "format": "1:DAYS:SIMPLE_DATE_FORMAT:yyyyMMdd"}]
    assert Schema.from_json(legacy.to_json()) == legacy  # stored in the current form, read back the same
    short = Schema.from_json({"schemaName": "s", "dateTimeFieldSpecs": [
        {"name": "DaysSinceEpoch", "dataType": "INT", "format": "EPOCH|DAYS", "granularity": "DAYS"}]})
    assert short.column("DaysSinceEpoch").name == "DaysSinceEpoch"
    assert "is not a granularity" in errors({"schemaName": "s", "dateTimeFieldSpecs": [
        {"name": "t", "dataType": "INT", "format": "EPOCH|DAYS", "granularity": "FORTNIGHTS"}]})[
        "$.dateTimeFieldSpecs[0].granularity"]


def test_schema_shape_problems() -> None:
    assert errors([]) == {"$": "a schema must be a JSON object"}
    assert errors({"schemaName": "s"}) == {"$": "a schema needs at least one column"}
    assert errors({"dimensionFieldSpecs": {}, "metricFieldSpecs": [dim("m", "INT")]}) == {
        "$.schemaName": "required, a non-empty string", "$.dimensionFieldSpecs": "must be a list"}


def test_many_problems_at_once() -> None:
    with pytest.raises(ConfigValidationError) as info:
        Schema.from_json({"schemaName": "s",
                          "dimensionFieldSpecs": [dim("a", "NOPE"), dim("b", "INT", defaultNullValue="x")],
                          "metricFieldSpecs": [dim("c", "STRING")],
                          "dateTimeFieldSpecs": [dim("d", "STRING")],
                          "primaryKeyColumns": ["zz"]})
    assert len(info.value.issues) == 5
    assert str(info.value).startswith("invalid schema 's': $.dimensionFieldSpecs[0].dataType:")


_DATA_TYPES = [t.value for t in DataType]
_DEFAULTS: dict[str, st.SearchStrategy[Any]] = {
    "INT": st.integers(-(2**31), 2**31 - 1),
    "LONG": st.integers(-(2**63), 2**63 - 1),
    "TIMESTAMP": st.integers(0, 2**50),
    "FLOAT": st.floats(allow_nan=False, width=32),
    "DOUBLE": st.floats(allow_nan=False),
    "BOOLEAN": st.booleans(),
    "STRING": st.text(max_size=10),
    "JSON": st.text(max_size=10),
    "BYTES": st.binary(max_size=8).map(bytes.hex),
}


@st.composite
def dimension_specs(draw: st.DrawFn, name: str) -> dict[str, Any]:
    data_type = draw(st.sampled_from(_DATA_TYPES))
    spec: dict[str, Any] = {"name": name, "dataType": data_type}
    if draw(st.booleans()):
        spec["singleValueField"] = False
    if draw(st.booleans()):
        spec["defaultNullValue"] = draw(_DEFAULTS[data_type])
    return spec


@given(st.data(), st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True), min_size=1, max_size=6,
                           unique=True))
def test_any_valid_schema_round_trips(data: st.DataObject, names: list[str]) -> None:
    specs = [data.draw(dimension_specs(name)) for name in names]
    parsed = Schema.from_json({"schemaName": "s", "dimensionFieldSpecs": specs,
                               "metricFieldSpecs": [{"name": "__m", "dataType": "DOUBLE"}]})
    again = Schema.from_json(parsed.to_json())
    assert again == parsed
    assert [isinstance(f, FieldSpec) for f in again.fields] == [True] * (len(names) + 1)


def test_max_length_and_its_strategy_are_read_checked_and_written_back() -> None:
    doc = {"schemaName": "t", "dimensionFieldSpecs": [
        {"name": "s", "dataType": "STRING", "maxLength": 10000},
        {"name": "b", "dataType": "BYTES", "maxLengthExceedStrategy": "trim_length"}]}
    schema = Schema.from_json(doc)
    s, b = schema.fields
    assert (s.length_limit, s.length_strategy) == (10000, "TRIM_LENGTH")
    assert (b.length_limit, b.length_strategy) == (512, "TRIM_LENGTH")  # a strategy alone: Pinot's 512
    assert schema.to_json()["dimensionFieldSpecs"][0]["maxLength"] == 10000
    for spec, path, words in [
            ({"name": "i", "dataType": "INT", "maxLength": 3}, "maxLength", "applies to STRING, JSON, BYTES"),
            ({"name": "s", "dataType": "STRING", "maxLength": 0}, "maxLength", "positive integer"),
            ({"name": "s", "dataType": "STRING", "maxLengthExceedStrategy": "ERROR"}, "maxLengthExceedStrategy",
             "not supported yet"),
            ({"name": "s", "dataType": "STRING", "maxLengthExceedStrategy": "CHOP"}, "maxLengthExceedStrategy",
             "is not one of")]:
        with pytest.raises(ConfigValidationError) as info:
            Schema.from_json({"schemaName": "t", "dimensionFieldSpecs": [spec]})
        assert words in issues_of(info.value)[f"$.dimensionFieldSpecs[0].{path}"]
