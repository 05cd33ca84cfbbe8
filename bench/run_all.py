"""Run every benchmark in bench/ once and print their figures (benchmarks are not tests: no pass/fail targets).

Each script runs in its own process with one repetition (``--repeat 1`` where it takes the flag) at its default
size; ``--quick`` also shrinks sizes (``--rows``/``--messages``) for a smoke run that still shows the figures.
``compat.py`` runs once per shape users run (``COMPAT_SHAPES``: an offline table on one server, a realtime and a
hybrid table on three, each role in a process of its own) at ``COMPAT_ROWS`` rows, and the three are then printed
side by side (client wall time against DuckDB's, settled; each shape's geometric mean, worst query and
``SELECT COUNT(*)`` p50, right after ingest and settled). Its full-size figures take ``--rows 1000000`` (see its
docstring); ``--only compat.py`` runs just it.

    .venv/bin/python bench/run_all.py [--quick] [--timeout 1200] [--only compat.py,e2e.py]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _compat_report import Run, side_by_side  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent
QUICK_SIZES = {"--rows": "100000", "--messages": "50000"}
COMPAT_SHAPES = [("offline", 1), ("realtime", 3), ("hybrid", 3)]  # (--table-type, --servers)
COMPAT_ROWS = "200000"  # per table: the three shapes of both sets in ~10 minutes on 2 cores


def script_flags(script: Path, quick: bool) -> list[str]:
    """The flags this script understands, read from its --help."""
    help_text = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=60).stdout
    flags = ["--repeat", "1"] if "--repeat" in help_text else []
    if quick:
        for flag, value in QUICK_SIZES.items():
            if flag in help_text:
                flags += [flag, value]
    return flags


def run(name: str, command: list[str], timeout: float) -> bool:
    """Run one benchmark, its output indented under its name; False when it failed or timed out."""
    print(f"== {name} {' '.join(command[2:])}", flush=True)
    start = time.perf_counter()
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"   timed out after {timeout:.0f} s", flush=True)
        return False
    for line in result.stdout.splitlines():
        print(f"   {line}")
    if result.returncode != 0:
        print(f"   FAILED (exit {result.returncode}): {result.stderr.strip().splitlines()[-1:]}")
    print(f"   ({time.perf_counter() - start:.1f} s)", flush=True)
    return result.returncode == 0


def run_compat(script: Path, flags: list[str], timeout: float, quick: bool) -> list[str]:
    """compat.py in every shape of ``COMPAT_SHAPES``, then their figures side by side; the shapes that failed."""
    failed, runs = [], []
    with tempfile.TemporaryDirectory(prefix="cuvee-run-all-") as tmp:
        for shape, servers in COMPAT_SHAPES:
            out = Path(tmp) / f"{shape}.json"
            sized = flags if quick else [*flags, "--rows", COMPAT_ROWS]
            command = [sys.executable, str(script), *sized, "--table-type", shape, "--servers", str(servers),
                       "--json", str(out)]
            if not run(f"{script.name} ({shape}, {servers} server(s))", command, timeout):
                failed.append(f"{script.name} {shape}")
            if out.exists():  # written even when an answer was wrong (its figures say which)
                runs.append(Run.from_json(json.loads(out.read_text())))
    if runs:
        side_by_side(Console(width=170), runs)
    return failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller inputs, for a smoke run")
    parser.add_argument("--timeout", type=float, default=1200,
                        help="seconds allowed per script (per compat shape: ~5 minutes each at 200,000 rows on a busy 2-core box)")
    parser.add_argument("--only", default="", help="comma-separated script names (default: every one)")
    args = parser.parse_args()
    only = {name.strip() for name in args.only.split(",") if name.strip()}
    failures = []
    for script in sorted(BENCH_DIR.glob("*.py")):
        if script.name == Path(__file__).name or script.name.startswith("_") or (only and script.name not in only):
            continue
        flags = script_flags(script, args.quick)
        if script.name == "compat.py":
            failures += run_compat(script, flags, args.timeout, args.quick)
        elif not run(script.name, [sys.executable, str(script), *flags], args.timeout):
            failures.append(script.name)
    if failures:
        print(f"failed: {', '.join(failures)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
