"""Spark write and read: the ``cuvee`` data source against Spark's own Parquet, on the same cached DataFrame in the
same session.

Write: ``df.write.format("cuvee").mode("overwrite")`` (tasks build segments with the servers' builder and store
their archives, the driver pushes under one lineage replace and waits until they are served) against
``df.write.parquet``. Read: ``spark.read.format("cuvee")`` against ``spark.read.parquet``, each fully
materialised into Spark's ``noop`` sink. Targets (issue 6): both ≥ 1.0× Parquet's rows/s.

A third row, ``hop``, times ``mapInArrow`` with a function that drops every batch: the JVM turning the cached rows
into Arrow and handing them to Python workers, which any Python writer (ours included) pays before it sees a row.
On a 2-core box it costs about as much as Spark's whole Parquet write, which bounds what a Python data source can
reach against Parquet here (Spark's row ⇄ Arrow copies are per row; see SPARK-56350).

    .venv/bin/python bench/spark_ingest.py [--rows 2000000] [--repeat 3] [--master local[*]]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _events import SCHEMA, event_table  # noqa: E402

from cuvee.pipeline.session import spark_session  # noqa: E402
from cuvee.testing.cluster import InProcessCluster  # noqa: E402


def timed(repeat: int, run: Callable[[], None]) -> float:
    """Median seconds of ``repeat`` runs, after one untimed run (Python workers start and import on first use)."""
    run()
    seconds = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--master", default="local[*]")
    args = parser.parse_args()
    console = Console()
    work = Path(tempfile.mkdtemp(prefix="cuvee-bench-spark-"))
    try:
        pq.write_table(event_table(args.rows), work / "events.parquet")
        spark = spark_session(args.master, "cuvee-bench", **{"spark.ui.enabled": "false",
                                                              "spark.sql.shuffle.partitions": "4"})
        spark.sparkContext.setLogLevel("ERROR")
        with InProcessCluster(work / "cluster", servers=1, controller={"lineage_end_timeout_seconds": 600}) as cluster:
            cluster.add_schema(SCHEMA.to_json())
            cluster.add_table({"tableName": "events", "tableType": "OFFLINE",
                               "segmentsConfig": {"timeColumnName": "ts", "replication": "1"}})
            frame = spark.read.parquet(str(work / "events.parquet")).cache()
            assert frame.count() == args.rows
            url = cluster.controller_url

            def cuvee_write() -> None:
                frame.write.format("cuvee").option("controller", url).option("table", "events") \
                    .mode("overwrite").save()

            def parquet_write() -> None:
                frame.write.mode("overwrite").parquet(str(work / "out.parquet"))

            def drop_all(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
                for batch in batches:
                    yield batch.slice(0, 0)

            def hop() -> None:
                frame.mapInArrow(drop_all, frame.schema).write.format("noop").mode("overwrite").save()

            write_cuvee, write_parquet = timed(args.repeat, cuvee_write), timed(args.repeat, parquet_write)
            write_hop = timed(args.repeat, hop)
            reader = spark.read.format("cuvee").option("controller", url).option("table", "events")
            assert reader.load().count() == args.rows

            def cuvee_read() -> None:
                reader.load().write.format("noop").mode("overwrite").save()

            def parquet_read() -> None:
                spark.read.parquet(str(work / "out.parquet")).write.format("noop").mode("overwrite").save()

            read_cuvee, read_parquet = timed(args.repeat, cuvee_read), timed(args.repeat, parquet_read)
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    table = Table(title=f"Spark {args.master}, {args.rows:,} rows x {len(SCHEMA.fields)} columns, median of {args.repeat}")
    for column in ("", "cuvee rows/s", "parquet rows/s", "cuvee / parquet"):
        table.add_column(column, justify="right")
    for name, ours, theirs in (("write", write_cuvee, write_parquet), ("read", read_cuvee, read_parquet),
                               ("hop (JVM rows to Python Arrow, nothing done)", write_hop, write_parquet)):
        table.add_row(name, f"{args.rows / ours:,.0f}", f"{args.rows / theirs:,.0f}", f"{theirs / ours:.2f}x")
    console.print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
