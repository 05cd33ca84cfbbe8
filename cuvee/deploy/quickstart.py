"""The quickstart: a 3-server local cluster ingesting a realistic event stream, then a few queries.

Run by ``make quickstart`` (``cuvee quickstart --dir DIR``). Everything it does goes through the public surfaces a
user has: the ``cluster up`` launcher, the embedded log, the controller's REST API and the broker's Pinot API.
"""

from __future__ import annotations

import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from cuvee.deploy.local import LocalClusterSpec, cluster_running, up
from cuvee.errors import CuveeError
from cuvee.stream import open_admin, open_producer

TABLE = "pageviews"
PARTITIONS = 4
REPLICAS = 2

SCHEMA = {
    "schemaName": TABLE,
    "dimensionFieldSpecs": [
        {"name": "event_id", "dataType": "LONG"},
        {"name": "user_id", "dataType": "STRING"},
        {"name": "country", "dataType": "STRING"},
        {"name": "device", "dataType": "STRING"},
        {"name": "page", "dataType": "STRING"},
        {"name": "referrer", "dataType": "STRING"},
    ],
    "metricFieldSpecs": [
        {"name": "load_ms", "dataType": "INT"},
        {"name": "revenue", "dataType": "DOUBLE"},
    ],
    "dateTimeFieldSpecs": [
        {"name": "ts", "dataType": "TIMESTAMP", "format": "1:MILLISECONDS:EPOCH", "granularity": "1:MILLISECONDS"}
    ],
}

QUERIES = [
    ("How many page views?", f"SELECT COUNT(*) AS views FROM {TABLE}"),
    (
        "Top countries by views and revenue",
        f"SELECT country, COUNT(*) AS views, SUM(revenue) AS revenue FROM {TABLE} "
        "GROUP BY country ORDER BY views DESC LIMIT 5",
    ),
    (
        "Slowest pages (p90 load time, pages with > 100 views)",
        f"SELECT page, PERCENTILE(load_ms, 90) AS p90_ms, COUNT(*) AS views FROM {TABLE} "
        "GROUP BY page HAVING COUNT(*) > 100 ORDER BY p90_ms DESC LIMIT 5",
    ),
    ("Distinct users by device", f"SELECT device, DISTINCTCOUNT(user_id) AS users FROM {TABLE} GROUP BY device ORDER BY users DESC"),
    ("The latest five views", f"SELECT ts, country, page, load_ms FROM {TABLE} ORDER BY ts DESC LIMIT 5"),
]


@dataclass(frozen=True)
class QuickstartOptions:
    dir: Path
    rows: int = 200_000
    rows_per_segment: int = 20_000
    servers: int = 3


def table_config(stream_dir: Path, rows_per_segment: int) -> dict[str, Any]:
    return {
        "tableName": TABLE,
        "tableType": "REALTIME",
        "segmentsConfig": {"timeColumnName": "ts", "replicasPerPartition": str(REPLICAS)},
        "tableIndexConfig": {
            "invertedIndexColumns": ["country", "device"],
            "noDictionaryColumns": ["event_id"],
            "streamConfigs": {
                "streamType": "log",
                "stream.log.topic.name": TABLE,
                "stream.log.dir": str(stream_dir),
                "stream.log.consumer.prop.auto.offset.reset": "smallest",
                # Each server hosts several consuming segments; the threshold is divided among them (as in Pinot).
                "realtime.segment.flush.threshold.rows": str(rows_per_segment),
                "realtime.segment.flush.threshold.time": "1h",
            },
        },
        "tenants": {"broker": "DefaultTenant", "server": "DefaultTenant"},
        # Partitions keep being consumed while a segment commits (docs/server.md, "Pauseless consumption").
        "ingestionConfig": {"streamIngestionConfig": {"pauselessConsumptionEnabled": True}},
    }


def events(count: int, seed: int = 42) -> list[tuple[bytes, bytes]]:
    """(key, JSON value) pairs: page views with skewed countries and pages, a few big spenders."""
    rng = random.Random(seed)
    countries = ["US", "IN", "BR", "DE", "FR", "GB", "JP", "NG", "MX", "CA"]
    weights = [30, 18, 10, 8, 7, 7, 6, 5, 5, 4]
    pages = [f"/{section}/{i}" for section in ("home", "search", "product", "cart", "checkout") for i in range(20)]
    devices = ["mobile", "desktop", "tablet", "tv"]
    referrers = ["google", "direct", "newsletter", "twitter", "partner"]
    start_ms = int(time.time() * 1000) - count * 10
    out = []
    for i in range(count):
        user = f"u{rng.randrange(25_000):05d}"
        page = pages[min(int(rng.expovariate(0.08)), len(pages) - 1)]
        row = {
            "event_id": i,
            "user_id": user,
            "country": rng.choices(countries, weights)[0],
            "device": rng.choices(devices, [60, 32, 6, 2])[0],
            "page": page,
            "referrer": rng.choice(referrers),
            "load_ms": int(rng.lognormvariate(5.0, 0.6)),
            "revenue": round(rng.expovariate(1 / 40.0), 2) if page.startswith("/checkout") else 0.0,
            "ts": start_ms + i * 10,
        }
        out.append((user.encode(), orjson.dumps(row)))
    return out


