"""The external query sets, as shipped in ``sets/`` (verbatim copies; see ``sets/README.md``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

CLICKBENCH = "clickbench"
PINOT = "pinot"


@dataclass(frozen=True)
class CompatQuery:
    """One query: ``sql`` is sent to Cuvee; ``oracle_sql`` is what the oracle runs (the H2 translation when the
    set's authors gave one, else the same text)."""

    suite: str
    number: int  # 1-based, in file order
    sql: str
    oracle_sql: str
    table: str

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


def all_queries() -> list[CompatQuery]:
    return clickbench_queries() + pinot_queries()
