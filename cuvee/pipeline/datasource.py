"""The ``cuvee`` PySpark data source: ``spark.read.format("cuvee")`` and ``df.write.format("cuvee")``.

Reads: the schema comes from the controller (the ``columns`` option picks and orders columns: Spark's Python
API has no column pruning); the driver plans the scan once (``read_plan``: the halves a query would read, the
segments lineage lets it see, skipped by time range) into partitions of a few segments; each task reads its
segments' archives straight from the deep store (``scan``) and yields Arrow batches. Filters Spark pushes
(``spark.sql.python.filterPushdown.enabled``) that Arrow evaluates exactly are applied in the tasks and not
handed back. Writes: ``CuveeWriter`` (segments built in tasks, pushed under one lineage replace).

Options (names case-insensitive): ``controller`` and ``table`` (required); reads: ``columns`` (comma list),
``segmentsPerPartition`` (1 for up to 16 segments, growing to 4), ``includeConsuming`` (false), ``deepStore`` (the controller's), ``timeoutSeconds``
(300), ``workDir`` (temporary files; the system's); writes: ``rowsPerSegment`` (5,000,000), ``deepStore``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from cuvee.cluster.time_boundary import hybrid_halves
from cuvee.config import Schema, TableType
from cuvee.config.schema import FieldSpec
from cuvee.lineage.rules import hidden_segments
from cuvee.pipeline.controller_client import ControllerClient, PipelineError
from cuvee.pipeline.convert import spark_arrow_type
from cuvee.pipeline.predicates import Predicate, from_spark
from cuvee.pipeline.read_plan import (HalfState, PlanCounts, SegmentSource, check_splittable, group_partitions,
                                      plan_sources)
from cuvee.pipeline.scan import scan
from cuvee.pipeline.writer import CuveeWriter
from cuvee.protocol.query import TimeFilter

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Options:
    controller: str
    table: str
    columns: tuple[str, ...] | None = None
    segments_per_partition: int | None = None  # None: read_plan.default_per_partition
    include_consuming: bool = False
    deep_store: str | None = None
    timeout_seconds: float = 300.0
    work_dir: str | None = None
    rows_per_segment: int = 5_000_000

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> Options:
        given = {str(k).lower(): v for k, v in raw.items()}
        controller, table = given.get("controller"), given.get("table")
        if not controller or not table:
            raise PipelineError('the cuvee data source needs .option("controller", URL) and .option("table", NAME)')
        columns = given.get("columns")
        return cls(
            controller=controller, table=table,
            columns=tuple(c.strip() for c in columns.split(",") if c.strip()) if columns else None,
            segments_per_partition=_integer(given, "segmentsPerPartition", None),
            include_consuming=_boolean(given, "includeConsuming"),
            deep_store=given.get("deepstore") or None,
            timeout_seconds=float(_integer(given, "timeoutSeconds", 300) or 300),
            work_dir=given.get("workdir") or None,
            rows_per_segment=_integer(given, "rowsPerSegment", 5_000_000) or 5_000_000)


def _integer(given: Mapping[str, str], name: str, default: int | None) -> int | None:
    text = given.get(name.lower())
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise PipelineError(f"option {name} must be a positive integer, got {text!r}") from None
    if value < 1:
        raise PipelineError(f"option {name} must be a positive integer, got {text!r}")
    return value


def _boolean(given: Mapping[str, str], name: str) -> bool:
    text = str(given.get(name.lower(), "false")).strip().lower()
    if text not in ("true", "false"):
        raise PipelineError(f"option {name} must be true or false, got {text!r}")
    return text == "true"


def _fields(schema: Schema, columns: Sequence[str] | None, table: str) -> list[FieldSpec]:
    names = list(columns) if columns is not None else [f.name for f in schema.fields]
    unknown = [n for n in names if not schema.has_column(n)]
    if unknown:
        raise PipelineError(f"table {table!r} has no column(s) {', '.join(map(repr, unknown))}; it has "
                            f"{', '.join(f.name for f in schema.fields)}")
    return [schema.column(n) for n in dict.fromkeys(names)]


def spark_schema(fields: Sequence[FieldSpec]) -> StructType:
    return from_arrow_schema(pa.schema([pa.field(f.name, spark_arrow_type(f)) for f in fields]))


class CuveeDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "cuvee"

    def schema(self) -> StructType:
        options = Options.parse(self.options)
        with ControllerClient(options.controller, timeout_seconds=options.timeout_seconds) as client:
            return spark_schema(_fields(client.schema(options.table), options.columns, options.table))

    def reader(self, schema: StructType) -> CuveeReader:
        return CuveeReader(Options.parse(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> CuveeWriter:
        options = Options.parse(self.options)
        return CuveeWriter(options.controller, options.table, overwrite, deep_store=options.deep_store,
                           rows_per_segment=options.rows_per_segment)


class CuveeReader(DataSourceReader):
    """Built and planned on the driver; pickled to the tasks, which only ``read``."""

    def __init__(self, options: Options, schema: StructType):
        self.options = options
        with ControllerClient(options.controller, timeout_seconds=options.timeout_seconds) as client:
            self.table_schema = client.schema(options.table)
            self.deep_store = options.deep_store or client.deep_store_uri()
        self.fields = _fields(self.table_schema, [f.name for f in schema.fields], options.table)
        expected = spark_schema(self.fields)
        for given, ours in zip(schema.fields, expected.fields):
            if given.dataType != ours.dataType:
                raise PipelineError(f"column {given.name!r} of {options.table!r} reads as {ours.dataType.simpleString()}"
                                    f", not {given.dataType.simpleString()}")
        self.predicates: list[Predicate] = []

    def pushFilters(self, filters: list[Any]) -> Iterator[Any]:  # noqa: N802 - Spark's name
        names = {f.name for f in self.fields}
        for spark_filter in filters:
            predicate = from_spark(spark_filter, self.table_schema)
            if predicate is None or predicate.column not in names:
                yield spark_filter  # Spark evaluates it
            else:
                self.predicates.append(predicate)

    def partitions(self) -> list[InputPartition]:
        sources = self._plan()
        groups = group_partitions(sources, self.options.segments_per_partition)
        return [InputPartition(group) for group in groups] or [InputPartition(())]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        for source in partition.value:
            yield from scan(source, self.fields, self.predicates, deep_store_uri=self.deep_store,
                            timeout_seconds=self.options.timeout_seconds, work_dir=self.options.work_dir)

    def _plan(self) -> list[SegmentSource]:
        table = self.options.table
        with ControllerClient(self.options.controller, timeout_seconds=self.options.timeout_seconds) as client:
            parts = client.tables(table)
            counts, sources, urls = PlanCounts(), [], InstanceUrls(client)
            for table_type, time_filter in self._halves(client, parts).items():
                config = parts[table_type]
                time_spec = self.table_schema.column(config.time_column) \
                    if config.time_column and self.table_schema.has_column(config.time_column) else None
                half = half_state(client, table, table_type, config.name_with_type, time_filter, urls)
                sources += plan_sources(half, include_consuming=self.options.include_consuming,
                                        predicates=self.predicates, time_spec=time_spec, counts=counts)
        log.info("cuvee read of %s: %d segment(s); skipped by time range %d, consuming %d, without metadata %d",
                 table, len(sources), counts.pruned, counts.consuming_skipped, counts.without_record)
        return sources

    def _halves(self, client: ControllerClient, parts: Mapping[TableType, Any]) -> dict[TableType, TimeFilter | None]:
        if len(parts) == 1:
            return {next(iter(parts)): None}
        check_splittable(self.options.table, self.table_schema, parts[TableType.OFFLINE].time_column)
        boundary = client.time_boundary(self.options.table)
        view = client.external_view(self.options.table, TableType.REALTIME)
        hidden = hidden_segments(client.lineage(self.options.table, TableType.REALTIME))
        return hybrid_halves(boundary[1] if boundary else None, boundary[0] if boundary else None,
                             bool(set(view) - hidden))


PLAN_ATTEMPTS = 5


def half_state(client: ControllerClient, table: str, table_type: TableType, full_name: str,
                time_filter: TimeFilter | None, urls: InstanceUrls) -> HalfState:
    """One half as one snapshot: the lineage read before and after the segments must agree, else a replace (or
    its clean-up) ran in between and the visible set could mix old and new segments; read again."""
    for _ in range(PLAN_ATTEMPTS):
        lineage = client.lineage(table, table_type)
        records, ideal = client.segment_records(table, table_type), client.ideal_state(table, table_type)
        view = client.external_view(table, table_type)
        if client.lineage(table, table_type) == lineage:
            return HalfState(table=full_name, records=records, ideal=ideal, view=view,
                             hidden=hidden_segments(lineage),
                             urls=urls.of(i for replicas in view.values() for i in replicas), time_filter=time_filter)
    raise PipelineError(f"the lineage of {full_name} kept changing while the read was planned; run it again")


class InstanceUrls:
    """Instance id → HTTP base URL, each asked of the controller once per plan."""

    def __init__(self, client: ControllerClient):
        self._client = client
        self._known: dict[str, str | None] = {}

    def of(self, instance_ids: Any) -> dict[str, str]:
        for instance_id in instance_ids:
            if instance_id not in self._known:
                self._known[instance_id] = self._client.instance_url(instance_id)
        return {i: url for i, url in self._known.items() if url is not None}
