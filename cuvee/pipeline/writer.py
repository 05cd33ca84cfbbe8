"""``df.write.format("cuvee")``: a DataFrame into an OFFLINE table, the way the ingest job does it.

Each Spark task converts its rows to the schema, sorts them by time bucket and partition (no shuffle: a task's
segments carry its partition number in their sequence) and builds and stores its segments; the driver's
``commit`` pushes them under one lineage replace: ``overwrite`` replaces every segment of the table,
``append`` adds (a DataFrame has no input files to recognise a re-run by, so an append always adds). Rows that
do not fit the schema fail the write with their reason (a DataFrame is the user's own data: nothing is dropped
silently); ``abort`` deletes what the tasks stored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from cuvee.config import Schema, TableConfig, TableType
from cuvee.decode.transform import compile_ingestion
from cuvee.deepstore import open_deepstore
from cuvee.pipeline.controller_client import ControllerClient, PipelineError
from cuvee.pipeline.convert import convert_batch, to_wire
from cuvee.pipeline.ingest import new_fingerprint, push_replace
from cuvee.pipeline.segments import BUCKET, PART, TASK_STRIDE, BuildSpec, bucket_and_partition, build_groups, grouped
from cuvee.segment.partitioning import partition_spec
from cuvee.spi.deepstore import DeepStoreError

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage


@dataclass
class BuiltSegments(WriterCommitMessage):
    segments: list[dict[str, Any]] = field(default_factory=list)


class CuveeWriter(DataSourceArrowWriter):  # type: ignore[misc,valid-type]
    """Created on the driver (which reads the table from the controller once); ``write`` runs in tasks."""

    def __init__(self, controller: str, table: str, overwrite: bool, *, deep_store: str | None = None,
                 rows_per_segment: int = 5_000_000):
        self.controller, self.table, self.overwrite = controller, table, overwrite
        with ControllerClient(controller) as client:
            config, schema = client.table(table), client.schema(table)
            partition_spec(config.indexing.extra, schema)  # a bad partition config fails here, not in every task
            deep = deep_store or client.deep_store_uri()
        self.fingerprint = new_fingerprint()
        self.spec = BuildSpec(config.to_json(), schema.to_json(), deep, self.fingerprint, rows_per_segment,
                              run_id=self.fingerprint)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> BuiltSegments:
        from pyspark import TaskContext

        context = TaskContext.get()
        task = context.partitionId() if context is not None else 0
        table, schema = TableConfig.from_json(self.spec.table_json), Schema.from_json(self.spec.schema_json)
        transformer = compile_ingestion(schema, table.ingestion)
        parts: list[pa.RecordBatch] = []
        for batch in iterator:
            converted = convert_batch(batch, schema, transformer)
            if converted.bad:
                raise PipelineError(f"{len(converted.bad)} row(s) do not fit the schema of {self.table}, e.g. "
                                    f"{converted.bad[0]}")
            good = converted.batch
            buckets, partitions = bucket_and_partition(good, table, schema)
            columns = [to_wire(good.column(f.name), f) for f in schema.fields]
            names = [f.name for f in schema.fields] + [BUCKET, PART]
            parts.append(pa.RecordBatch.from_arrays([*columns, buckets, partitions], names=names))
        if not parts:
            return BuiltSegments([])
        rows = grouped(pa.Table.from_batches(parts))
        spec = dataclasses.replace(self.spec, sequence_base=task * TASK_STRIDE)
        return BuiltSegments(list(build_groups(rows.to_batches(), spec)))

    def commit(self, messages: list[BuiltSegments | None]) -> None:
        built = [segment for message in messages if message is not None for segment in message.segments]
        with ControllerClient(self.controller) as client:
            push_replace(client, self.table, built, refresh=self.overwrite, input_key=f"dataframe-{self.fingerprint}",
                         deep_store_uri=self.spec.deep_store_uri, allow_empty=True)  # an empty overwrite empties

    def abort(self, messages: list[BuiltSegments | None]) -> None:
        """Delete what the tasks stored, except archives a segment record references: ``commit`` may have failed
        after the push (a lost answer), and then they are served. Unsure (controller unreachable): keep all."""
        built = [s for message in messages if message is not None for s in message.segments]
        if not built:
            return
        try:
            with ControllerClient(self.controller) as client:
                records = client.segment_records(self.table, TableType.OFFLINE)
        except PipelineError:
            return  # leaking an unserved archive is better than deleting a served one
        referenced = {r.download_uri for r in records.values()}
        deep = open_deepstore(self.spec.deep_store_uri)
        for segment in built:
            if segment["downloadUri"] in referenced:
                continue
            try:
                deep.delete(deep.key_of(segment["downloadUri"]))
            except DeepStoreError:
                pass  # already gone, or the store is down: an unreferenced archive, never served
