"""Command line: ``python -m eventgrid_emulator --config FILE [--port N] [--storage CONNSTR]``."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from .config import ConfigError, load_config
from .server import Emulator, ServerOptions

STORAGE_ENV = "EVENTGRID_EMULATOR_STORAGE"


def _time_scale(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError("the time scale must be in (0, 1]")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m eventgrid_emulator",
        description="Local Event Grid namespace emulator for development and tests "
        "(not for production).",
    )
    parser.add_argument("--config", type=Path, required=True, help="the namespace file (JSON)")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default loopback)")
    parser.add_argument("--port", type=int, default=5380, help="HTTP port (0 = any free port)")
    parser.add_argument(
        "--storage",
        default=os.environ.get(STORAGE_ENV),
        help=f"blob connection string for dead letters (Azurite; default ${STORAGE_ENV}; "
        "unset = dead letters are logged and dropped)",
    )
    parser.add_argument(
        "--time-scale",
        type=_time_scale,
        default=1.0,
        help="multiply the service's durations (locks, waits, delays, TTL, retries) by this",
    )
    parser.add_argument(
        "--push-timeout", type=float, default=30.0, help="seconds a webhook may take to answer"
    )
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level,
        stream=sys.stdout,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("azure").setLevel(logging.WARNING)
    try:
        config = load_config(args.config)
    except ConfigError as error:
        logging.getLogger("eventgrid_emulator").error("invalid config: %s", error)
        return 2
    options = ServerOptions(
        host=args.host,
        port=args.port,
        storage=args.storage or None,
        time_scale=args.time_scale,
        push_timeout=args.push_timeout,
    )
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    emulator = Emulator(config, options)
    emulator.start()
    stop.wait()
    emulator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
