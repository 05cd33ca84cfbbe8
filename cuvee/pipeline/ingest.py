"""The ingest job: files (Parquet, JSON, CSV, ORC) into an OFFLINE table, built on Spark.

Stages, none of which brings rows to the driver:
1. Spark reads the input; a ``mapInArrow`` task converts each Arrow batch to the table's schema (bad rows set
   aside with their reason), applies the ingestion transforms and filter, and tags rows with their time bucket
   (the push frequency) and partition (``segmentPartitionConfig``).
2. Rows are shuffled by (bucket, partition) and sorted within each task on every column, so the same input
   always builds the same bytes; a second ``mapInArrow`` builds the segments with the servers' builder, packs them
   and writes them to the deep store, returning one small metadata row per segment.
3. The driver plans the replace (``cuvee.pipeline.replace``) and pushes the metadata under one lineage entry:
   startReplaceSegments → metadata push → endReplaceSegments. A job that dies before the end leaves the old data
   served; the next run's start cleans up after it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

import orjson

from cuvee.config import Schema, TableConfig
from cuvee.controller import faults
from cuvee.decode.transform import compile_ingestion
from cuvee.deepstore import open_deepstore
from cuvee.lineage.rules import INPUT_KEY
from cuvee.pipeline.controller_client import ControllerClient, PipelineError
from cuvee.pipeline.convert import convert_batch, to_wire
from cuvee.pipeline.replace import ReplaceError, ReplacePlan, plan_replace
from cuvee.pipeline.segments import BUCKET, PART, BuildSpec, bucket_and_partition, build_groups
from cuvee.segment.partitioning import partition_spec
from cuvee.spi.deepstore import DeepStoreError

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

FORMATS = ("parquet", "json", "csv", "orc")
BAD = "__bad"
FILTERED_MARK = "\0filtered"  # a side row that only carries the filter's count
FILTERED = "__filtered"
METADATA_FIELDS = ("segmentName", "downloadUri", "crc", "totalDocs", "sizeBytes", "timeMin", "timeMax")


@dataclass(frozen=True)
class IngestOptions:
    controller: str
    table: str
    input: str
    format: str | None = None
    mode: str | None = None  # append | refresh; default: the table's segmentPushType
    deep_store: str | None = None
    bad_rows_dir: str | None = None
    rows_per_segment: int = 5_000_000


@dataclass
class IngestSummary:
    rows_in: int = 0
    rows_out: int = 0
    bad_rows: int = 0
    filtered_rows: int = 0
    segments: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    bytes: int = 0
    seconds: float = 0.0
    bad_rows_path: str | None = None
    lineage_entry: str | None = None


def guess_format(path: str) -> str:
    lowered = path.lower().rstrip("/*")
    for fmt, suffixes in (("parquet", (".parquet", ".pq")), ("json", (".json", ".jsonl", ".ndjson")),
                          ("csv", (".csv",)), ("orc", (".orc",))):
        if lowered.endswith(suffixes):
            return fmt
    raise PipelineError(f"cannot tell the format of {path!r}: pass --format {'|'.join(FORMATS)}")


def read_input(spark: SparkSession, path: str, fmt: str) -> DataFrame:
    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.option("header", "true")  # values stay text; the conversion coerces them
    try:
        return reader.load(path)
    except Exception as exc:  # Spark's AnalysisException: path not found, unreadable file
        raise PipelineError(f"cannot read {fmt} input {path!r}: {str(exc).splitlines()[0]}") from None


def input_identity(path: str, files: list[str], table: TableConfig, schema: Schema) -> tuple[str, str]:
    """(input key, fingerprint): the key names the input as given (an APPEND re-run replaces what the previous run
    over it pushed); the fingerprint also covers each file's size and modification time (local files) and the
    table config and schema the segments are built for, so changed files or configs make new segment names."""
    key = hashlib.sha1(os.path.normpath(path).encode()).hexdigest()[:16]
    digest = hashlib.sha1(orjson.dumps([table.to_json(), schema.to_json()], option=orjson.OPT_SORT_KEYS))
    for name in sorted(files):
        local = name.removeprefix("file://")
        try:
            stat = os.stat(local)
            digest.update(f"{name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
        except OSError:
            digest.update(f"{name}\n".encode())  # not a local file: its name alone
    return key, digest.hexdigest()[:8]


def _convert_fn(table_json: dict[str, Any],
                schema_json: dict[str, Any]) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def convert(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        table, schema = TableConfig.from_json(table_json), Schema.from_json(schema_json)
        transformer = compile_ingestion(schema, table.ingestion)
        out_schema = _stage_schema(schema)
        for batch in batches:
            converted = convert_batch(batch, schema, transformer)
            good = converted.batch
            buckets, parts = bucket_and_partition(good, table, schema)
            n = good.num_rows
            yield pa.RecordBatch.from_arrays(
                [*(to_wire(good.column(f.name), f) for f in schema.fields), buckets, parts,
                 pa.nulls(n, pa.string()), pa.nulls(n, pa.int64())], schema=out_schema)
            if converted.bad or converted.filtered:
                yield _side_rows(out_schema, converted.bad, converted.filtered)
    return convert


def _side_rows(out_schema: pa.Schema, bad: list[str], filtered: int) -> pa.RecordBatch:
    """Bad rows as text in ``__bad`` (one row each), and the filter's drop count in ``__filtered`` (one row, with
    FILTERED_MARK in ``__bad`` when no bad row carries it): the counts travel with the data, no accumulator."""
    texts = bad or [FILTERED_MARK]
    k = len(texts)
    arrays = [pa.nulls(k, f.type) for f in out_schema][:-2]
    counts = [filtered] + [0] * (k - 1)
    return pa.RecordBatch.from_arrays([*arrays, pa.array(texts, pa.string()), pa.array(counts, pa.int64())],
                                      schema=out_schema)


def _stage_schema(schema: Schema) -> pa.Schema:
    fields = [pa.field(f.name, pa.int64() if f.data_type.value == "TIMESTAMP" and f.single_value else f.arrow_type())
              for f in schema.fields]
    return pa.schema([*fields, pa.field(BUCKET, pa.int64()), pa.field(PART, pa.int32()),
                      pa.field(BAD, pa.string()), pa.field(FILTERED, pa.int64())])


def _build_fn(spec: BuildSpec) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def build(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for meta in build_groups(batches, spec):
            yield pa.RecordBatch.from_pylist([meta], schema=METADATA_ARROW)
    return build


METADATA_ARROW = pa.schema([("segmentName", pa.string()), ("downloadUri", pa.string()), ("crc", pa.int64()),
                            ("totalDocs", pa.int64()), ("sizeBytes", pa.int64()), ("timeMin", pa.int64()),
                            ("timeMax", pa.int64())])


def spark_schema(arrow: pa.Schema) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(arrow)


def build_segments(df: DataFrame, table: TableConfig, schema: Schema, deep_store_uri: str, fingerprint: str,
                   *, rows_per_segment: int, summary: IngestSummary, bad_rows_dir: str | None) -> list[dict[str, Any]]:
    """Stages 1 and 2 on Spark; returns the built segments' metadata (small) and fills the summary's counts."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    table_json, schema_json = table.to_json(), schema.to_json()
    staged = df.mapInArrow(_convert_fn(table_json, schema_json), spark_schema(_stage_schema(schema)))
    staged = staged.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        totals = staged.agg(
            F.count(F.when(F.col(BAD).isNull(), 1)).alias("good"),
            F.count(F.when(F.col(BAD).isNotNull() & (F.col(BAD) != FILTERED_MARK), 1)).alias("bad"),
            F.sum(F.col(FILTERED)).alias("filtered")).collect()[0]
        summary.rows_out = int(totals["good"])
        summary.bad_rows = int(totals["bad"])
        summary.filtered_rows = int(totals["filtered"] or 0)
        summary.rows_in = summary.rows_out + summary.bad_rows + summary.filtered_rows
        if summary.bad_rows and bad_rows_dir:
            bad = staged.where(F.col(BAD).isNotNull() & (F.col(BAD) != FILTERED_MARK)).select(F.col(BAD).alias("value"))
            bad.write.mode("overwrite").text(bad_rows_dir)
            summary.bad_rows_path = bad_rows_dir
        good = staged.where(F.col(BAD).isNull()).drop(BAD, FILTERED)
        order = [BUCKET, PART] + [f.name for f in schema.fields]
        spec = BuildSpec(table_json, schema_json, deep_store_uri, fingerprint, rows_per_segment,
                         run_id=uuid.uuid4().hex[:8])
        built = (good.repartition(BUCKET, PART).sortWithinPartitions(*order)
                 .mapInArrow(_build_fn(spec), spark_schema(METADATA_ARROW)).collect())
    finally:
        staged.unpersist()
    return [{k: row[k] for k in METADATA_FIELDS} for row in built]


