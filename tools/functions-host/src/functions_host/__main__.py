"""Command line: ``python -m functions_host [--script-root DIR] [--port N] ...``.

Prints ``Host started: http://<bind>:<port>`` once every trigger is listening (tools wait
for that line), then the default function key. Ctrl-C or SIGTERM drains and stops.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from functions_host.config import HostConfigError
from functions_host.host import HostOptions, LocalHost
from functions_host.language_worker import WorkerError
from functions_host.log_lines import OneLineFormatter
from functions_host.sdk_logs import lower_connection_drop_lines

_LEVELS = {
    "trace": logging.DEBUG,
    "debug": logging.DEBUG,
    "information": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "none": logging.CRITICAL,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m functions_host",
        description="Run an Azure Functions Python v2 app locally without Core Tools.",
    )
    parser.add_argument(
        "--script-root",
        type=Path,
        default=Path.cwd(),
        help="folder with host.json and function_app.py (default: current)",
    )
    parser.add_argument(
        "--settings",
        type=Path,
        help="local settings file (default: local.settings.json, else local.settings.sample.json)",
    )
    parser.add_argument(
        "--keys-file", type=Path, help="keys file (default: <script-root>/.local/host-keys.json)"
    )
    parser.add_argument(
        "--port",
        type=int,
        help="HTTP port (default: Host.LocalHttpPort or 7071; 0 = any free port)",
    )
    parser.add_argument(
        "--bind", default="127.0.0.1", help="interface to listen on (default loopback)"
    )
    parser.add_argument(
        "--drain-timeout",
        type=float,
        default=30.0,
        help="seconds running invocations get on shutdown",
    )
    parser.add_argument(
        "--blob-poll-interval",
        type=float,
        default=2.0,
        help="seconds between container scans for blob triggers",
    )
    parser.add_argument(
        "--eventgrid-retry-scale",
        type=float,
        default=1.0,
        help="multiplies Event Grid retry delays (e.g. 0.01 in tests)",
    )
    parser.add_argument(
        "--disable",
        action="append",
        default=[],
        metavar="FUNCTION",
        help="do not run this function (repeatable)",
    )
    parser.add_argument(
        "--log-level", choices=sorted(_LEVELS), help="override host.json logging.logLevel.default"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    options = HostOptions(
        script_root=args.script_root.resolve(),
        settings_path=args.settings,
        keys_path=args.keys_file,
        bind=args.bind,
        port=args.port,
        drain_timeout_s=args.drain_timeout,
        blob_poll_interval_s=args.blob_poll_interval,
        eventgrid_time_scale=args.eventgrid_retry_scale,
        disabled=tuple(args.disable),
    )
    console = logging.StreamHandler(sys.stdout)
    console.setFormatter(OneLineFormatter())  # caller text never forges a line
    logging.basicConfig(level=logging.INFO, handlers=[console])
    try:
        host = LocalHost(options)
    except HostConfigError as error:
        logging.getLogger("host").error("%s", error)
        return 2
    level = args.log_level or host.config.log_level.lower()
    logging.getLogger().setLevel(_LEVELS.get(level, logging.INFO))
    for noisy in ("azure", "uamqp", "urllib3"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))
    lower_connection_drop_lines()
    # The worker's own lines (indexing summary, one "Function name: ..." per invocation) are
    # for debugging the runtime; host.json "Host.Worker" or --log-level debug shows them.
    if not args.log_level:
        logging.getLogger("Host.Worker").setLevel(logging.WARNING)
        for category, category_level in host.config.category_levels.items():
            logging.getLogger(category).setLevel(_LEVELS.get(category_level.lower(), logging.INFO))

    stop_requested = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop_requested.set()

    # `kill -USR1 <pid>` prints every thread's stack: the way to see what a stuck trigger waits on.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    try:
        return _serve(host, options, stop_requested)
    finally:
        host.kill_worker()


def _serve(host: LocalHost, options: HostOptions, stop_requested: threading.Event) -> int:
    """Start, announce, wait for Ctrl-C or SIGTERM, drain; the exit code."""
    try:
        host.start()
    except (WorkerError, HostConfigError) as error:
        logging.getLogger("host").error("%s", error)
        host.stop()
        return 2
    # Each line in one write: the listeners' threads are logging to the same stream, and
    # print() writes its text and its newline separately (a log line could land between).
    keys_file = options.keys_path or options.script_root / ".local" / "host-keys.json"
    for line in (
        f"Host started: {host.base_url}",
        f"Default function key: {host.keys.default_function_key}",
        f"Keys file: {keys_file}",
    ):
        sys.stdout.write(line + "\n")
    sys.stdout.flush()
    while not stop_requested.wait(0.5):
        pass
    host.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
