"""`cuvee controller|server|broker --config F`: run one role in the foreground until SIGINT/SIGTERM.

The three roles start the same way: read the TOML config (flags override it), log to stderr, start, print the
URL once serving (launchers wait for it), stop cleanly on a signal.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Any

from cuvee.node.config import load_config


@dataclass(frozen=True)
class Role:
    name: str
    help: str
    module: str  # where the role class and its config class live
    role_class: str
    config_class: str


ROLES = (
    Role("controller", "run a controller (REST admin API, segment completion leader)", "cuvee.controller",
         "Controller", "ControllerConfig"),
    Role("server", "run a server (consumes, commits and serves segments)", "cuvee.server.server", "Server",
         "ServerConfig"),
    Role("broker", "run a broker (Pinot's query API over the cluster's servers)", "cuvee.broker.broker", "Broker",
         "BrokerConfig"),
)


def register(groups: argparse._SubParsersAction) -> None:
    for role in ROLES:
        parser = groups.add_parser(role.name, help=role.help)
        parser.add_argument("--config", help=f"the {role.name}'s TOML config file; see docs/{role.name}.md")
        parser.add_argument("--port", type=int, help="HTTP port (overrides the config; 0 picks a free one)")
        parser.add_argument("--metadata", help="metadata store URI (overrides the config)")
        parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
        parser.set_defaults(func=run, role=role)


def run(args: argparse.Namespace) -> int:
    role: Role = args.role
    module = importlib.import_module(role.module)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    overrides: dict[str, Any] = {}
    if args.port is not None:
        overrides["port"] = args.port
    if args.metadata is not None:
        overrides["metadata"] = args.metadata
    config = load_config(getattr(module, role.config_class), args.config, overrides)
    if role.name == "controller":  # failure tests drop a controller process at a commit step (CUVEE_FAULTS)
        from cuvee.controller.faults import arm_from_environment

        arm_from_environment()
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    instance = getattr(module, role.role_class)(config)
    try:
        instance.start()
        print(instance.url, flush=True)
        while not stop.wait(1.0):
            pass
    finally:
        instance.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
