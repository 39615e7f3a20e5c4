"""Invocation overhead of the local host: a trivial HTTP function through the real runtime.

Starts ``python -m functions_host`` on ``ping_app`` (one anonymous function returning
"pong"; no storage, no Service Bus), then, for each concurrency level, runs closed loops
of ``GET /api/ping`` (keep-alive connections, each client sending its next request when
the previous one answers) and prints the median over repeats of throughput and of the
p50/p99 latencies. Everything measured is the host and the runtime: HTTP parsing, routing,
the gRPC round trip to the worker, binding conversion, the call itself.

Figures only, never assertions. ``python tools/functions-host/bench/invocation_overhead.py
[--levels 1,4,16] [--duration 2] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from functions_host.process import HostProcess

APP = Path(__file__).with_name("ping_app")


def closed_loop(port: int, concurrency: int, duration: float) -> tuple[float, list[float]]:
    """Requests per second and every latency (s) of ``concurrency`` clients for ``duration``."""
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(concurrency + 1)
    stop_at = 0.0

    def client() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mine: list[float] = []
        start.wait()
        try:
            while time.monotonic() < stop_at:
                began = time.perf_counter()
                connection.request("GET", "/api/ping")
                response = connection.getresponse()
                response.read()
                if response.status != 200:
                    errors.append(str(response.status))
                mine.append(time.perf_counter() - began)
        finally:
            connection.close()
            with lock:
                latencies.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    stop_at = time.monotonic() + duration
    began = time.perf_counter()
    start.wait()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    if errors:
        print(f"  {len(errors)} non-200 answers, e.g. {errors[0]}", file=sys.stderr)
    return len(latencies) / elapsed, latencies


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--levels", default="1,4,16", help="concurrency levels (default 1,4,16)")
    parser.add_argument("--duration", type=float, default=2.0, help="seconds per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per level (medians)")
    args = parser.parse_args()
    levels = [int(level) for level in args.levels.split(",")]
    with tempfile.TemporaryDirectory(prefix="functions-host-bench-") as scratch:
        work = Path(scratch)
        settings = work / "local.settings.json"
        values = {"FUNCTIONS_WORKER_RUNTIME": "python"}
        settings.write_text(json.dumps({"IsEncrypted": False, "Values": values}))
        host = HostProcess(APP, settings, work / "host.log", keys_path=work / "keys.json")
        try:
            port = int(host.wait_started().rsplit(":", 1)[1])
            closed_loop(port, 1, 0.5)  # warm-up: first imports and connections
            print(f"invocation_overhead: {args.repeats} x {args.duration:.0f}s per level")
            for concurrency in levels:
                runs = [closed_loop(port, concurrency, args.duration) for _ in range(args.repeats)]
                rps = statistics.median(rate for rate, _ in runs)
                p50 = statistics.median(percentile(lat, 0.50) for _, lat in runs) * 1000
                p99 = statistics.median(percentile(lat, 0.99) for _, lat in runs) * 1000
                print(
                    f"  c={concurrency:<3} {rps:8.1f} invocations/s   "
                    f"p50 {p50:6.2f} ms   p99 {p99:6.2f} ms   (medians of {args.repeats})"
                )
        finally:
            host.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