def push_replace(client: ControllerClient, table: str, built: list[dict[str, Any]], *, refresh: bool,
                 input_key: str, deep_store_uri: str, allow_empty: bool = False) -> tuple[ReplacePlan, str | None]:
    """Stage 3: plan, then startReplaceSegments → metadata push → endReplaceSegments (nothing when nothing
    changed). Returns the plan and the lineage entry id. A run that built nothing replaces nothing unless
    ``allow_empty`` (a DataFrame overwrite with no rows): all-bad input must not empty a table. Archives of
    segments not pushed (unchanged) are deleted: each run writes its own objects."""
    names = {b["segmentName"] for b in built}
    if len(names) != len(built):
        twice = sorted(n for n, times in Counter(b["segmentName"] for b in built).items() if times > 1)
        raise PipelineError(f"the job built two segments named {', '.join(twice[:3])}; nothing was pushed "
                            "(too many partitions or segments per task for the naming scheme)")
    ideal = client.ideal_state(table)
    existing_crcs: dict[str, int | None] = {name: None for name in ideal}
    for name in names & set(ideal):
        existing_crcs[name] = client.segment_metadata(table, name).get("crc")
    try:
        plan = plan_replace(built, existing_crcs, client.lineage(table), refresh=refresh, input_key=input_key)
    except ReplaceError as exc:
        delete_archives(deep_store_uri, built)
        raise PipelineError(str(exc)) from None
    delete_archives(deep_store_uri, [b for b in built if b["segmentName"] in set(plan.unchanged)])
    if plan.nothing_to_do:
        return plan, None
    if not plan.segments_to and not allow_empty:
        raise PipelineError(f"the job built no segment (every row bad or filtered out?); refusing to replace "
                            f"{len(plan.segments_from)} segment(s) of {table} with nothing")
    entry = client.start_replace(table, list(plan.segments_from), list(plan.segments_to), {INPUT_KEY: input_key})
    targets = set(plan.segments_to)
    client.push(table, [b for b in built if b["segmentName"] in targets])
    faults.fault(faults.PIPELINE_AFTER_PUSH)
    client.end_replace(table, entry)
    return plan, entry


