"""The query sets, as shipped in ``sets/``: the external ones (verbatim copies; see ``sets/README.md``) and Cuvee's
own set of Pinot's aggregations, GAPFILL included, each with a DuckDB oracle written by hand."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

CLICKBENCH = "clickbench"
PINOT = "pinot"
CUVEE = "cuvee"


@dataclass(frozen=True)
class CompatQuery:
    """One query: ``sql`` is sent to Cuvee; ``oracle_sql`` is what the oracle runs (the H2 translation when the
    set's authors gave one, else the same text)."""

    suite: str
    number: int  # 1-based, in file order
    sql: str
    oracle_sql: str
    table: str
    sorted_lists: bool = False  # list cells compare sorted (their order is not defined, as ARRAY_AGG's)

    @property
    def id(self) -> str:
        return f"{self.suite}-{self.number:03d}"


def _text(name: str) -> str:
    return resources.files(__package__).joinpath("sets", name).read_text(encoding="utf-8")


def schema(suite: str) -> dict[str, Any]:
    """The set's Pinot schema JSON."""
    name = "clickbench_pinot_schema.json" if suite == CLICKBENCH else "pinot_ontime_nonulls.schema.json"
    return json.loads(_text(name))


def clickbench_queries() -> list[CompatQuery]:
    lines = [line.strip() for line in _text("clickbench_pinot_queries.sql").splitlines()]
    sqls = [line.rstrip(";") for line in lines if line and not line.startswith("--")]
    return [CompatQuery(CLICKBENCH, i, sql, sql, "hits") for i, sql in enumerate(sqls, start=1)]


def pinot_queries() -> list[CompatQuery]:
    found = []
    lines = [line for line in _text("pinot_ontime_test_queries_200.sql").splitlines()
             if line.strip() and not line.startswith("#")]
    for i, line in enumerate(lines, start=1):
        doc = json.loads(line)
        hsqls = doc.get("hsqls") or []
        found.append(CompatQuery(PINOT, i, doc["sql"], hsqls[0] if hsqls else doc["sql"], "mytable"))
    return found


def cuvee_queries() -> list[CompatQuery]:
    """Cuvee's own set (``cuvee_pinot_aggregations.jsonl``) over both sets' tables."""
    found = []
    lines = [line for line in _text("cuvee_pinot_aggregations.jsonl").splitlines()
             if line.strip() and not line.startswith("#")]
    for i, line in enumerate(lines, start=1):
        doc = json.loads(line)
        table = "hits" if " FROM hits" in doc["sql"] else "mytable"
        found.append(CompatQuery(CUVEE, i, doc["sql"], doc["oracle"], table, bool(doc.get("sortedLists"))))
    return found


def all_queries() -> list[CompatQuery]:
    return clickbench_queries() + pinot_queries() + cuvee_queries()
