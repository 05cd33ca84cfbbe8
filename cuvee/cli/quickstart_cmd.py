"""`cuvee quickstart`: a local 3-server cluster, a realistic event stream, and a few queries."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(groups: argparse._SubParsersAction) -> None:
    parser = groups.add_parser("quickstart", help="start a local cluster, ingest sample page views, run queries")
    parser.add_argument("--dir", type=Path, default=Path("quickstart"), help="cluster directory (default ./quickstart)")
    parser.add_argument("--rows", type=int, default=200_000, help="page views to produce (default 200,000)")
    parser.add_argument("--rows-per-segment", type=int, default=20_000, help="flush threshold rows (default 20,000)")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from cuvee.deploy.quickstart import QuickstartOptions, run

    run(QuickstartOptions(dir=args.dir, rows=args.rows, rows_per_segment=args.rows_per_segment))
    return 0
