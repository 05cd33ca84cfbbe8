"""The ``cuvee`` command line. Each command group lives in its own module with a ``register(subparsers)``.

User mistakes (bad flags, missing files, invalid configs) print one line on stderr and exit non-zero;
a traceback means a bug in Cuvee.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from cuvee import __version__
from cuvee.errors import CuveeError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"cuvee: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    from cuvee.cli import (auth_cmd, cluster_cmd, pipeline_cmd, provision_cmd, quickstart_cmd, role_cmd, segment_cmd,
                           status_cmd, stream_cmd)

    parser = _Parser(prog="cuvee", description="Cuvee: a real-time OLAP store.")
    parser.add_argument("--version", action="version", version=f"cuvee {__version__}")
    groups = parser.add_subparsers(dest="group", metavar="COMMAND", parser_class=_Parser)
    groups.required = True
    for module in (stream_cmd, segment_cmd, role_cmd, cluster_cmd, quickstart_cmd, pipeline_cmd, auth_cmd,
                   status_cmd, provision_cmd):
        module.register(groups)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except CuveeError as exc:
        print(f"cuvee: error: {exc}", file=sys.stderr)
        return 1
    except FileNotFoundError as exc:
        print(f"cuvee: error: no such file: {exc.filename}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
