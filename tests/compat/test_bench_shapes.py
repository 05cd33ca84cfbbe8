"""``bench/compat.py`` in the shapes users run, at a tiny size (2 servers in this process): every query of the
set answered as DuckDB answers it over the same rows, in both phases (right after ingest, and settled), with the
realtime rows' share in consuming segments as the bench promises; a wrong answer is reported, not timed, and
fails the run. The sizing rule of the realtime segments is checked over many row counts and partitions."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from cuvee.testing.compat.judge import Outcome, Verdict
from cuvee.testing.compat.shapes import (CONSUMING_SHARE, MAX_COMMITTED_PER_PARTITION, expected_consuming_rows,
                                         realtime_segment_rows, round_robin_sizes)

BENCH = Path(__file__).resolve().parents[2] / "bench" / "compat.py"
ROWS = 3_000


def _bench(path: Path = BENCH) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


def _run(tmp_path: Path, *args: str, bench: ModuleType | None = None, repeat: int = 1) -> tuple[int, dict[str, Any]]:
    out = tmp_path / "run.json"
    code = (bench or _bench()).main([*args, "--rows", str(ROWS), "--servers", "2", "--in-process", "--repeat",
                                     str(repeat), "--count-runs", "3", "--json", str(out)])
    return code, json.loads(out.read_text())


@pytest.mark.parametrize("rows", [1_000, 3_000, 99_999, 1_000_000, 10_000_000])
@pytest.mark.parametrize("partitions", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("segments", [1, 8, 40, 400])
def test_realtime_segments_leave_a_tenth_of_every_partition_consuming(rows: int, partitions: int,
                                                                       segments: int) -> None:
    sizes = round_robin_sizes(rows, partitions)
    assert sum(sizes) == rows and max(sizes) - min(sizes) <= 1
    skewed = [size + size * p // 20 for p, size in enumerate(sizes)]  # keyed: partitions up to 30% apart
    for layout in (sizes, skewed):
        size = realtime_segment_rows(layout, segments)
        for mine in layout:
            assert 1 <= mine // size <= MAX_COMMITTED_PER_PARTITION  # committed segments
            assert mine % size >= CONSUMING_SHARE * mine  # the consuming segment's rows
        assert expected_consuming_rows(layout, size) >= CONSUMING_SHARE * sum(layout)


def test_realtime_clickbench_keyed_by_user_answers_right_fresh_and_settled_and_a_wrong_answer_fails_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench()
    real_judge = bench.judge_all

    def one_wrong(http: Any, broker: str, oracle: Any, queries: list[Any]) -> list[Outcome]:
        outcomes = real_judge(http, broker, oracle, queries)
        return [Outcome(o.query_id, Verdict.WRONG, "planted") if o.query_id == "clickbench-002" else o
                for o in outcomes]

    monkeypatch.setattr(bench, "judge_all", one_wrong)
    code, run = _run(tmp_path, "--table-type", "realtime", "--set", "clickbench", "--partition-column", "UserID",
                     bench=bench)
    assert code == 1  # the planted wrong answer fails the run
    result = run["sets"]["clickbench"]
    assert "keyed by UserID" in result["layout"] and result["consuming_share"] >= 0.10, result["layout"]
    for phase in ("fresh", "settled"):
        timings = result["phases"][phase]["timings"]
        assert len(timings) == 43
        assert timings.pop("clickbench-002") == {"verdict": "wrong", "wall_ms": None, "used_ms": None,
                                                 "duckdb_ms": None, "detail": "planted", "cpu_ms": None,
                                                 "duckdb_cpu_ms": None}  # not timed
        assert {q: t["verdict"] for q, t in timings.items() if t["verdict"] != "pass"} == {}
        assert all(t["wall_ms"] > 0 and t["duckdb_ms"] > 0 and t["duckdb_cpu_ms"] >= 0 for t in timings.values())
        assert result["phases"][phase]["count_p50_ms"] > 0


def test_hybrid_sets_answer_right_fresh_and_settled_on_epoch_and_date_string_time_columns(tmp_path: Path) -> None:
    """Pinot's set splits on an epoch day column, ClickBench's on ``EventTime`` date strings (yyyy-MM-dd HH:mm:ss)."""
    code, run = _run(tmp_path, "--table-type", "hybrid", "--set", "all", repeat=0)  # judged, not timed
    assert code == 0
    for name, queries in (("pinot", 200), ("clickbench", 43)):
        result = run["sets"][name]
        assert not result.get("skipped"), result
        assert "offline segments" in result["layout"] and "time boundary" in result["layout"]
        assert result["consuming_share"] >= 0.10, result["layout"]
        for phase in ("fresh", "settled"):
            timings = result["phases"][phase]["timings"]
            assert len(timings) == queries
            assert {q: t["verdict"] for q, t in timings.items() if t["verdict"] != "pass"} == {}
    assert "time boundary 20" in run["sets"]["clickbench"]["layout"]  # shown in EventTime's format: 2013-07-..


def test_the_shapes_print_side_by_side_from_their_json() -> None:
    """What run_all prints: each shape's settled wall time and ratio per query, wrong answers marked, a set a shape
    could not serve named with the reason, and each phase's geometric mean, worst query and COUNT(*) p50."""
    report = _bench(BENCH.parent / "_compat_report.py")
    fast = report.Phase({"pinot-001": report.Timing("pass", 4.0, 3.0, 2.0),
                         "pinot-002": report.Timing("pass", 9.0, 8.0, 1.0),
                         "pinot-003": report.Timing("wrong", detail="got 1 row")}, 1.5, 0.0)
    offline = report.Run("offline", 1, 1, 1000, sets={"pinot": report.SetResult("8 segments", 0.0, "", 1.0,
                                                                                {"fresh": fast, "settled": fast})})
    hybrid = report.Run("hybrid", 3, 1, 1000, sets={"clickbench": report.SetResult(skipped="no epoch time column")})
    runs = [report.Run.from_json(json.loads(json.dumps(r.to_json()))) for r in (offline, hybrid)]
    assert runs[0].sets["pinot"].phases["settled"].geomean() == pytest.approx(18 ** 0.5)  # ratios 2 and 9
    assert runs[0].sets["pinot"].phases["settled"].worst() == ("pinot-002", 9.0)
    console = report.Console(record=True, width=200)
    report.side_by_side(console, runs)
    text = console.export_text()
    assert "4.0 (2.00x)" in text and "9.0 (9.00x)" in text and "wrong" in text
    assert "settled geomean" in text and "4.24x" in text and "002 9.00x" in text and "1.5" in text
    assert "clickbench not served hybrid/3: no epoch time column" in text
