"""End-to-end benchmark of a local cluster (separate processes): ingest rate, freshness, query latency, memory.

Starts a controller, ``--servers`` servers and a broker with ``cuvee.deploy.local.up``, creates a realtime table
over the embedded log (the bench workload of ``_events.py``: 4 string dimensions, a LONG id, 4 metrics, a
timestamp), then:

- a separate producer process writes ``--rows`` JSON events as fast as it can (or at ``--produce-rate``); ingest rate = rows queryable per
  second from its first produce to the moment the broker answers COUNT(*) = N (and per server: the rows it holds
  over the same time, and over the CPU seconds it spent);
- meanwhile a marker thread produces one marker row every ``--marker-interval`` s carrying its produce time, and a
  poller asks the broker for the markers; produce-to-queryable latency = time the answer showing a marker arrived
  minus its produce time (an upper bound: it includes the poll query's own latency, which is printed too). The
  same probe then runs alone for ``--quiet-seconds`` (freshness at rest: no backlog, no commit in flight);
- after ingest, 5 representative queries run ``--runs`` times each (after ``--warmup`` runs) through the broker,
  and the same queries run by DuckDB in this process over the same rows held as one Arrow table (ratio; the two
  alternate run by run, so that other load on the machine weighs on both alike);
- each server's peak RSS (VmHWM from /proc of the pids in cluster.json).

Benchmarks print figures; nothing here passes or fails on speed. Quick run (< 2 minutes)::

    .venv/bin/python bench/e2e.py --rows 1000000

Full run (10M rows: 3-5 minutes on a 2-core box; needs ~5 GiB free memory and ~6 GiB of disk under --dir)::

    .venv/bin/python bench/e2e.py --rows 10000000 --dir /tmp/cuvee-bench --keep

``--deep-store-outage`` makes the deep store unwritable for the table while it ingests (commits go on peer-only,
DESIGN.md section 9) and writable again after; run the same command with and without it to compare freshness (the
issue's target: produce-to-queryable p99 during the outage within 10% of the healthy p99)::

    .venv/bin/python bench/e2e.py --rows 2000000 --produce-rate 50000 --pauseless [--deep-store-outage]

``--pauseless`` makes the table consume pauselessly (docs/server.md); ``--produce-rate R`` paces the producer, so
freshness while ingesting shows what commits cost at a rate the cluster sustains rather than a growing backlog
(flat out, the producer outruns the servers on a 2-core box and "while ingesting" measures the queue). Per server
process capacity is best measured with ``--servers 1`` flat out. The figures for the targets (2-core box)::

    .venv/bin/python bench/e2e.py --rows 10000000 --pauseless                       # queries, memory
    .venv/bin/python bench/e2e.py --rows 5000000 --servers 1 --partitions 2 --pauseless   # one server's ingest
    .venv/bin/python bench/e2e.py --rows 10000000 --pauseless --produce-rate 100000  # freshness under load

Replicas default to 1: on a small box every replica consumes and decodes every row again, so 2 replicas halve the
rows/s a CPU can ingest without telling anything new about the query path; ``--replicas 2`` measures that case.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import queue
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import httpx
import numpy as np
import pyarrow as pa
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _events import CARDINALITIES, SCHEMA  # noqa: E402
from _proc import cpu_seconds  # noqa: E402

from cuvee.deploy.local import LocalClusterSpec, down, up  # noqa: E402
from cuvee.stream import open_admin, open_producer  # noqa: E402

TABLE = "events"
BASE_MS = 1_790_000_000_000
MARKER = "marker"
WORDS = {name: pa.array([f"{name}-{i:05d}" for i in range(n)], pa.string()) for name, n in CARDINALITIES.items()}

# (name, Cuvee SQL through the broker, the same query for DuckDB over the Arrow table)
QUERIES: list[tuple[str, str, str]] = [
    ("count with filter",
     f"SELECT COUNT(*) FROM {TABLE} WHERE country = 'country-00003' AND clicks > 5",
     f"SELECT COUNT(*) FROM {TABLE} WHERE country = 'country-00003' AND clicks > 5"),
    ("group-by, order, limit",
     f"SELECT page, SUM(revenue) AS rev, COUNT(*) AS n FROM {TABLE} GROUP BY page ORDER BY rev DESC LIMIT 10",
     f"SELECT page, SUM(revenue) AS rev, COUNT(*) AS n FROM {TABLE} GROUP BY page ORDER BY rev DESC LIMIT 10"),
    ("distinct count",
     f'SELECT DISTINCTCOUNT("user") FROM {TABLE}',
     f'SELECT COUNT(DISTINCT "user") FROM {TABLE}'),
    ("percentile",
     f"SELECT PERCENTILE(latency, 99) FROM {TABLE} WHERE device = 'device-00042'",
     f"SELECT quantile_disc(latency, 0.99) FROM {TABLE} WHERE device = 'device-00042'"),
    ("selection, order by, limit",
     f"SELECT event_id, country, revenue FROM {TABLE} WHERE views > 990 ORDER BY revenue DESC, event_id LIMIT 10",
     f"SELECT event_id, country, revenue FROM {TABLE} WHERE views > 990 ORDER BY revenue DESC, event_id LIMIT 10"),
]


# ---- the workload ------------------------------------------------------------------------------------------


def chunk_table(index: int, chunk_rows: int, total_rows: int, seed: int) -> pa.Table:
    """Rows ``[index * chunk_rows, ...)`` of the workload; each chunk is deterministic on its own."""
    start = index * chunk_rows
    n = min(chunk_rows, total_rows - start)
    rng = np.random.default_rng([seed, index])
    columns: dict[str, pa.Array] = {}
    for name, cardinality in CARDINALITIES.items():
        columns[name] = WORDS[name].take(pa.array(rng.integers(0, cardinality, n)))
    columns["event_id"] = pa.array(np.arange(start, start + n, dtype=np.int64))
    columns["clicks"] = pa.array(rng.integers(0, 10, n, dtype=np.int32))
    columns["views"] = pa.array(rng.integers(0, 1_000, n, dtype=np.int64))
    columns["revenue"] = pa.array(rng.random(n) * 100)
    columns["latency"] = pa.array(rng.random(n).astype(np.float32))
    columns["ts"] = pa.array(BASE_MS + np.arange(start, start + n, dtype=np.int64) // 3).cast(pa.timestamp("ms"))
    return pa.table(columns).select(SCHEMA.column_names).cast(SCHEMA.arrow_schema())


def marker_row(number: int, produced_ms: int) -> dict[str, Any]:
    return {"country": MARKER, "device": MARKER, "page": MARKER, "user": MARKER, "event_id": -number,
            "clicks": 0, "views": 0, "revenue": 0.0, "latency": 0.0, "ts": produced_ms}


_TO_JSON = ("SELECT to_json(struct_pack(country, device, page, \"user\", event_id, clicks, views, revenue, latency, "
            "ts := epoch_ms(ts))) AS j FROM chunk")


def produce_all(stream_configs: dict[str, str], rows: int, chunk_rows: int, seed: int, rate: float,
                out: Any) -> None:
    """The producer process: JSON-encode chunk by chunk (DuckDB's to_json) and produce round-robin, as fast as it
    can, or paced to ``rate`` rows/s (0: unpaced) in slices of 1/50 s, flushed as they go."""
    con = duckdb.connect()
    first_ms = None
    sent = 0
    with open_producer(stream_configs) as producer:
        for index in range(math.ceil(rows / chunk_rows)):
            chunk = chunk_table(index, chunk_rows, rows, seed)  # noqa: F841 (DuckDB reads it by name)
            values = con.sql(_TO_JSON).to_arrow_table().column("j").cast(pa.binary()).to_pylist()
            if first_ms is None:
                first_ms = time.time() * 1000
            step = max(int(rate / 50), 1) if rate else len(values)
            for start in range(0, len(values), step):
                if rate:
                    ahead = first_ms / 1000 + sent / rate - time.time()
                    if ahead > 0:
                        time.sleep(ahead)
                producer.produce_many((None, v) for v in values[start:start + step])
                sent += len(values[start:start + step])
                if rate:
                    producer.flush()
        producer.flush()
    out.put({"first_ms": first_ms, "done_ms": time.time() * 1000})


# ---- cluster set-up ----------------------------------------------------------------------------------------


def table_config(stream_dir: str, partitions: int, replicas: int, servers: int, segment_rows: int,
                 pauseless: bool = False) -> dict[str, Any]:
    busiest = math.ceil(partitions * replicas / servers)  # consuming segments on the busiest server
    return {
        "ingestionConfig": {"streamIngestionConfig": {"pauselessConsumptionEnabled": pauseless}},
        "tableName": TABLE,
        "tableType": "REALTIME",
        "segmentsConfig": {"timeColumnName": "ts", "replicasPerPartition": str(replicas)},
        "tableIndexConfig": {
            "invertedIndexColumns": ["country", "device"],
            "noDictionaryColumns": ["event_id", "revenue", "latency"],
            "streamConfigs": {
                "streamType": "log",
                "stream.log.topic.name": TABLE,
                "stream.log.dir": stream_dir,
                "stream.log.consumer.prop.auto.offset.reset": "smallest",
                "realtime.segment.flush.threshold.rows": str(segment_rows * busiest),
                "realtime.segment.flush.threshold.time": "6h",
            },
        },
    }


OVERRIDES = {
    "controller": {"external_view_interval_seconds": 0.2, "completion.hold_seconds": 0.5},
    "server": {"ideal_state_poll_seconds": 1.0, "consumer.hold_retry_seconds": 0.2,
               "consumer.fetch_max_wait_seconds": 0.05},
    "broker": {"timeout_ms": 60_000},
}


# ---- measuring -------------------------------------------------------------------------------------------


@dataclass
class Freshness:
    """Markers produced (number -> produce wall ms) and seen (number -> wall ms the answer arrived)."""

    produced: dict[int, float] = field(default_factory=dict)
    seen: dict[int, float] = field(default_factory=dict)
    poll_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def latencies_ms(self) -> list[float]:
        with self.lock:
            return [self.seen[n] - self.produced[n] for n in self.seen if n in self.produced]


def query(http: httpx.Client, broker: str, sql: str) -> dict[str, Any]:
    response = http.post(f"{broker}/query/sql", json={"sql": sql})
    response.raise_for_status()
    answer = response.json()
    if answer.get("exceptions"):
        raise RuntimeError(f"{sql}: {answer['exceptions']}")
    return answer


def wait_for_commits(http: httpx.Client, controller: str, timeout: float) -> None:
    """Until every consuming replica is just consuming (no segment holding, building or uploading) and each
    partition has one consuming segment: the rows counted include consuming segments, so commits of the last full
    segments may still be running when COUNT(*) reaches N, and at-rest freshness must not measure them."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = http.get(f"{controller}/tables/{TABLE}/consumingSegmentsInfo").json()["_segmentToConsumingInfoMap"]
        partitions = [replica["partition"] for replicas in info.values() for replica in replicas[:1]]
        states = {replica["consumerState"] for replicas in info.values() for replica in replicas}
        if states <= {"CONSUMING"} and len(partitions) == len(set(partitions)):
            return
        time.sleep(0.2)
    raise TimeoutError("commits still running after the ingest timeout")


def count_rows(http: httpx.Client, broker: str) -> int:
    rows = query(http, broker, f"SELECT COUNT(*) FROM {TABLE}")["resultTable"]["rows"]
    return int(rows[0][0]) if rows else 0


class MarkerProbe:
    """Produces marker rows (one every ``interval`` s, to each partition in turn, flushed at once) numbered from
    ``first_number``, and polls the broker for them; ``fresh`` holds when each was produced and first seen."""

    def __init__(self, stream_configs: dict[str, str], partitions: int, broker: str, interval: float,
                 first_number: int = 1):
        self.fresh = Freshness()
        self._args = (stream_configs, partitions, interval, first_number)
        self._broker = broker
        self._stop_markers, self._stop_poll = threading.Event(), threading.Event()
        self._threads = [threading.Thread(target=self._produce, daemon=True),
                         threading.Thread(target=self._poll, daemon=True)]

    def start(self) -> MarkerProbe:
        for thread in self._threads:
            thread.start()
        return self

    def stop_producing(self) -> None:
        self._stop_markers.set()
        self._threads[0].join(30)

    def finish(self, wait_seconds: float = 30) -> None:
        """Stop producing, give the poller up to ``wait_seconds`` to see the last markers, stop it."""
        self.stop_producing()
        deadline = time.monotonic() + wait_seconds
        while len(self.fresh.latencies_ms()) < len(self.fresh.produced) and time.monotonic() < deadline:
            time.sleep(0.05)  # the poller has its last markers in flight
        self._stop_poll.set()
        self._threads[1].join(60)

    def _produce(self) -> None:
        import orjson

        stream_configs, partitions, interval, number = self._args
        fresh = self.fresh
        with open_producer(stream_configs) as producer:
            while not self._stop_markers.wait(interval):
                produced_ms = time.time() * 1000
                with fresh.lock:
                    fresh.produced[number] = produced_ms
                producer.produce(orjson.dumps(marker_row(number, int(produced_ms))), partition=number % partitions,
                                 timestamp_ms=int(produced_ms))
                producer.flush()
                number += 1

    def _poll(self) -> None:
        sql = f"SELECT event_id FROM {TABLE} WHERE event_id < 0 LIMIT 1000000"
        fresh = self.fresh
        with httpx.Client(timeout=60) as http:
            while not self._stop_poll.is_set():
                started = time.time() * 1000
                try:
                    rows = query(http, self._broker, sql)["resultTable"]["rows"]
                except (httpx.HTTPError, RuntimeError) as exc:
                    fresh.errors.append(str(exc)[:200])
                    self._stop_poll.wait(0.1)
                    continue
                arrived = time.time() * 1000
                fresh.poll_ms.append(arrived - started)
                with fresh.lock:
                    for (event_id,) in rows:
                        if -int(event_id) in fresh.produced:
                            fresh.seen.setdefault(-int(event_id), arrived)
                self._stop_poll.wait(0.02)


def freshness_figures(fresh: Freshness) -> dict[str, Any]:
    latencies = fresh.latencies_ms()
    return {"markers": len(fresh.produced), "seen": len(latencies),
            "p50_ms": percentile(latencies, 50), "p90_ms": percentile(latencies, 90),
            "p99_ms": percentile(latencies, 99), "over_1s": sum(1 for v in latencies if v > 1000),
            "max_ms": max(latencies, default=float("nan")),
            "poll_query_p50_ms": percentile(fresh.poll_ms, 50), "poll_query_p99_ms": percentile(fresh.poll_ms, 99),
            "poll_query_max_ms": max(fresh.poll_ms, default=float("nan")), "poll_errors": fresh.errors[:3]}


def proc_status(pid: int) -> dict[str, int]:
    """VmHWM and VmRSS in bytes (empty if the process is gone)."""
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                out[key] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return out


def wait_for_producer(producer: Any, results: Any, timeout: float) -> dict[str, float]:
    """The producer's timings once it is done; a clear error if it dies or overruns ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            produced: dict[str, float] = results.get(timeout=1.0)
        except queue.Empty:
            if not producer.is_alive():
                raise RuntimeError(f"the producer process exited with code {producer.exitcode}") from None
            continue
        producer.join(60)
        return produced
    producer.kill()
    raise RuntimeError(f"the producer did not finish within {timeout:.0f} s")


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(len(ordered) * p / 100) - 1))]


def time_interleaved(runs_of: list[Any], warmup: int, runs: int) -> tuple[list[list[float]], list[Any]]:
    """Time each callable ``runs`` times (after ``warmup`` runs), alternating between them run by run, so that
    whatever else loads the machine weighs on all of them alike. Returns per-callable timings (ms) and results."""
    results = [None] * len(runs_of)
    for _ in range(warmup):
        results = [run() for run in runs_of]
    timings: list[list[float]] = [[] for _ in runs_of]
    for _ in range(runs):
        for i, run in enumerate(runs_of):
            started = time.perf_counter()
            results[i] = run()
            timings[i].append((time.perf_counter() - started) * 1000)
    return timings, results


def same_rows(a: list[list[Any]], b: list[tuple[Any, ...]]) -> bool:
    if len(a) != len(b):
        return False
    for row_a, row_b in zip(a, b):
        for x, y in zip(row_a, row_b):
            if isinstance(x, float) or isinstance(y, float):
                if not math.isclose(float(x), float(y), rel_tol=1e-3, abs_tol=1e-6):
                    return False
            elif x != y:
                return False
    return True


# ---- the run ---------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--servers", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--segment-rows", type=int, default=0,
                        help="rows per committed segment (default: about 3 commits per partition)")
    parser.add_argument("--chunk-rows", type=int, default=100_000, help="rows the producer encodes at a time")
    parser.add_argument("--max-parallel-builds", type=int, default=0,
                        help="each server's max_parallel_segment_builds (0: no cap)")
    parser.add_argument("--pauseless", action="store_true",
                        help="pauseless consumption: a partition's next segment consumes while the previous commits")
    parser.add_argument("--produce-rate", type=float, default=0,
                        help="rows/s the producer keeps to (0: as fast as it can). Below the cluster's ingest rate, "
                             "the freshness while ingesting shows the commit pauses instead of a growing backlog")
    parser.add_argument("--marker-interval", type=float, default=0.1)
    parser.add_argument("--quiet-seconds", type=float, default=10,
                        help="markers alone after ingest, for freshness at rest")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--ingest-timeout", type=float, default=1800)
    parser.add_argument("--dir", type=Path, default=None, help="cluster directory (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="leave the cluster running and its data in --dir")
    parser.add_argument("--deep-store-outage", action="store_true",
                        help="the deep store unwritable for the table during ingest (commits go peer-only), back after: "
                             "compare freshness with a run without it")
    args = parser.parse_args()
    console = Console(width=150)
    directory = args.dir or Path(tempfile.mkdtemp(prefix="cuvee-bench-"))
    if args.dir and directory.exists() and any(directory.iterdir()):
        console.print(f"[red]{directory} is not empty; pick a fresh --dir")
        return 2
    segment_rows = args.segment_rows or max(50_000, args.rows // (args.partitions * 3) + 1)
    console.print(f"Starting a controller, {args.servers} servers and a broker in {directory} ...")
    overrides = {**OVERRIDES, "server": {**OVERRIDES["server"],
                                         "max_parallel_segment_builds": args.max_parallel_builds}}
    info = up(LocalClusterSpec(dir=directory, servers=args.servers, overrides=overrides))
    try:
        figures = run(args, console, info, segment_rows)
        (directory / "bench-e2e.json").write_text(json.dumps(figures, indent=2) + "\n")
        console.print(f"[dim]figures also in {directory / 'bench-e2e.json'}")
    finally:
        if args.keep:
            console.print(f"Cluster left running: .venv/bin/cuvee cluster down --dir {directory}")
        else:
            down(directory)
            if args.dir is None:
                shutil.rmtree(directory, ignore_errors=True)
    return 0


def run(args: argparse.Namespace, console: Console, info: dict[str, Any], segment_rows: int) -> dict[str, Any]:
    broker, controller = info["broker"], info["controller"]
    server_pids = {name: pid for name, pid in info["pids"].items() if name.startswith("server-")}
    config = table_config(info["streamDir"], args.partitions, args.replicas, args.servers, segment_rows, args.pauseless)
    stream_configs = config["tableIndexConfig"]["streamConfigs"]
    with open_admin(stream_configs) as admin:
        admin.create_topic(TABLE, args.partitions)
    http = httpx.Client(timeout=120)
    http.post(f"{controller}/schemas", json=SCHEMA.to_json()).raise_for_status()
    http.post(f"{controller}/tables", json=config).raise_for_status()
    blocker = Path(info["deepStore"].removeprefix("file://")) / f"{TABLE}_REALTIME"
    if args.deep_store_outage:  # a file where the table's deep-store directory belongs: every upload fails
        blocker.parent.mkdir(parents=True, exist_ok=True)
        blocker.write_text("the deep store is down (bench/e2e.py --deep-store-outage)")
        console.print("The deep store is unwritable for this table until ingest ends (commits go peer-only).")
    console.print(f"Table {TABLE}: {args.partitions} partitions, {args.replicas} replica(s), "
                  f"~{segment_rows:,} rows per segment{', pauseless' if args.pauseless else ''}; "
                  f"producing {args.rows:,} rows ...")

    # ---- ingest, with freshness markers ----
    load_at_start = os.getloadavg()[0]  # other work on the machine skews every figure; say how much there was
    cpu_before = {name: cpu_seconds(pid) for name, pid in server_pids.items()}
    results: Any = mp.get_context("spawn").Queue()
    producer = mp.get_context("spawn").Process(
        target=produce_all, args=(stream_configs, args.rows, args.chunk_rows, args.seed, args.produce_rate, results),
        daemon=True)
    producer.start()
    probe = MarkerProbe(stream_configs, args.partitions, broker, args.marker_interval).start()
    fresh = probe.fresh
    produced = wait_for_producer(producer, results, args.ingest_timeout)
    probe.stop_producing()
    total = args.rows + len(fresh.produced)
    console.print(f"Produced {args.rows:,} rows in {(produced['done_ms'] - produced['first_ms']) / 1000:.1f} s "
                  f"(+{len(fresh.produced)} markers); waiting for COUNT(*) = {total:,} ...")
    deadline = time.monotonic() + args.ingest_timeout
    seen = 0
    while time.monotonic() < deadline:
        try:
            seen = count_rows(http, broker)
        except (httpx.HTTPError, RuntimeError) as exc:  # e.g. a segment moving during a commit: ask again
            fresh.errors.append(str(exc)[:200])
        if seen >= total:
            break
        time.sleep(0.05)  # polling the broker: the end of ingest is when the count is reached
    queryable_ms = time.time() * 1000
    if seen != total:
        raise RuntimeError(f"COUNT(*) is {seen:,}, expected {total:,}")
    probe.finish()
    if args.deep_store_outage:
        blocker.unlink()  # back: repair uploads the peer-only segments
    cpu_after = {name: cpu_seconds(pid) for name, pid in server_pids.items()}
    ingest_s = (queryable_ms - produced["first_ms"]) / 1000

    per_server = []
    for i, url in enumerate(info["servers"]):
        name = f"server-{i}"
        pid = server_pids[name]
        held = http.get(f"{url}/tables/{TABLE}_REALTIME/segments").json()["segments"]
        docs = sum(s["numDocs"] for s in held)
        cpu = cpu_after[name] - cpu_before[name]
        per_server.append({"server": name, "pid": pid, "rows": docs, "segments": len(held),
                           "committed": sum(1 for s in held if not s["isConsuming"]),
                           "rows_per_s": docs / ingest_s, "cpu_s": cpu, "rows_per_cpu_s": docs / cpu if cpu else 0})
    # ---- freshness at rest: markers only, no backlog and no commits in flight ----
    console.print(f"Ingested in {ingest_s:.1f} s. Waiting for the last commits to end ...")
    wait_for_commits(http, controller, args.ingest_timeout)
    console.print(f"Markers alone for {args.quiet_seconds:.0f} s ...")
    quiet_probe = MarkerProbe(stream_configs, args.partitions, broker, args.marker_interval,
                              first_number=len(fresh.produced) + 1).start()
    time.sleep(args.quiet_seconds)  # the probe runs for this long
    quiet_probe.finish()
    figures: dict[str, Any] = {
        "load_average_at_start": load_at_start, "rows": args.rows, "servers": args.servers,
        "partitions": args.partitions, "replicas": args.replicas, "segment_rows": segment_rows,
        "pauseless": args.pauseless, "produce_rate": args.produce_rate, "deep_store_outage": args.deep_store_outage,
        "ingest": {"seconds": ingest_s, "rows_per_s": total / ingest_s,
                   "producer_rows_per_s": args.rows / ((produced["done_ms"] - produced["first_ms"]) / 1000),
                   "per_server": per_server},
        "freshness": freshness_figures(fresh),
        "freshness_at_rest": freshness_figures(quiet_probe.fresh),
    }

    # ---- queries: Cuvee through the broker, DuckDB on the same rows ----
    console.print("Building the same rows as one Arrow table for DuckDB ...")
    chunk_count = math.ceil(args.rows / args.chunk_rows)
    chunks = [chunk_table(i, args.chunk_rows, args.rows, args.seed) for i in range(chunk_count)]
    all_markers = {**fresh.produced, **quiet_probe.fresh.produced}
    markers = [marker_row(n, int(ms)) for n, ms in sorted(all_markers.items())]
    if markers:
        marker_table = pa.Table.from_pylist(markers).select(SCHEMA.column_names)
        chunks.append(marker_table.cast(SCHEMA.arrow_schema()))
    events = pa.concat_tables(chunks).combine_chunks()
    del chunks
    con = duckdb.connect()
    con.register(TABLE, events)
    query_figures = []
    for name, cuvee_sql, duck_sql in QUERIES:
        console.print(f"  {name} ...")
        (cuvee_ms, duck_ms), (answer, duck_rows) = time_interleaved(
            [lambda sql=cuvee_sql: query(http, broker, sql), lambda sql=duck_sql: con.sql(sql).fetchall()],
            args.warmup, args.runs)
        query_figures.append({
            "query": name, "sql": cuvee_sql,
            "cuvee_p50_ms": percentile(cuvee_ms, 50), "cuvee_p99_ms": percentile(cuvee_ms, 99),
            "broker_time_used_ms": answer.get("timeUsedMs"),
            "duckdb_p50_ms": percentile(duck_ms, 50), "duckdb_p99_ms": percentile(duck_ms, 99),
            "ratio_p50": percentile(cuvee_ms, 50) / max(percentile(duck_ms, 50), 1e-3),
            "same_answer": same_rows(answer["resultTable"]["rows"], duck_rows),
        })
    figures["queries"] = query_figures
    figures["memory"] = {name: proc_status(pid) for name, pid in sorted(info["pids"].items())}
    http.close()
    show(console, figures)
    return figures


def show(console: Console, f: dict[str, Any]) -> None:
    ingest, fresh = f["ingest"], f["freshness"]
    summary = Table(title=f"Cuvee end to end: {f['rows']:,} rows, {f['servers']} servers, "
                          f"{f['partitions']} partitions, "
                          f"{f['replicas']} replica(s), ~{f['segment_rows']:,} rows/segment"
                          f"{', pauseless' if f.get('pauseless') else ''}", title_justify="left")
    summary.add_column("figure")
    summary.add_column("value", justify="right")
    summary.add_column("target", justify="right")
    summary.add_row("ingest, rows queryable / s (cluster)", f"{ingest['rows_per_s']:,.0f}", "")
    summary.add_row("producer rows / s", f"{ingest['producer_rows_per_s']:,.0f}", "")
    summary.add_row("ingest, rows queryable / s per server", f"{ingest['rows_per_s'] / f['servers']:,.0f}",
                    ">= 100,000")
    for label, phase in (("while ingesting", fresh), ("at rest", f["freshness_at_rest"])):
        summary.add_row(f"produce-to-queryable {label}: p50 / p90",
                        f"{phase['p50_ms']:,.0f} / {phase['p90_ms']:,.0f} ms", "")
        summary.add_row(f"produce-to-queryable {label}: p99", f"{phase['p99_ms']:,.0f} ms", "<= 1,000 ms")
        summary.add_row("  (max; markers seen / produced; over 1 s)",
                        f"{phase['max_ms']:,.0f} ms; {phase['seen']} / {phase['markers']}; {phase['over_1s']}", "")
        summary.add_row("  (marker poll query p50 / p99 / max)",
                        f"{phase['poll_query_p50_ms']:,.0f} / {phase['poll_query_p99_ms']:,.0f} / "
                        f"{phase['poll_query_max_ms']:,.0f} ms", "")
    console.print(summary)
    servers = Table(title="Per server", title_justify="left")
    for column in ("server", "rows held", "segments (committed)", "rows/s", "CPU s", "rows / CPU s", "peak RSS"):
        servers.add_column(column, justify="right")
    for s in ingest["per_server"]:
        hwm = f["memory"].get(s["server"], {}).get("VmHWM", 0)
        servers.add_row(s["server"], f"{s['rows']:,}", f"{s['segments']} ({s['committed']})", f"{s['rows_per_s']:,.0f}",
                        f"{s['cpu_s']:.1f}", f"{s['rows_per_cpu_s']:,.0f}", f"{hwm / 2**20:,.0f} MiB")
    console.print(servers)
    queries = Table(title="Query latency (ms), Cuvee via the broker vs DuckDB on one Arrow table", title_justify="left")
    for column in ("query", "Cuvee p50", "Cuvee p99", "DuckDB p50", "DuckDB p99", "ratio p50", "same answer"):
        queries.add_column(column, justify="right")
    for q in f["queries"]:
        queries.add_row(q["query"], f"{q['cuvee_p50_ms']:.1f}", f"{q['cuvee_p99_ms']:.1f}", f"{q['duckdb_p50_ms']:.1f}",
                        f"{q['duckdb_p99_ms']:.1f}", f"{q['ratio_p50']:.1f}x", "yes" if q["same_answer"] else "NO")
    console.print(queries)
    others = ", ".join(f"{n} {m.get('VmHWM', 0) / 2**20:,.0f} MiB" for n, m in f["memory"].items()
                       if not n.startswith("server-"))
    console.print(f"Peak RSS of the other roles: {others}")
    console.print(f"1-minute load average when ingest started: {f['load_average_at_start']:.1f} "
                  f"(on {os.cpu_count()} CPUs; anything else running skews these figures)")
    for phase in (fresh, f["freshness_at_rest"]):
        if phase["poll_errors"]:
            console.print(f"[yellow]marker poll errors (first 3): {phase['poll_errors']}")


if __name__ == "__main__":
    sys.exit(main())
