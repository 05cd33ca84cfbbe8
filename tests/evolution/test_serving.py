"""A segment's view under a later schema: its own columns untouched, added columns as their default null value
(in the schema's type, dictionary-encoded where segments encode them), removed ones not served, forced type
changes cast where the values convert."""

from __future__ import annotations

import copy
import math
from typing import Any

import pyarrow as pa
import pytest

from cuvee.config import IndexingConfig, Schema
from cuvee.evolution import serving
from cuvee.evolution.serving import ColumnTypeMismatch, ServedSchema, default_column
from cuvee.segment.builder import build_segment
from cuvee.server.queryable import CommittedSegment

ALL_TYPES: dict[str, Any] = {
    "schemaName": "t",
    "dimensionFieldSpecs": [
        {"name": "i", "dataType": "INT"}, {"name": "l", "dataType": "LONG"}, {"name": "f", "dataType": "FLOAT"},
        {"name": "b", "dataType": "BOOLEAN"}, {"name": "s", "dataType": "STRING"},
        {"name": "by", "dataType": "BYTES"}, {"name": "j", "dataType": "JSON"},
        {"name": "ms", "dataType": "STRING", "singleValueField": False},
        {"name": "mi", "dataType": "INT", "singleValueField": False},
    ],
    "metricFieldSpecs": [{"name": "d", "dataType": "DOUBLE"}],
    "dateTimeFieldSpecs": [{"name": "ts", "dataType": "TIMESTAMP", "format": "1:MILLISECONDS:EPOCH"}],
}
ROWS = pa.table({
    "i": pa.array([1, 2, 3], pa.int32()), "l": pa.array([10, 20, 30], pa.int64()),
    "f": pa.array([0.5, 1.5, None], pa.float32()), "b": pa.array([True, False, True]),
    "s": pa.array(["x", "y", None]), "by": pa.array([b"\x01", b"\x02", b""]), "j": pa.array(['{"a":1}', "[]", "1"]),
    "ms": pa.array([["a", "b"], [], ["c"]], pa.list_(pa.string())),
    "mi": pa.array([[1], [2, 3], []], pa.list_(pa.int32())), "d": pa.array([0.25, 0.5, 0.75]),
    "ts": pa.array([1000, 2000, 3000], pa.timestamp("ms")),
})


@pytest.fixture(scope="module")
def segment(tmp_path_factory: pytest.TempPathFactory) -> CommittedSegment:
    built = build_segment(ROWS, Schema.from_json(ALL_TYPES), IndexingConfig(), tmp_path_factory.mktemp("seg"),
                          "t_0", table_name="t")
    return CommittedSegment(built)


def _with(*added: dict[str, Any], drop: tuple[str, ...] = ()) -> ServedSchema:
    doc = copy.deepcopy(ALL_TYPES)
    doc["dimensionFieldSpecs"] = [f for f in doc["dimensionFieldSpecs"] if f["name"] not in drop] + list(added)
    return ServedSchema(Schema.from_json(doc))


def test_a_segment_built_under_the_schema_is_read_as_it_is(segment: CommittedSegment) -> None:
    view = segment.query_table()
    served = ServedSchema(Schema.from_json(ALL_TYPES))
    assert served.conform(view) is view  # no copy, no cast of any type
    assert served.conform(view.select(["s", "d"]), {"s", "d"}).equals(view.select(["s", "d"]))


@pytest.mark.parametrize(("spec", "expected"), [
    ({"name": "n", "dataType": "INT"}, [-(2**31)] * 3),
    ({"name": "n", "dataType": "LONG", "defaultNullValue": 7}, [7] * 3),
    ({"name": "n", "dataType": "FLOAT"}, [-math.inf] * 3),
    ({"name": "n", "dataType": "BOOLEAN", "defaultNullValue": "true"}, [True] * 3),
    ({"name": "n", "dataType": "STRING"}, ["null"] * 3),
    ({"name": "n", "dataType": "STRING", "defaultNullValue": "none"}, ["none"] * 3),
    ({"name": "n", "dataType": "BYTES", "defaultNullValue": "0aff"}, [b"\x0a\xff"] * 3),
    ({"name": "n", "dataType": "TIMESTAMP", "defaultNullValue": 5000}, [5000] * 3),
    ({"name": "n", "dataType": "STRING", "singleValueField": False}, [["null"]] * 3),
    ({"name": "n", "dataType": "LONG", "singleValueField": False, "defaultNullValue": 3}, [[3]] * 3),
])
def test_an_added_column_answers_its_default_in_the_schemas_type(segment: CommittedSegment, spec: dict[str, Any],
                                                                 expected: list[Any]) -> None:
    served = _with(spec)
    view = served.conform(segment.query_table())
    column = view.column("n")
    wanted = served.spec("n").arrow_type()
    logical = column.type.value_type if pa.types.is_dictionary(column.type) else column.type
    assert logical == wanted
    values = column.to_pylist()
    if pa.types.is_timestamp(wanted):
        values = [int(v.timestamp() * 1000) for v in values]
    assert values == expected
    assert view.column_names == [*served.names]  # the schema's order; the segment's own columns untouched
    assert view.column("s").equals(segment.query_table().column("s"))


