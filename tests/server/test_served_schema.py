"""The query executor under a served schema (``cuvee.server.served_schemas``): a column added since the segments
were built answers its default in committed and consuming segments alike, beside segments that hold it; before
the table is served under the new schema, a query naming the column is told to reload the table."""

from __future__ import annotations

import copy

import pyarrow as pa
import pytest

from cuvee.config import IndexingConfig, Schema
from cuvee.segment.builder import build_segment
from cuvee.server.query_executor import QueryExecutor
from cuvee.server.queryable import CommittedSegment
from cuvee.server.registry import SegmentRegistry
from cuvee.server.served_schemas import ServedSchemas
from cuvee.server.tables import TableContext
from tests.broker.helpers import SCHEMA_DOC, TABLE, TABLE_DOC, MutableView, committed, event_rows, segment_name
from tests.server.test_query_executor import request

EVOLVED = copy.deepcopy(SCHEMA_DOC)
EVOLVED["dimensionFieldSpecs"].append({"name": "color", "dataType": "STRING", "defaultNullValue": "none"})
EVOLVED["metricFieldSpecs"].append({"name": "w", "dataType": "LONG", "defaultNullValue": 5})


class _Source:
    """A table whose served version is ``doc``'s (3)."""

    def __init__(self, doc: dict):
        self.doc = doc

    def served_version(self, table: str) -> tuple[str, int]:
        return "events", 3

    def schema_at(self, name: str, version: int) -> Schema:
        return Schema.from_json(self.doc)

    def get(self, table: str) -> TableContext:
        from cuvee.config import TableConfig

        return TableContext(TableConfig.from_json(TABLE_DOC), Schema.from_json(self.doc), "events")


def _schemas(doc: dict) -> ServedSchemas:
    schemas = ServedSchemas(_Source(doc))
    schemas.ensure(TABLE)
    return schemas


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> SegmentRegistry:
    """Two old committed segments (300 and 250 rows), an old consuming one (120), and a committed one built under
    the new schema (40 rows, color 'red', w 2)."""
    work = tmp_path_factory.mktemp("segments")
    registry = SegmentRegistry()
    registry.put(TABLE, committed(work, segment_name(0, 0), event_rows(300, 0, 1)))
    registry.put(TABLE, committed(work, segment_name(0, 1), event_rows(250, 300, 2)))
    registry.put(TABLE, MutableView(segment_name(0, 2), event_rows(120, 550, 3)))
    newer = event_rows(40, 1000, 4)
    newer = newer.append_column("color", pa.array(["red"] * 40)).append_column("w", pa.array([2] * 40, pa.int64()))
    built = build_segment(newer, Schema.from_json(EVOLVED), IndexingConfig(), work, segment_name(1, 0),
                          table_name=TABLE, time_column="ts", overwrite=True)
    registry.put(TABLE, CommittedSegment(built))
    return registry


NAMES = [segment_name(0, 0), segment_name(0, 1), segment_name(0, 2), segment_name(1, 0)]


def test_an_added_column_answers_its_default_in_old_committed_and_consuming_segments(registry) -> None:
    executor = QueryExecutor(registry, schemas=_schemas(EVOLVED))
    sql = "SELECT color, COUNT(*) AS n, SUM(w) AS s FROM cuvee_segments GROUP BY color ORDER BY color"
    result, stats = executor.execute(request(sql, NAMES))
    assert stats.exceptions == () and result is not None
    assert result.to_pylist() == [{"color": "none", "n": 670, "s": 670 * 5}, {"color": "red", "n": 40, "s": 80}]
    consuming_only, stats = executor.execute(request("SELECT DISTINCT color, w FROM cuvee_segments", NAMES[2:3]))
    assert stats.exceptions == () and consuming_only.to_pylist() == [{"color": "none", "w": 5}]


