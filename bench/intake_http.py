"""Intake latency and throughput of the local host serving the real Inferbus app.

Starts what it needs on free loopback ports (Azurite in memory, the Service Bus emulator
with infra/local, the local host twice: the Inferbus app and the host benchmark's ping
app, whose anonymous ``ping`` function is the ceiling of the host itself), then for each
concurrency level runs a fixed-duration closed loop of ``POST /api/v1/requests`` and of
``GET /api/ping`` and prints p50/p95/p99 latency and throughput. When the app has a Service
Bus trigger it also submits a burst and polls ``GET /api/v1/requests/{id}`` until every
request is terminal.

Figures only, never assertions. ``python bench/intake_http.py --help`` for the knobs.
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
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from functions_host.process import HostProcess
from local_processes import run_azurite
from servicebus_emulator.process import run_emulator

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from devtools.stack import EMULATOR_CONFIG, ensure_containers  # noqa: E402

TERMINAL = {"completed", "failed", "expired", "cancelled"}
SUBMIT_BODY = json.dumps({"model": "local-analyzer", "input": {"text": "hello"}}).encode()
# The host's own ceiling: its benchmark's app, one anonymous function answering "pong".
PING_APP = REPO_ROOT / "tools" / "functions-host" / "bench" / "ping_app"


@contextmanager
def host(script_root: Path, settings: Path, work: Path, name: str) -> Iterator[HostProcess]:
    """The local host on ``script_root`` until its ``Host started`` line; Ctrl-C on exit."""
    process = HostProcess(script_root, settings, work / f"host-{name}.log",
                          keys_path=work / f"keys-{name}.json",
                          extra_args=["--log-level", "warning"])  # fmt: skip
    try:
        process.wait_started(timeout=60)
        yield process
    finally:
        process.stop(timeout=40)


def request(
    connection: http.client.HTTPConnection, method: str, path: str, body: bytes | None = None
) -> tuple[int, bytes]:
    headers = (
        {"Content-Type": "application/json", "X-Tenant-Id": "contoso"}
        if body
        else {"X-Tenant-Id": "contoso"}
    )
    connection.request(method, path, body=body, headers=headers)
    response = connection.getresponse()
    return response.status, response.read()


def closed_loop(
    port: int, path: str, method: str, body: bytes | None, concurrency: int, duration: float
) -> dict[str, float]:
    """``concurrency`` clients, each sending its next request when the previous answers."""
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    lock = threading.Lock()
    stop_at = time.monotonic() + duration

    def client() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        mine: list[float] = []
        codes: dict[int, int] = {}
        try:
            while time.monotonic() < stop_at:
                started = time.perf_counter()
                status, _ = request(connection, method, path, body)
                mine.append(time.perf_counter() - started)
                codes[status] = codes.get(status, 0) + 1
        except Exception as error:
            codes[-1] = codes.get(-1, 0) + 1
            print(f"  client error: {error!r}", file=sys.stderr)
        finally:
            connection.close()
            with lock:
                latencies.extend(mine)
                for code, count in codes.items():
                    statuses[code] = statuses.get(code, 0) + count

    began = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    return summarize(latencies, elapsed) | {"statuses": statuses}  # type: ignore[dict-item]


def summarize(latencies: list[float], elapsed: float) -> dict[str, float]:
    if not latencies:
        return {"n": 0, "rps": 0.0, "p50": 0.0, "p95": 0.0, "p99": 0.0}
    ordered = sorted(latencies)
    cut = (
        statistics.quantiles(ordered, n=100, method="inclusive")
        if len(ordered) > 1
        else ordered * 99
    )
    return {
        "n": len(ordered),
        "rps": len(ordered) / elapsed,
        "p50": cut[49] * 1000,
        "p95": cut[94] * 1000,
        "p99": cut[98] * 1000,
    }


def print_row(label: str, concurrency: int, figures: dict[str, float]) -> None:
    print(
        f"  {label:<22} c={concurrency:<3} n={figures['n']:<6} {figures['rps']:8.1f} req/s   "
        f"p50 {figures['p50']:7.1f} ms  p95 {figures['p95']:7.1f} ms  "
        f"p99 {figures['p99']:7.1f} ms   "
        f"statuses {figures.get('statuses')}"
    )


def burst_to_completion(port: int, key: str, count: int, timeout: float) -> None:
    """Submit ``count`` requests (32 clients), then poll each until terminal."""
    ids: list[tuple[str, float]] = []
    lock = threading.Lock()
    pending = iter(range(count))
    began = time.perf_counter()

    def submitter() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        while True:
            with lock:
                if next(pending, None) is None:
                    break
            status, body = request(connection, "POST", f"/api/v1/requests?code={key}", SUBMIT_BODY)
            if status == 202:
                with lock:
                    ids.append((json.loads(body)["id"], time.perf_counter()))
        connection.close()

    run_threads(submitter, 32)
    submitted = time.perf_counter() - began
    done: dict[str, tuple[str, float]] = {}
    deadline = time.monotonic() + timeout
    todo = list(ids)
    while todo and time.monotonic() < deadline:
        queue = iter(list(todo))

        def poller(queue: Iterator[tuple[str, float]] = queue) -> None:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            while True:
                with lock:
                    item = next(queue, None)
                if item is None:
                    break
                status, body = request(connection, "GET", f"/api/v1/requests/{item[0]}?code={key}")
                state = json.loads(body).get("status") if status == 200 else None
                if state in TERMINAL:
                    with lock:
                        done.setdefault(item[0], (str(state), time.perf_counter() - item[1]))
            connection.close()

        run_threads(poller, 8)
        todo = [item for item in todo if item[0] not in done]
        time.sleep(0.2)
    total = time.perf_counter() - began
    outcomes: dict[str, int] = {}
    for state, _ in done.values():
        outcomes[state] = outcomes.get(state, 0) + 1
    figures = summarize([latency for _, latency in done.values()], total)
    print(
        f"  burst of {count}: {len(ids)} accepted in {submitted:.1f}s; {len(done)} terminal in "
        f"{total:.1f}s ({len(done) / total:.1f}/s end to end); outcomes {outcomes}; "
        f"not terminal {len(todo)}"
    )
    print(
        f"  submit-to-terminal latency p50 {figures['p50']:.0f} ms  p95 {figures['p95']:.0f} ms"
        f"  p99 {figures['p99']:.0f} ms"
    )


def run_threads(target: Callable[[], None], count: int) -> None:
    threads = [threading.Thread(target=target) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


@dataclass(frozen=True)
class Stack:
    app_port: int
    ceiling_port: int
    function_key: str
    master_key: str


def start_stack(stack: ExitStack, work: Path, backlog_check: bool) -> Stack:
    """Azurite, the emulator and both hosts on free loopback ports, stopped by ``stack``."""
    storage = stack.enter_context(run_azurite(REPO_ROOT)).connection_string
    emulator = stack.enter_context(run_emulator(EMULATOR_CONFIG, work))
    values = json.loads((REPO_ROOT / "local.settings.sample.json").read_text())["Values"]
    values |= {
        "AzureWebJobsStorage": storage,
        "Storage": storage,
        "ServiceBusConnection": emulator.connection_string,
    }
    if not backlog_check:
        values["MaxQueueBacklog"] = "0"
    settings = work / "local.settings.json"
    settings.write_text(json.dumps({"IsEncrypted": False, "Values": values}))
    ensure_containers(settings, values)
    app = stack.enter_context(host(REPO_ROOT, settings, work, "app"))
    ceiling = stack.enter_context(host(PING_APP, settings, work, "ping"))
    keys = app.keys
    return Stack(
        app_port=int(app.base_url.rsplit(":", 1)[1]),
        ceiling_port=int(ceiling.base_url.rsplit(":", 1)[1]),
        function_key=keys["functionKeys"]["default"],
        master_key=keys["masterKey"],
    )


def has_servicebus_trigger(port: int, master_key: str) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        _, listing = request(connection, "GET", f"/admin/functions?code={master_key}")
    finally:
        connection.close()
    return any(
        binding.get("type") == "serviceBusTrigger"
        for function in json.loads(listing)
        for binding in function["config"]["bindings"]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--levels", default="1,8,32", help="concurrency levels (default 1,8,32)")
    parser.add_argument("--duration", type=float, default=4.0, help="seconds per level and target")
    parser.add_argument("--burst", type=int, default=500, help="end-to-end burst size (0 = skip)")
    parser.add_argument("--burst-timeout", type=float, default=60.0)
    parser.add_argument(
        "--backlog-check",
        action="store_true",
        help="keep MaxQueueBacklog from the sample settings (off by default: see the note printed)",
    )
    args = parser.parse_args()
    levels = [int(level) for level in args.levels.split(",")]
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="inferbus-bench-")))
        ports = start_stack(stack, work, args.backlog_check)
        submit_path = f"/api/v1/requests?code={ports.function_key}"
        print(f"intake_http: {args.duration:.0f}s per level and target, levels {levels}")
        if not args.backlog_check:
            print("  note: MaxQueueBacklog=0 (backlog probe off); --backlog-check keeps it")
        # The burst runs first, on an empty queue, so the latency levels' submissions
        # (which the processor also consumes) do not queue ahead of it.
        if args.burst and has_servicebus_trigger(ports.app_port, ports.master_key):
            burst_to_completion(ports.app_port, ports.function_key, args.burst, args.burst_timeout)
        elif args.burst:
            print("  end to end: skipped: no Service Bus processor function registered")
        for concurrency in levels:
            ceiling = closed_loop(
                ports.ceiling_port, "/api/ping", "GET", None, concurrency, args.duration
            )
            print_row("GET /api/ping (ceiling)", concurrency, ceiling)
            submits = closed_loop(
                ports.app_port, submit_path, "POST", SUBMIT_BODY, concurrency, args.duration
            )
            print_row("POST /api/v1/requests", concurrency, submits)
    return 0


if __name__ == "__main__":
    sys.exit(main())