def run(options: QuickstartOptions, console: Console | None = None) -> dict[str, Any]:
    console = console or Console()
    console.rule("[bold]Cuvee quickstart")
    if (options.dir / "cluster.json").exists() and not cluster_running(options.dir):
        console.print(f"Removing the previous quickstart's data in {options.dir} ...")
        shutil.rmtree(options.dir)
    console.print(f"Starting a controller, {options.servers} servers and a broker as separate processes in {options.dir} ...")
    info = up(LocalClusterSpec(dir=options.dir, servers=options.servers))
    controller, broker = info["controller"], info["broker"]
    console.print(f"  controller {controller}\n  broker     {broker}\n  servers    {', '.join(info['servers'])}")

    stream_configs = table_config(Path(info["streamDir"]), options.rows_per_segment)["tableIndexConfig"]["streamConfigs"]
    with open_admin(stream_configs) as admin:
        if not admin.topic_exists(TABLE):
            admin.create_topic(TABLE, PARTITIONS)
    console.print(f"Created topic [bold]{TABLE}[/] with {PARTITIONS} partitions in the embedded log.")
    with httpx.Client(timeout=30) as http:
        _check(http.post(f"{controller}/schemas", json=SCHEMA), "create the schema")
        _check(http.post(f"{controller}/tables", json=table_config(Path(info["streamDir"]), options.rows_per_segment)),
               "create the table")
        console.print(f"Created realtime table [bold]{TABLE}[/] with {REPLICAS} replicas per partition.")

        data = events(options.rows)
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                      console=console) as progress:
            task = progress.add_task("producing page views", total=len(data))
            with open_producer(stream_configs) as producer:
                for start in range(0, len(data), 5_000):
                    producer.produce_many(data[start:start + 5_000])
                    progress.advance(task, min(5_000, len(data) - start))
                producer.flush()
            wait = progress.add_task("rows queryable", total=len(data))
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                count = _count(http, broker)
                progress.update(wait, completed=count)
                if count >= len(data):
                    break
                time.sleep(0.25)  # refreshing the progress display while ingestion catches up
        _show_segments(console, http, controller)
        for title, sql in QUERIES:
            _show_query(console, http, broker, title, sql)
    console.rule("[bold]Next")
    console.print(
        f"Open the web console: {controller}/console/\n"
        f"Query with curl:\n  curl -s -X POST {broker}/query/sql -H 'Content-Type: application/json' "
        f"-d '{{\"sql\": \"SELECT country, COUNT(*) FROM {TABLE} GROUP BY country\"}}'\n"
        "Query with Pinot's Python client (pip install pinotdb):\n"
        f"  from pinotdb import connect\n"
        f"  conn = connect(host='127.0.0.1', port={broker.rsplit(':', 1)[1]}, path='/query/sql', scheme='http')\n"
        f"  conn.cursor().execute('SELECT COUNT(*) FROM {TABLE}').fetchall()\n"
        f"Produce more: .venv/bin/cuvee stream produce --log-dir {info['streamDir']} {TABLE} --key-field user_id FILE.jsonl\n"
        f"Stop the cluster: .venv/bin/cuvee cluster down --dir {options.dir}"
    )
    return info


def _check(response: httpx.Response, what: str) -> Any:
    if response.status_code >= 400:
        raise CuveeError(f"could not {what}: HTTP {response.status_code}: {response.text}")
    return response.json() if response.content else None


def _query(http: httpx.Client, broker: str, sql: str) -> dict[str, Any]:
    return _check(http.post(f"{broker}/query/sql", json={"sql": sql}), f"run {sql!r}")


def _count(http: httpx.Client, broker: str) -> int:
    answer = _query(http, broker, f"SELECT COUNT(*) FROM {TABLE}")
    rows = answer.get("resultTable", {}).get("rows", [])
    return int(rows[0][0]) if rows else 0


def _show_segments(console: Console, http: httpx.Client, controller: str) -> None:
    ideal = _check(http.get(f"{controller}/tables/{TABLE}/idealstate"), "read the ideal state")
    segments = ideal.get("REALTIME", ideal)
    states: dict[str, int] = {}
    for replicas in segments.values():
        for state in replicas.values():
            states[state] = states.get(state, 0) + 1
    summary = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
    console.print(f"Segments of {TABLE}: {len(segments)} ({summary} replicas)")


def _show_query(console: Console, http: httpx.Client, broker: str, title: str, sql: str) -> None:
    answer = _query(http, broker, sql)
    console.print(f"\n[bold]{title}[/]\n[dim]{sql}[/]")
    table = Table()
    result = answer.get("resultTable", {})
    for name in result.get("dataSchema", {}).get("columnNames", []):
        table.add_column(name)
    for row in result.get("rows", []):
        table.add_row(*(f"{v:,.2f}" if isinstance(v, float) else str(v) for v in row))
    console.print(table)
    console.print(f"[dim]{answer.get('numDocsScanned', 0):,} docs scanned in {answer.get('timeUsedMs', 0)} ms[/]")
