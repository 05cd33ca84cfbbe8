"""`cuvee broker --config F [--port P]`: run one broker in the foreground until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from types import FrameType

from cuvee.broker.config import load_broker_config


def register(groups: argparse._SubParsersAction) -> None:
    parser = groups.add_parser("broker", help="run a broker (Pinot's query API over the cluster's servers)")
    parser.add_argument("--config", required=True, help="the broker's TOML config file")
    parser.add_argument("--port", type=int, help="HTTP port (overrides the config; 0 picks a free one)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from cuvee.broker.broker import Broker

    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    overrides = {"port": args.port} if args.port is not None else None
    config = load_broker_config(args.config, overrides)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    broker = Broker(config)
    try:
        broker.start()
        print(broker.url, flush=True)
        while not stop.wait(1.0):
            pass
    finally:
        broker.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
