"""`cuvee stream ...` commands."""

from __future__ import annotations

import argparse


def register(groups: argparse._SubParsersAction) -> None:
    parser = groups.add_parser("stream", help="stream commands")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=type(parser))
    commands.required = True
