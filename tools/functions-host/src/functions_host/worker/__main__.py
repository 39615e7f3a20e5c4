"""``python -m functions_host.worker --host H --port P --workerId W --requestId R ...``.

The local host starts this process with the arguments the Functions host gives its
language workers (both the classic ``--workerId`` forms and the ``--functions-*`` forms);
the Service Bus extension's ``ServiceBusMessageActions`` reads ``--host``, ``--port`` and
``--functions-grpc-max-message-length`` from ``sys.argv`` to reach the host's Settlement
service, so they must be there exactly as the platform passes them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from functions_host.worker.dispatcher import run_worker
from functions_host.worker.parent_watch import watch_parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m functions_host.worker")
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workerId", "--functions-worker-id", dest="worker_id", required=True)
    parser.add_argument("--requestId", "--functions-request-id", dest="request_id", required=True)
    parser.add_argument(
        "--grpcMaxMessageLength",
        "--functions-grpc-max-message-length",
        dest="max_message_length",
        type=int,
        default=2_147_483_647,
    )
    args, _ = parser.parse_known_args(argv)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    watch_parent(os.getppid())
    return asyncio.run(
        run_worker(args.host, args.port, args.worker_id, args.request_id, args.max_message_length)
    )


if __name__ == "__main__":
    sys.exit(main())