def delete_archives(deep_store_uri: str, segments: list[dict[str, Any]]) -> None:
    """Remove archives no record references (built, then not pushed); a failure only leaks an unserved object."""
    if not segments:
        return
    deep = open_deepstore(deep_store_uri)
    for segment in segments:
        try:
            deep.delete(deep.key_of(segment["downloadUri"]))
        except DeepStoreError as exc:
            log.warning("could not delete the unused archive %s: %s", segment["downloadUri"], exc)


def run_ingest(spark: SparkSession, options: IngestOptions, *, progress: Callable[[str], None] = lambda _: None) -> IngestSummary:
    started = time.monotonic()
    summary = IngestSummary()
    fmt = (options.format or guess_format(options.input)).lower()
    if fmt not in FORMATS:
        raise PipelineError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    with ControllerClient(options.controller) as client:
        table = client.table(options.table)
        schema = client.schema(options.table)
        partition_spec(table.indexing.extra, schema)  # a bad partition config fails here, not in every task
        mode = (options.mode or table.push_type).lower()
        if mode not in ("append", "refresh"):
            raise PipelineError(f"--mode must be append or refresh, got {mode!r}")
        deep_store_uri = options.deep_store or client.deep_store_uri()
        progress(f"reading {options.input} ({fmt})")
        df = read_input(spark, options.input, fmt)
        input_key, fingerprint = input_identity(options.input, df.inputFiles(), table, schema)
        progress("building segments in Spark tasks")
        built = build_segments(df, table, schema, deep_store_uri, fingerprint,
                               rows_per_segment=options.rows_per_segment, summary=summary,
                               bad_rows_dir=options.bad_rows_dir)
        progress(f"pushing {len(built)} segment(s) to {options.controller}")
        plan, entry = push_replace(client, options.table, built, refresh=mode == "refresh", input_key=input_key,
                                   deep_store_uri=deep_store_uri)
    summary.segments = sorted(b["segmentName"] for b in built)
    summary.unchanged = list(plan.unchanged)
    summary.replaced = list(plan.segments_from)
    summary.bytes = sum(int(b["sizeBytes"]) for b in built)
    summary.lineage_entry = entry
    summary.seconds = time.monotonic() - started
    return summary


def new_fingerprint() -> str:
    """For writes of a DataFrame (no input files to fingerprint): a fresh id."""
    return uuid.uuid4().hex[:8]
