"""``python -m openai_emulator``: options, logging, run until SIGTERM or Ctrl-C (exit 0).

Bad options exit with status 2 and the reason (argparse's behaviour).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable

from .batches import Limits
from .chat import QUOTA_SYNTAX, Quota, parse_quota
from .server import DEFAULT_KEY, Emulator, ServerOptions

DEFAULT_PORT = 5390


def _number(kind: type[int] | type[float], minimum: float) -> Callable[[str], int | float]:
    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from error
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum:g}, got {text}")
        return value

    return parse


def deployment(text: str) -> Quota:
    try:
        return parse_quota(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


TokenLimit = tuple[str | None, int]  # (deployment, or None for every deployment; limit)


def token_limit(text: str) -> TokenLimit:
    """``N`` (every deployment's enqueued-token limit) or ``DEPLOYMENT=N`` (that one's)."""
    name, separator, number = text.rpartition("=")
    if separator and not name:
        raise argparse.ArgumentTypeError(f"not N or DEPLOYMENT=N: {text!r}")
    try:
        limit = int(number)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not N or DEPLOYMENT=N in whole tokens: {text!r}"
        ) from None
    if limit < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {text!r}")
    return (name or None), limit


def limits_of(args: argparse.Namespace) -> Limits:
    """The batch limits the options give (the last bare ``--enqueued-token-limit`` is the
    default; a named one is its deployment's)."""
    chosen: list[TokenLimit] = args.enqueued_token_limit
    default = next((limit for name, limit in reversed(chosen) if name is None), None)
    named = {name: limit for name, limit in chosen if name is not None}
    return Limits(args.max_lines, args.max_bytes, default, tuple(named.items()))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m openai_emulator",
        description="Local Azure OpenAI emulator (files, Global Batch jobs and chat "
        "completions with per-deployment quotas) for development and tests (not for "
        "production).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default loopback)")
    parser.add_argument(
        "--port",
        type=_number(int, 0),
        default=DEFAULT_PORT,
        help=f"HTTP port (default {DEFAULT_PORT}; 0 = any free port)",
    )
    parser.add_argument("--key", default=DEFAULT_KEY, help="the api-key requests must send")
    parser.add_argument(
        "--auto-advance",
        type=_number(float, 0),
        default=0.0,
        help="seconds between a batch's automatic status steps (0 = off)",
    )
    parser.add_argument(
        "--max-lines",
        type=_number(int, 1),
        default=Limits.max_lines,
        help="most requests an input file may hold",
    )
    parser.add_argument(
        "--max-bytes",
        type=_number(int, 1),
        default=Limits.max_bytes,
        help="largest input file, in bytes",
    )
    parser.add_argument(
        "--enqueued-token-limit",
        type=token_limit,
        action="append",
        default=[],
        metavar="[DEPLOYMENT=]N",
        help="the enqueued-token quota of DEPLOYMENT, or of every deployment not named "
        "(default unlimited); repeatable",
    )
    parser.add_argument(
        "--deployment",
        type=deployment,
        action="append",
        default=[],
        metavar=QUOTA_SYNTAX.replace("DEPLOYMENT", "NAME"),
        help="a chat deployment's quota (tokens and requests per minute), latency, and "
        "LIMITER: 'window' (default; 10-second windows, as Azure OpenAI) or 'minute' (a "
        "sliding minute); repeatable (deployments not named answer without limit)",
    )
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    args = parser.parse_args(argv)
    if not args.key:
        parser.error("--key must not be empty")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level,
        stream=sys.stdout,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    options = ServerOptions(
        host=args.host,
        port=args.port,
        api_key=args.key,
        auto_advance=args.auto_advance,
        limits=limits_of(args),
        deployments=tuple(args.deployment),
    )
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        emulator = Emulator(options)
    except OSError as error:
        logging.getLogger("openai_emulator").error(
            "cannot listen on %s:%s: %s", args.host, args.port, error
        )
        return 2
    emulator.start()
    stop.wait()
    emulator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