def test_string_defaults_are_dictionary_encoded_and_share_one_buffer() -> None:
    doc = {"schemaName": "t", "dimensionFieldSpecs": [{"name": "c", "dataType": "STRING"}]}
    spec = Schema.from_json(doc).column("c")
    small, large = default_column(spec, 10), default_column(spec, 5000)
    assert pa.types.is_dictionary(small.type) and small.dictionary.to_pylist() == ["null"]
    again = default_column(spec, 4000)
    assert again.indices.buffers()[1].address == large.indices.buffers()[1].address  # a slice, not a new array


def test_the_cache_holds_no_decoded_copy_of_an_encoded_default_and_never_grows_past_its_cap(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A dictionary-encoded default keeps only the shared ids (its decoded values were built and kept too: 676 MB
    for ten added STRING columns over one 5M-row segment); cached arrays grow by doubling up to ``_CACHED_ROWS``
    rows and no further (doubling once went to twice the cap)."""
    monkeypatch.setattr(serving, "_CACHED_ROWS", 4096)
    monkeypatch.setattr(serving, "_CONSTANTS", serving._Constants())
    schema = Schema.from_json({"schemaName": "t", "dimensionFieldSpecs": [
        {"name": f"c{i}", "dataType": "STRING", "defaultNullValue": f"d{i}"} for i in range(3)],
        "metricFieldSpecs": [{"name": "m", "dataType": "LONG", "defaultNullValue": 9}]})
    for i in range(3):
        column = default_column(schema.column(f"c{i}"), 3000)
        assert column.dictionary.to_pylist() == [f"d{i}"] and len(column) == 3000
    assert set(serving._CONSTANTS._arrays) == {("ids", "")}
    assert default_column(schema.column("c0"), 10, encoded=False).to_pylist() == ["d0"] * 10  # plain: made then
    assert default_column(schema.column("m"), 3000).to_pylist() == [9] * 3000
    assert default_column(schema.column("m"), 4000).to_pylist() == [9] * 4000  # grows: to the cap, not 6000
    assert default_column(schema.column("m"), 5000).to_pylist() == [9] * 5000  # past the cap: made, not kept
    assert max(len(a) for a in serving._CONSTANTS._arrays.values()) <= 4096


def test_only_the_wanted_columns_are_served_and_removed_ones_are_not(segment: CommittedSegment) -> None:
    served = _with({"name": "n", "dataType": "INT"}, drop=("s", "j"))
    view = served.conform(segment.query_table().append_column("__cuvee_valid", pa.array([True] * 3)), {"n", "l"})
    assert view.column_names == ["l", "n", "__cuvee_valid"]
    assert "s" not in served.conform(segment.query_table()).column_names


def test_a_forced_type_change_is_cast_where_the_values_convert(segment: CommittedSegment) -> None:
    doc = copy.deepcopy(ALL_TYPES)
    doc["dimensionFieldSpecs"][1] = {"name": "l", "dataType": "STRING"}  # LONG -> STRING: converts
    assert ServedSchema(Schema.from_json(doc)).conform(segment.query_table()).column("l").to_pylist() == [
        "10", "20", "30"]
    doc["dimensionFieldSpecs"][4] = {"name": "s", "dataType": "LONG"}  # 'x' -> LONG: does not
    with pytest.raises(ColumnTypeMismatch, match="column 's' is stored as string but the schema now says int64"):
        ServedSchema(Schema.from_json(doc)).conform(segment.query_table())


def test_describe_says_where_each_served_column_comes_from(segment: CommittedSegment) -> None:
    served = _with({"name": "n", "dataType": "STRING", "defaultNullValue": "none"}, drop=("j",))
    stored = {name: meta.data_type for name, meta in segment.segment.metadata.columns.items()}
    described = {c["name"]: c for c in served.describe(stored)}
    assert described["n"] == {"name": "n", "dataType": "STRING", "fieldType": "DIMENSION", "singleValue": True,
                              "source": "default", "defaultNullValue": "none"}
    assert described["l"]["source"] == "segment" and described["j"] == {"name": "j", "storedDataType": "JSON",
                                                                         "source": "notServed"}
