"""`cuvee auth ...`: what the ``[auth]`` table of a role's config takes (docs/security.md)."""

from __future__ import annotations

import argparse
import getpass
import sys

from cuvee.auth.secrets import hash_password, new_token
from cuvee.errors import UserError


def register(groups: argparse._SubParsersAction) -> None:
    parser = groups.add_parser("auth", help="credentials for the [auth] config table")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=type(parser))
    commands.required = True
    hashed = commands.add_parser("hash-password", help="print the hash a principal's `password` key takes")
    hashed.add_argument("--stdin", action="store_true", help="read the password from stdin instead of a prompt")
    hashed.set_defaults(func=_hash_password)
    token = commands.add_parser("new-token", help="print a new bearer token and the hash a `token` key takes")
    token.set_defaults(func=_new_token)


def _hash_password(args: argparse.Namespace) -> int:
    if args.stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass("password: ")
        if getpass.getpass("again: ") != password:
            raise UserError("the two passwords differ")
    if not password or len(password) > 1024:
        raise UserError("a password has 1 to 1024 characters")
    print(hash_password(password))
    return 0


def _new_token(args: argparse.Namespace) -> int:
    token, stored = new_token()
    print(f"token (give it to the client; also fits auth.internal_token): {token}")
    print(f"hash (the principal's `token` key): {stored}")
    return 0
