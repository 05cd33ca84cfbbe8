"""Run every benchmark in bench/ once and print their figures (benchmarks are not tests: no pass/fail targets).

Each script runs in its own process with one repetition (``--repeat 1`` where it takes the flag) at its default
size; ``--quick`` also shrinks sizes (``--rows``/``--messages``) for a smoke run that still shows the figures.

    .venv/bin/python bench/run_all.py [--quick] [--timeout 600]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
QUICK_SIZES = {"--rows": "100000", "--messages": "50000"}


def script_flags(script: Path, quick: bool) -> list[str]:
    """The flags this script understands, read from its --help."""
    help_text = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=60).stdout
    flags = ["--repeat", "1"] if "--repeat" in help_text else []
    if quick:
        for flag, value in QUICK_SIZES.items():
            if flag in help_text:
                flags += [flag, value]
    return flags


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller inputs, for a smoke run")
    parser.add_argument("--timeout", type=float, default=600, help="seconds allowed per script")
    args = parser.parse_args()
    failures = []
    for script in sorted(BENCH_DIR.glob("*.py")):
        if script.name == Path(__file__).name or script.name.startswith("_"):
            continue
        command = [sys.executable, str(script), *script_flags(script, args.quick)]
        print(f"== {script.name} {' '.join(command[2:])}", flush=True)
        start = time.perf_counter()
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            failures.append(script.name)
            print(f"   timed out after {args.timeout:.0f} s", flush=True)
            continue
        for line in result.stdout.splitlines():
            print(f"   {line}")
        if result.returncode != 0:
            failures.append(script.name)
            print(f"   FAILED (exit {result.returncode}): {result.stderr.strip().splitlines()[-1:]}")
        print(f"   ({time.perf_counter() - start:.1f} s)", flush=True)
    if failures:
        print(f"failed: {', '.join(failures)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
