"""Command line: ``python -m servicebus_emulator --config FILE [--host --port --data-dir]``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from pathlib import Path

from .config import ConfigError, load_config
from .persistence import PersistenceError, open_journal
from .server import Emulator, ServerOptions

SAS_KEY_ENV = "SERVICEBUS_EMULATOR_SAS_KEY"
DATA_DIR_ENV = "SERVICEBUS_EMULATOR_DATA_DIR"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m servicebus_emulator",
        description="Local Service Bus emulator for development and tests (not for production).",
    )
    parser.add_argument(
        "--config", type=Path, required=True, help="Config.json (Microsoft emulator schema)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default loopback)")
    parser.add_argument("--port", type=int, default=5672, help="AMQP port (0 = any free port)")
    parser.add_argument(
        "--admin-port", type=int, default=5300, help="runtime-counts HTTP port (0 = any)"
    )
    parser.add_argument(
        "--sas-key",
        default=os.environ.get(SAS_KEY_ENV),
        help=f"verify SAS signatures with this key (default ${SAS_KEY_ENV}; unset = accept any)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=os.environ.get(DATA_DIR_ENV) or None,
        help=f"keep messages in this folder across restarts (default ${DATA_DIR_ENV};"
        " unset = nothing is kept)",
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
    try:
        config = load_config(args.config)
    except ConfigError as error:
        logging.getLogger("servicebus_emulator").error("invalid config: %s", error)
        return 2
    options = ServerOptions(
        host=args.host, port=args.port, admin_port=args.admin_port, sas_key=args.sas_key
    )
    emulator = Emulator(config, options)
    try:
        journal = None if args.data_dir is None else open_journal(args.data_dir, emulator.namespace)
    except PersistenceError as error:
        logging.getLogger("servicebus_emulator").error("%s", error)
        return 2
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(emulator.run())
    finally:
        if journal is not None:
            journal.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