def test_a_column_not_served_yet_is_an_error_that_says_to_reload(registry) -> None:
    """Served under the old schema (no reload since the update): the new segment's column is not served either,
    and the answer says why instead of DuckDB's words, or a 500 from joining segments of different columns."""
    executor = QueryExecutor(registry, schemas=_schemas(SCHEMA_DOC))
    result, stats = executor.execute(request("SELECT color, COUNT(*) FROM cuvee_segments GROUP BY color", NAMES))
    assert result is None
    [error] = stats.exceptions
    assert error.message.startswith("column 'color' is not served by this server: if it was added to the schema of "
                                    "events lately, reload the table (POST /segments/events/reload)")
    counted, stats = executor.execute(request("SELECT COUNT(*) AS n, SUM(v) AS s FROM cuvee_segments", NAMES))
    assert stats.exceptions == () and counted.column("n").to_pylist() == [710]


class _Encoded:
    """A segment whose view holds ``color`` dictionary-encoded (as a consuming segment's view does), where the
    committed one gives its plain copy."""

    is_consuming = False
    last_ingestion_ms = None

    def __init__(self, name: str, rows: pa.Table):
        self.name, self._rows = name, rows

    @property
    def num_docs(self) -> int:
        return self._rows.num_rows

    def to_arrow(self) -> pa.Table:
        return self._rows


def test_segments_of_different_columns_join_without_a_served_schema(registry) -> None:
    """No schema read yet (a server that has not heard of the table's schema): views as stored. A column the
    first segment lacks, held encoded by one and plain by another, was a 500 (pyarrow could not join them)."""
    encoded = event_rows(10, 2000, 5).append_column("color", pa.array(["red"] * 10).dictionary_encode())
    registry.put(TABLE, _Encoded(segment_name(2, 0), encoded))
    try:
        result, stats = QueryExecutor(registry).execute(
            request("SELECT COUNT(*) AS n FROM cuvee_segments WHERE color = 'red'", [*NAMES, segment_name(2, 0)]))
    finally:
        registry.remove(TABLE, segment_name(2, 0))
    assert stats.exceptions == () and result.column("n").to_pylist() == [50]


class _Versions:
    """A table's recorded served version (None: none recorded) and each version's schema."""

    def __init__(self) -> None:
        self.recorded: tuple[str, int] | None = None
        self.latest = SCHEMA_DOC
        self.reads = 0

    def served_version(self, table: str) -> tuple[str, int] | None:
        return self.recorded

    def schema_at(self, name: str, version: int) -> Schema:
        self.reads += 1
        doc = copy.deepcopy(EVOLVED)
        doc["dimensionFieldSpecs"][-1]["defaultNullValue"] = f"v{version}"
        return Schema.from_json(doc)

    def get(self, table: str) -> TableContext:
        from cuvee.config import TableConfig

        return TableContext(TableConfig.from_json(TABLE_DOC), Schema.from_json(self.latest), "events")


def _default(schemas: ServedSchemas) -> object:
    served = schemas.get(TABLE)
    assert served is not None
    spec = served.spec("color")
    return None if spec is None else spec.null_value


def test_a_segment_arriving_serves_the_recorded_version_and_a_table_without_one_keeps_its_first_read() -> None:
    source = _Versions()
    schemas = ServedSchemas(source)
    schemas.ensure(TABLE)  # no version recorded (a table from before versions): the latest schema, read once
    assert schemas.get(TABLE).version == -1 and _default(schemas) is None
    source.latest = EVOLVED
    schemas.ensure(TABLE)
    assert _default(schemas) is None  # not re-read: only a reload changes what is served
    assert schemas.refresh(TABLE).spec("color") is not None

    source.recorded = ("events", 4)  # recorded by a reload this server missed (it held none of the segments)
    schemas.ensure(TABLE)
    assert schemas.get(TABLE).version == 4 and _default(schemas) == "v4"
    reads = source.reads
    schemas.ensure(TABLE)  # the same version: nothing read again
    assert source.reads == reads
    source.recorded = ("events", 3)  # a read that raced a newer reload: never back to an older version
    schemas.ensure(TABLE)
    assert schemas.refresh(TABLE).version == 4
    source.recorded = None  # cannot happen while the table lives; what was recorded is kept
    schemas.ensure(TABLE)
    assert schemas.get(TABLE).version == 4
    schemas.forget(TABLE)  # the table is deleted: one created again under its name starts afresh
    source.recorded = ("events", 0)
    schemas.ensure(TABLE)
    assert schemas.get(TABLE).version == 0 and _default(schemas) == "v0"
