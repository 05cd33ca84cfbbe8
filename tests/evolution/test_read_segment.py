"""Batch readers (the Spark data source's tasks, maintenance jobs) read a committed segment built before a column
was added with that column's default value, as servers serve it, instead of failing on the missing column."""

from __future__ import annotations

import copy
from pathlib import Path

import pyarrow as pa

from cuvee.config import IndexingConfig, Schema
from cuvee.deepstore import open_deepstore
from cuvee.pipeline.read_plan import SegmentSource
from cuvee.pipeline.scan import read_segment
from cuvee.segment.archive import ARCHIVE_SUFFIX, pack
from cuvee.segment.builder import build_segment
from tests.offline.support import SCHEMA, rows


def test_a_segment_read_under_a_later_schema_gets_the_added_columns_defaults(tmp_path: Path) -> None:
    built = build_segment(rows(range(5), 1000), Schema.from_json(SCHEMA), IndexingConfig(), tmp_path / "built",
                          "sales_0", table_name="sales", time_column="ts")
    deep_uri = (tmp_path / "deep").resolve().as_uri()
    uri = open_deepstore(deep_uri).put(pack(built.path, tmp_path / f"sales_0{ARCHIVE_SUFFIX}"),
                                       f"sales_OFFLINE/sales_0{ARCHIVE_SUFFIX}")
    evolved = copy.deepcopy(SCHEMA)
    evolved["dimensionFieldSpecs"].append({"name": "channel", "dataType": "STRING", "defaultNullValue": "web"})
    evolved["metricFieldSpecs"].append({"name": "units", "dataType": "INT"})
    schema = Schema.from_json(evolved)
    fields = [schema.column(n) for n in ("id", "channel", "units")]
    source = SegmentSource("sales_OFFLINE", "sales_0", built.crc, uri, 0, ())
    table = read_segment(source, fields, deep_store_uri=deep_uri, timeout_seconds=10, work_dir=str(tmp_path))
    assert table.column_names == ["id", "channel", "units"]
    assert table.schema.field("channel").type == pa.string()  # plain: what decoded-row readers expect
    assert table.to_pylist()[0] == {"id": 0, "channel": "web", "units": 0}
    assert table.column("channel").to_pylist() == ["web"] * 5
