"""Loading the generated rows into a live cluster and judging every query of a set.

``load`` builds the rows into offline segments (the segment builder batch jobs use) and pushes them through the
controller's tar push, so queries go through the broker and servers as a user's would. ``judge_all`` runs each
query against the broker and the oracle, timing both.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa

from cuvee.config import Schema, TableConfig
from cuvee.segment.archive import ARCHIVE_SUFFIX, pack
from cuvee.segment.builder import build_segment
from cuvee.testing.compat import data
from cuvee.testing.compat.judge import Outcome, Verdict, compare, oracle_sql, run_oracle, shape_of, trivial
from cuvee.testing.compat.queries import CLICKBENCH, CompatQuery, schema

TIME_COLUMNS = {CLICKBENCH: "EventTime", "pinot": "DaysSinceEpoch"}  # segmentsConfig.timeColumnName
GENERATORS: dict[str, Callable[[int, int], pa.Table]] = {CLICKBENCH: data.hits, "pinot": data.ontime}


def table_config(suite: str, table_type: str = "OFFLINE", *, replicas: int = 1,
                 stream: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The suite's table: OFFLINE, or REALTIME consuming ``stream`` (its ``streamConfigs``)."""
    name = schema(suite)["schemaName"]
    segments: dict[str, Any] = {"replication" if table_type == "OFFLINE" else "replicasPerPartition": str(replicas)}
    if TIME_COLUMNS[suite]:
        segments["timeColumnName"] = TIME_COLUMNS[suite]
    doc: dict[str, Any] = {"tableName": name, "tableType": table_type, "segmentsConfig": segments}
    if stream is not None:
        doc["tableIndexConfig"] = {"streamConfigs": dict(stream)}
    return doc


def load(http: httpx.Client, controller: str, suite: str, rows: pa.Table, segments: int, *, replicas: int = 1) -> None:
    """The suite's schema, an OFFLINE table and ``rows`` split into ``segments`` pushed segments."""
    doc = schema(suite)
    for response in (http.post(f"{controller}/schemas", json=doc),
                     http.post(f"{controller}/tables", json=table_config(suite, replicas=replicas))):
        if response.status_code >= 300:
            raise RuntimeError(f"setting up {doc['schemaName']}: {response.status_code} {response.text[:500]}")
    parsed = Schema.from_json(doc)
    config = TableConfig.from_json(table_config(suite, replicas=replicas))
    per = -(-rows.num_rows // segments)
    with tempfile.TemporaryDirectory(prefix="cuvee-compat-") as tmp:
        for i in range(segments):
            name = f"{doc['schemaName']}_{i}"
            built = build_segment(rows.slice(i * per, per), parsed, config.indexing, Path(tmp) / "built", name,
                                  table_name=doc["schemaName"], time_column=TIME_COLUMNS[suite], overwrite=True)
            archive = pack(built.path, Path(tmp) / f"{name}{ARCHIVE_SUFFIX}")
            with open(archive, "rb") as f:
                pushed = http.post(f"{controller}/v2/segments",
                                   params={"tableName": doc["schemaName"], "tableType": "OFFLINE"},
                                   files={"file": (archive.name, f, "application/octet-stream")}, timeout=300)
            if pushed.status_code >= 300:
                raise RuntimeError(f"pushing {name}: {pushed.status_code} {pushed.text[:500]}")


@dataclass
class Answer:
    rows: list[list[Any]] | None  # None: an error
    columns: list[str]
    error: str
    used_ms: float


def ask(http: httpx.Client, broker: str, sql: str) -> Answer:
    answer = http.post(f"{broker}/query/sql", json={"sql": sql}, timeout=120).json()
    used = float(answer.get("timeUsedMs", 0))
    if answer.get("exceptions"):
        first = answer["exceptions"][0]
        return Answer(None, [], f"{first.get('errorCode')}: {first.get('message', '')[:300]}", used)
    table = answer["resultTable"]
    return Answer(table["rows"], table["dataSchema"]["columnNames"], "", used)


def judge_all(http: httpx.Client, broker: str, oracle: Any, queries: Iterable[CompatQuery]) -> list[Outcome]:
    outcomes = []
    for query in queries:
        text = oracle_sql(query.id, query.oracle_sql)
        answer = ask(http, broker, query.sql)
        if query.sorted_lists and answer.rows is not None:
            answer.rows = [[sorted(v) if isinstance(v, list) else v for v in row] for row in answer.rows]
        columns = answer.columns if answer.rows is not None else None
        try:
            shape = shape_of(query.sql, text)
            started = time.perf_counter()
            limited = run_oracle(oracle, shape.limited_sql, columns if shape.star else None)
            oracle_ms = (time.perf_counter() - started) * 1000
        except Exception as exc:  # noqa: BLE001 - a query the oracle cannot run is reported, not judged
            outcomes.append(Outcome(query.id, Verdict.UNJUDGED, f"oracle: {type(exc).__name__}: {exc}"[:300]))
            continue
        if answer.rows is None:
            outcomes.append(Outcome(query.id, Verdict.ERROR, answer.error, answer.used_ms, oracle_ms))
            continue
        unlimited = limited if shape.limit is None else \
            (lambda: run_oracle(oracle, shape.unlimited_sql, columns if shape.star else None))  # noqa: B023
        keyed = None if shape.keyed_sql is None else \
            (lambda: run_oracle(oracle, shape.keyed_sql,  # noqa: B023
                                [*columns, *shape.key_names] if shape.star else None))  # noqa: B023
        try:  # (called within this iteration)
            right, why = compare(shape, answer.rows, limited, unlimited, keyed=keyed,
                                 float_inputs=any(c in query.sql for c in float_columns(query.suite)))
        except Exception as exc:  # noqa: BLE001 - the oracle's full answer could not be had: not judged
            outcomes.append(Outcome(query.id, Verdict.UNJUDGED, f"oracle: {type(exc).__name__}: {exc}"[:300]))
            continue
        verdict = Verdict.UNJUDGED if right is None else Verdict.PASS if right else Verdict.WRONG
        outcomes.append(Outcome(query.id, verdict, why, answer.used_ms, oracle_ms, len(answer.rows),
                                {"trivial": trivial(limited)}))
    return outcomes


def float_columns(suite: str) -> frozenset[str]:
    """The set's FLOAT (32-bit) columns."""
    doc = schema(suite)
    return frozenset(spec["name"] for key in ("dimensionFieldSpecs", "metricFieldSpecs", "dateTimeFieldSpecs")
                     for spec in doc.get(key, []) if spec.get("dataType") == "FLOAT")


def generated(suite: str, rows: int, seed: int = 1) -> pa.Table:
    return GENERATORS[suite](rows, seed)
