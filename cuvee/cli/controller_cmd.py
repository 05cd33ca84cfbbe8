"""`cuvee controller --config F [--port P]`: run a controller in the foreground until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from typing import Any

from cuvee.node.config import load_config


def register(groups: argparse._SubParsersAction) -> None:
    parser = groups.add_parser("controller", help="run a controller (REST admin API, segment completion leader)")
    parser.add_argument("--config", help="controller config file (TOML); see docs/controller.md")
    parser.add_argument("--port", type=int, help="HTTP port (overrides the config; 0 picks a free one)")
    parser.add_argument("--metadata", help="metadata store URI (overrides the config)")
    parser.add_argument("--log-level", default="INFO", help="logging level on stderr (default INFO)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from cuvee.controller import Controller, ControllerConfig

    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    overrides: dict[str, Any] = {}
    if args.port is not None:
        overrides["port"] = args.port
    if args.metadata is not None:
        overrides["metadata"] = args.metadata
    config = load_config(ControllerConfig, args.config, overrides)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    controller = Controller(config).start()
    try:
        print(controller.url, flush=True)
        while not stop.wait(1.0):
            pass
    finally:
        controller.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
