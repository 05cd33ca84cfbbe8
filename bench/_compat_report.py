"""What ``compat.py`` measures, as data: written with ``--json`` and read back by ``run_all.py``, which prints the
shapes side by side. Pure (no cluster): the figures and their summaries only.

Per query and phase (``fresh``: right after ingest, every row queryable; ``settled``: once the servers report
no DuckDB copy still being made): the client's wall time (HTTP included), the broker's ``timeUsedMs`` and DuckDB's
time over its own in-memory tables, medians of the repeats, and the verdict of the answer in that phase. A ratio
is client wall time over DuckDB's; a phase's summary is their geometric mean and the worst of them over the
queries answered right, plus ``SELECT COUNT(*)``'s p50 through the broker.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

PHASES = ("fresh", "settled")
FLOOR_MS = 0.01  # a time below it is counted as it (a ratio over 0 ms is no figure)


@dataclass
class Timing:
    verdict: str
    wall_ms: float | None = None
    used_ms: float | None = None
    duckdb_ms: float | None = None
    detail: str = ""
    cpu_ms: float | None = None  # the broker's and servers' processes' CPU time per run (a process per role only)
    duckdb_cpu_ms: float | None = None  # DuckDB's CPU time per run (every thread of the bench's process)

    @property
    def cpu_ratio(self) -> float | None:
        """CPU spent by the cluster against DuckDB's for the same answer: what the roles cost whatever the cores
        (on a 2-core machine 3 servers and a broker share two; wall time then follows CPU time)."""
        if self.cpu_ms is None or self.duckdb_cpu_ms is None:
            return None
        return max(self.cpu_ms, FLOOR_MS) / max(self.duckdb_cpu_ms, FLOOR_MS)

    @property
    def ratio(self) -> float | None:
        if self.wall_ms is None or self.duckdb_ms is None:
            return None
        return max(self.wall_ms, FLOOR_MS) / max(self.duckdb_ms, FLOOR_MS)


@dataclass
class Phase:
    timings: dict[str, Timing] = field(default_factory=dict)  # query id -> its timing
    count_p50_ms: float | None = None
    started_s: float = 0.0  # seconds after ingest ended that the phase began

    def ratios(self) -> dict[str, float]:
        return {q: r for q, t in self.timings.items() if t.verdict == "pass" and (r := t.ratio) is not None}

    def geomean(self) -> float | None:
        ratios = list(self.ratios().values())
        return math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else None

    def cpu_geomean(self) -> float | None:
        ratios = [r for t in self.timings.values() if t.verdict == "pass" and (r := t.cpu_ratio) is not None]
        return math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else None

    def worst(self) -> tuple[str, float] | None:
        ratios = self.ratios()
        return max(ratios.items(), key=lambda item: item[1]) if ratios else None

    def wrong(self) -> list[str]:
        return [f"{q}: {t.verdict}: {t.detail}" for q, t in self.timings.items() if t.verdict in ("wrong", "error")]


@dataclass
class SetResult:
    layout: str = ""
    consuming_share: float = 0.0  # of the rows produced through the stream, those in consuming segments
    skipped: str = ""  # why the set was not served in this shape
    ingest_s: float = 0.0
    phases: dict[str, Phase] = field(default_factory=dict)


@dataclass
class Run:
    shape: str  # offline / realtime / hybrid
    servers: int
    replicas: int
    rows: int
    in_process: bool = False
    sets: dict[str, SetResult] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.shape}/{self.servers}" + (f"x{self.replicas}" if self.replicas > 1 else "")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Run:
        sets = {}
        for name, s in doc.get("sets", {}).items():
            phases = {p: Phase({q: Timing(**t) for q, t in ph["timings"].items()}, ph.get("count_p50_ms"),
                               ph.get("started_s", 0.0)) for p, ph in s.get("phases", {}).items()}
            sets[name] = SetResult(s.get("layout", ""), s.get("consuming_share", 0.0), s.get("skipped", ""),
                                   s.get("ingest_s", 0.0), phases)
        return cls(doc["shape"], doc["servers"], doc["replicas"], doc["rows"], doc.get("in_process", False), sets)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def summary_lines(suite: str, result: SetResult) -> list[str]:
    """One line per phase: geometric mean, worst query, COUNT(*) p50; and the fresh-over-settled ratio."""
    lines = []
    for name in PHASES:
        phase = result.phases.get(name)
        if phase is None:
            continue
        worst = phase.worst()
        right = sum(t.verdict == "pass" for t in phase.timings.values())
        lines.append(f"{suite} {name} (from {phase.started_s:.0f} s after ingest): {right}/{len(phase.timings)} "
                     f"right; client wall / DuckDB geometric mean {_x(phase.geomean())}, worst "
                     f"{worst[0] + ' ' + _x(worst[1]) if worst else '-'}; SELECT COUNT(*) p50 "
                     f"{_ms(phase.count_p50_ms)} ms"
                     + (f"; cluster CPU / DuckDB CPU geometric mean {_x(cpu)}" if (cpu := phase.cpu_geomean()) else ""))
    fresh, settled = result.phases.get("fresh"), result.phases.get("settled")
    if fresh and settled and (f := fresh.geomean()) and (s := settled.geomean()):
        lines.append(f"{suite}: fresh / settled geometric mean {f / s:.2f}x")
    return lines


def side_by_side(console: Console, runs: list[Run]) -> None:
    """Per set, each query's settled client wall time and ratio under every shape, then each shape's summary."""
    suites = list(dict.fromkeys(s for run in runs for s in run.sets))
    for suite in suites:
        table = Table(title=f"{suite}: client wall ms (ratio to DuckDB in memory), settled; rows "
                            f"{', '.join(f'{r.label} {r.rows:,}' for r in runs)}")
        table.add_column("query")
        for run in runs:
            table.add_column(run.label, justify="right")
        queries = list(dict.fromkeys(q for run in runs if suite in run.sets
                                     for phase in run.sets[suite].phases.values() for q in phase.timings))
        for query in queries:
            cells = []
            for run in runs:
                phase = run.sets.get(suite, SetResult()).phases.get("settled")
                timing = phase.timings.get(query) if phase else None
                if timing is None:
                    cells.append("")
                elif timing.verdict != "pass":
                    cells.append(f"[red]{timing.verdict}[/red]" if timing.verdict in ("wrong", "error")
                                 else timing.verdict)
                else:
                    cells.append(f"{_ms(timing.wall_ms)} ({_x(timing.ratio)})")
            table.add_row(query, *cells)
        for name in PHASES:
            rows: dict[str, list[str]] = {"geomean": [], "worst": [], "COUNT(*) p50 ms": []}
            for run in runs:
                result = run.sets.get(suite)
                phase = result.phases.get(name) if result else None
                if phase is None:  # (why: below the table)
                    for cells in rows.values():
                        cells.append("not served" if result and result.skipped else "not run")
                    continue
                worst = phase.worst()
                rows["geomean"].append(_x(phase.geomean()))
                rows["worst"].append(f"{worst[0].rsplit('-', 1)[-1]} {_x(worst[1])}" if worst else "")
                rows["COUNT(*) p50 ms"].append(_ms(phase.count_p50_ms))
            for label, cells in rows.items():
                table.add_row(f"[bold]{name} {label}[/bold]", *cells)
        console.print(table)
        for run in runs:
            if suite in run.sets and run.sets[suite].skipped:
                console.print(f"{suite} not served {run.label}: {run.sets[suite].skipped}")
