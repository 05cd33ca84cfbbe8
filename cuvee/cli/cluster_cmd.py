"""`cuvee cluster up|down`: a local cluster of separate processes (controller, servers, broker)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cuvee.deploy.local import LocalClusterSpec, down, up


def register(groups: argparse._SubParsersAction) -> None:
    parser = groups.add_parser("cluster", help="start and stop a local cluster of separate processes")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=type(parser))
    commands.required = True

    start = commands.add_parser("up", help="start a controller, N servers and a broker; write DIR/cluster.json")
    start.add_argument("--dir", required=True, type=Path, help="directory for configs, logs, metadata, stream, segments")
    start.add_argument("--servers", type=int, default=3, help="number of servers (default 3)")
    start.add_argument("--metadata", default="", help="metadata store URI (default sqlite:///DIR/metadata.db)")
    start.add_argument("--deep-store", default="", help="deep store URI (default file://DIR/deepstore)")
    start.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for every role to be healthy")
    start.add_argument("--auth", action="store_true",
                       help="turn auth on: an admin principal whose password goes to DIR/conf/admin-password")
    start.add_argument("--tls-cert", default="", help="PEM certificate chain every role serves HTTPS with")
    start.add_argument("--tls-key", default="", help="its private key (PEM)")
    start.add_argument("--tls-ca", default="", help="the CA the roles' certificate chains to (what clients trust)")
    start.set_defaults(func=_up)

    stop = commands.add_parser("down", help="stop the cluster started from DIR")
    stop.add_argument("--dir", required=True, type=Path)
    stop.set_defaults(func=_down)


def _up(args: argparse.Namespace) -> int:
    spec = LocalClusterSpec(
        dir=args.dir, servers=args.servers, metadata=args.metadata, deep_store=args.deep_store,
        start_timeout_seconds=args.timeout, auth=args.auth, tls_certfile=args.tls_cert, tls_keyfile=args.tls_key,
        tls_ca_file=args.tls_ca,
    )
    info = up(spec)
    print(json.dumps(info, indent=2))
    if spec.auth:
        print(f"auth is on: log in as admin with the password in {info['adminPasswordFile']}")
    print(f"cluster is up; stop it with: cuvee cluster down --dir {args.dir}")
    return 0


def _down(args: argparse.Namespace) -> int:
    stopped = down(args.dir)
    print(f"stopped {len(stopped)} process(es): {', '.join(stopped) if stopped else 'none were running'}")
    return 0
