"""Intake latency and throughput of the local host serving the real Inferbus app.

Starts what it needs on free loopback ports (Azurite in memory, the Service Bus emulator
with infra/local, the local host twice: the Inferbus app and the sample app whose
anonymous ``ping`` function is the ceiling of the host itself), then for each concurrency
level runs a fixed-duration closed loop of ``POST /api/v1/requests`` and of ``GET /api/ping``
and prints p50/p95/p99 latency and throughput. When the app has a Service Bus trigger it
also submits a burst and polls ``GET /api/v1/requests/{id}`` until every request is terminal.

Figures only, never assertions. ``python bench/intake_http.py --help`` for the knobs.
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from devtools.processes import Child  # noqa: E402
from devtools.stack import ensure_containers  # noqa: E402
from tests.fixtures.azurite import run_azurite  # noqa: E402
from tests.fixtures.servicebus_emulator import DEFAULT_CONFIG, _EmulatorProcess  # noqa: E402

TERMINAL = {"completed", "failed", "expired", "cancelled"}
SUBMIT_BODY = json.dumps({"model": "local-analyzer", "input": {"text": "hello"}}).encode()
SAMPLE_DISABLED = ("on_blob", "settle_batch", "handle_single", "yearly", "on_event")


@contextmanager
def process(
    command: list[str], log: Path, ready: re.Pattern[str], timeout: float = 60
) -> Iterator[re.Match[str]]:
    """A child process until its ``ready`` line appears; SIGINT (graceful) on exit."""
    child = Child(" ".join(command[1:3]), command, log)
    try:
        yield child.wait_for(ready, timeout)
    finally:
        child.stop(signal.SIGINT, timeout=40)


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
    python = sys.executable
    storage = stack.enter_context(run_azurite()).connection_string
    emulator = _EmulatorProcess(DEFAULT_CONFIG, work / "emulator.log")
    stack.callback(emulator.stop)
    servicebus = emulator.info.connection_string
    values = json.loads((REPO_ROOT / "local.settings.sample.json").read_text())["Values"]
    values |= {
        "AzureWebJobsStorage": storage,
        "Storage": storage,
        "ServiceBusConnection": servicebus,
    }
    # What the sample app's bindings name (its Service Bus and blob functions are disabled).
    values |= {
        "WatchedContainer": "bench-watched",
        "BatchQueue": "inference-requests",
        "EventsTopic": "inference-results",
        "EventsSubscription": "audit",
        "SAMPLE_RECORD_FILE": str(work / "record.jsonl"),
    }
    if not backlog_check:
        values["MaxQueueBacklog"] = "0"
    settings = work / "local.settings.json"
    settings.write_text(json.dumps({"IsEncrypted": False, "Values": values}))
    ensure_containers(settings, values)
    started = re.compile(r"Host started: http://[\d.]+:(\d+)")
    common = ["--settings", str(settings), "--port", "0", "--log-level", "warning"]
    app_command = [python, "-m", "devtools.host", "--script-root", str(REPO_ROOT), *common]
    app_command += ["--keys-file", str(work / "keys.json")]
    app = stack.enter_context(process(app_command, work / "host-app.log", started))
    sample_root = str(REPO_ROOT / "tests" / "host" / "sample_app")
    ceiling_command = [python, "-m", "devtools.host", "--script-root", sample_root, *common]
    ceiling_command += ["--keys-file", str(work / "keys-sample.json")]
    ceiling_command += [arg for name in SAMPLE_DISABLED for arg in ("--disable", name)]
    ceiling = stack.enter_context(process(ceiling_command, work / "host-sample.log", started))
    keys = json.loads((work / "keys.json").read_text())
    return Stack(
        app_port=int(app.group(1)),
        ceiling_port=int(ceiling.group(1)),
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
