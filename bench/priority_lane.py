"""The priority lane: a ``high`` request behind a standard backlog vs on an idle stack.

What it measures (issue #13 item 4). Per repeat, on a fresh stack (in-memory Azurite, the
Service Bus emulator with infra/local's entities plus a benchmark subscription on the
results topic, the local host serving a snapshot of the app with the sample settings and
``LocalModelLatencyMs`` so each model call takes realistic time), after one untimed
``normal`` and one untimed ``high`` request (first-use costs of both lanes):

* A, idle: ``--idle`` ``high`` requests one at a time (``POST /api/v1/requests`` with
  ``"priority": "high"``: the priority queue, ``process_priority_requests``, its own pool
  of ``PriorityModelConcurrency`` model calls); each timed from its submit to its result
  message on the benchmark subscription (``_harness.OutcomeWatcher``; nothing polls the
  app). The repeat's A is their median.
* B, behind a backlog: ``--backlog`` ``normal`` requests from ``--callers`` concurrent
  clients, then at once one ``high`` request, timed the same way. Recorded with it: the
  standard queue's depth when it was submitted (the emulator's runtime counts: messages
  waiting + locked), how many of the backlog's requests had their outcome by then and by
  the time the high one had its own, and the backlog's span (first submit -> last outcome).
* C, control: right after the high one, the same request as ``normal``: it joins the tail
  of the same backlog (no second backlog is needed), so C - B is what priority saves.

A and B/C alternate per repeat (A1 B1 A2 B2 ...), each repeat on a new stack so Azurite's
growing per-operation cost (it holds every blob of the backlog) never reaches an A.
Printed per repeat and as ``median [min..max, n=repeats]``: A, B, C, the ratio B/A
(target: about 1, i.e. the high request does not notice the backlog) and C/B. B's time is
also split into POST -> 202 (the HTTP front and intake, sharing the machine with the
backlog's processing) and 202 -> result; beside it the priority function's invocation
(its ``Executed ... Duration`` line in the host's log, A's alongside; the result message
goes out before the invocation ends, which still settles its message) and how long after
the 202 that invocation began (the line's time less its duration): a lane that did not
get ahead would show as a wait there. The local limit here is A itself: the same request,
same stack, nothing else running. The backlog's processing starts while it is still being
submitted, so the queue holds fewer than ``--backlog`` when the high one goes in: the
depth printed is the backlog it actually met. With ``--held`` the whole backlog waits: it
is submitted to a host with ``process_requests`` disabled (as the Functions host honours
``AzureWebJobs.<name>.Disabled``), which then stops; a host with every function starts on
the full queue, takes one untimed high request (its worker's first use of the lane), then
B and C as above.

What the lane cannot separate is what both lanes share: the machine's cores (host, worker,
Azurite, emulator on 2 cores; the CPU line shows how busy they were during B) and the one
storage account, Azurite, a single Node.js process that answers every blob operation of
both lanes in turn. A storage probe shows the latter: one small blob GET every 50 ms from
this process (its own client and container, ~20 operations/s beside the app's hundreds),
p50 during A, while the high request ran, and while the backlog drained.

Run: ``.venv/bin/python bench/priority_lane.py [--backlog 1000] [--latency-ms 100]
[--repeats 3] [--idle 5] [--callers 16] [--set NAME=VALUE ...] [--batch-size N]
[--held] [--keep DIR]`` (``--set`` overrides an app setting, e.g. ``ModelConcurrency=4``;
``--batch-size`` host.json's ``maxMessageBatchSize``; ``--keep`` keeps the run's folder
with the host's, Azurite's and the emulator's logs). The defaults take about 2 minutes on
2 cores. Figures only: nothing asserts.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from _harness import (
    PROCESSOR,
    TEXT,
    BatchSettings,
    Host,
    Load,
    OutcomeWatcher,
    Services,
    app_snapshot,
    argument_parser,
    connect,
    create_containers,
    good,
    machine,
    median,
    now_stamp,
    outcome_text,
    ratio,
    running_host,
    sample_settings,
    sample_values,
    services,
    spread,
    submit,
    submit_load,
    work_folder,
)
from azure.core.exceptions import ResourceExistsError
from azure.storage.blob import BlobServiceClient

TARGET_RATIO = 1.0  # B/A: a high request behind a backlog takes what it takes on an idle stack
HIGH_BODY = json.dumps(
    {"model": "local-analyzer", "input": {"text": TEXT}, "priority": "high"}
).encode()
NORMAL_BODY = json.dumps(
    {"model": "local-analyzer", "input": {"text": TEXT}, "priority": "normal"}
).encode()
PRIORITY_PROCESSOR = "process_priority_requests"
PROBE_INTERVAL_S = 0.05  # storage probe: one small GET every 50 ms (~20/s beside the app's)
PROBE_CONTAINER = "bench-probe"


@dataclass
class Timed:
    """One timed request: submit -> 202 -> its outcome (perf_counter seconds)."""

    request_id: str
    began: float
    accepted: float
    accepted_wall: float = float("nan")  # time.time() of the 202, to compare with the host's log
    seen: float = float("nan")
    outcome: str = "missing"

    @property
    def total_ms(self) -> float:
        return (self.seen - self.began) * 1000

    @property
    def accept_ms(self) -> float:
        return (self.accepted - self.began) * 1000

    @property
    def after_accept_ms(self) -> float:
        return (self.seen - self.accepted) * 1000


@dataclass
class Repeat:
    idle: list[Timed] = field(default_factory=list)
    high: Timed | None = None
    control: Timed | None = None
    depth_at_submit: int = -1  # standard queue: waiting + locked when the high one was sent
    done_at_submit: int = 0  # backlog outcomes seen when the high one was sent
    done_at_high: int = 0  # backlog outcomes seen when the high one's outcome arrived
    backlog_accepted: int = 0
    submit_s: float = float("nan")  # first backlog submit -> last 202
    span_s: float = float("nan")  # first backlog submit -> last backlog outcome
    backlog_outcomes: str = ""
    finished: bool = False
    cpu: dict[str, float] = field(default_factory=dict)
    cpu_seconds: float = 0.0
    idle_invocations: list[float] = field(default_factory=list)  # ms, A's priority batches
    priority_invocations: list[float] = field(default_factory=list)  # ms, during B
    dispatch_ms: float = float("nan")  # the high one: its 202 -> its invocation's start
    probe_idle: list[float] = field(default_factory=list)  # storage probe ms during A
    probe_high: list[float] = field(default_factory=list)  # ... while the high one ran
    probe_drain: list[float] = field(default_factory=list)  # ... while the backlog drained

    @property
    def idle_ms(self) -> float:
        return median([t.total_ms for t in self.idle])


class StorageProbe:
    """One small blob GET every ``PROBE_INTERVAL_S`` from this process (its own container,
    its own client, not the app's GIL): Azurite's latency as any caller sees it, to tell
    time spent waiting on the shared storage from time spent in the app."""

    def __init__(self, storage: str) -> None:
        service = BlobServiceClient.from_connection_string(storage)
        with suppress(ResourceExistsError):
            service.create_container(PROBE_CONTAINER)
        self._blob = service.get_blob_client(PROBE_CONTAINER, "probe.json")
        self._blob.upload_blob(b"{}", overwrite=True)
        self.samples: list[tuple[float, float]] = []  # (sent at, seconds)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> StorageProbe:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(PROBE_INTERVAL_S):
            began = time.perf_counter()
            with suppress(Exception):  # a failed probe is a missing sample, not a failed run
                self._blob.download_blob().readall()
                self.samples.append((began, time.perf_counter() - began))

    def between(self, start: float, end: float) -> list[float]:
        """Milliseconds of the probes sent between ``start`` and ``end``."""
        return [seconds * 1000 for at, seconds in list(self.samples) if start <= at <= end]


def timed_submit(host: Host, body: bytes) -> Timed:
    connection = connect(host.port)
    try:
        began = time.perf_counter()
        status, request_id = submit(connection, host.key, body)
        accepted = time.perf_counter()
        accepted_wall = time.time()
    finally:
        connection.close()
    if status != 202 or request_id is None:
        raise RuntimeError(f"POST answered {status}")
    return Timed(request_id, began, accepted, accepted_wall)


def settle(watcher: OutcomeWatcher, timed: Timed, timeout: float) -> Timed:
    """Wait for ``timed``'s outcome and fill it in (left 'missing' after ``timeout``)."""
    if watcher.wait_for([timed.request_id], timeout):
        timed.seen = watcher.observed(timed.request_id) or float("nan")
        timed.outcome = next(iter(watcher.outcomes([timed.request_id])))
    return timed


def queue_depth(stack: Services, queue: str) -> int:
    """Messages in ``queue`` not yet settled (waiting + locked), from the emulator's counts."""
    return int(stack.queue_counts(queue)["active_message_count"])


@dataclass(frozen=True)
class Invocation:
    started: float  # time.time(): the Executed line's time less its duration
    ms: float


def invocations(log: str, function: str) -> list[Invocation]:
    """``function``'s invocations in a host log (``<date> <time>,<ms> ... Executed
    'Functions.<name>' (..., Duration=<n>ms)``, the host's local time), in order."""
    pattern = (
        r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*Executed "
        rf"'Functions\.{re.escape(function)}' \(\w+, Id=[^,]+, Duration=(\d+)ms\)"
    )
    found = []
    for stamp, ms in re.findall(pattern, log, flags=re.MULTILINE):
        ended = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
        found.append(Invocation(ended - float(ms) / 1000, float(ms)))
    return found


def warm_up(watcher: OutcomeWatcher, host: Host, bodies: tuple[bytes, ...]) -> None:
    """One untimed request per body, each to its outcome (first-use costs of a lane)."""
    for body in bodies:
        warm = settle(watcher, timed_submit(host, body), 60)
        if warm.outcome == "missing":
            raise RuntimeError(f"the warm-up request did not finish: {warm.request_id}")


def logged_invocations(host: Host, expected: int) -> list[Invocation]:
    """The priority function's invocations once ``expected`` are in the host's log (it logs
    one when it returns, just after its result message went out), or after 10 s."""
    deadline = time.monotonic() + 10
    found = invocations(host.log(), PRIORITY_PROCESSOR)
    while len(found) < expected and time.monotonic() < deadline:
        time.sleep(0.05)
        found = invocations(host.log(), PRIORITY_PROCESSOR)
    return found


def run_repeat(
    stack: Services,
    root: Path,
    work: Path,
    name: str,
    args: argparse.Namespace,
    overrides: dict[str, str],
) -> Repeat:
    values = stack.values(**overrides)
    create_containers(stack.storage, values)
    repeat = Repeat()
    held = (PROCESSOR,) if args.held else ()
    with (
        stack.outcome_watcher(values) as watcher,
        StorageProbe(stack.storage) as probe,
    ):
        first = f"{name}-held" if held else name
        with running_host(root, values, work, first, held) as host:
            # With the standard processor held, a normal warm-up would only join the backlog.
            warm_up(watcher, host, (HIGH_BODY,) if held else (NORMAL_BODY, HIGH_BODY))
            # A: idle stack, one high request at a time.
            for _ in range(args.idle):
                repeat.idle.append(settle(watcher, timed_submit(host, HIGH_BODY), 60))
            logged = logged_invocations(host, 1 + args.idle)
            repeat.idle_invocations = [i.ms for i in logged[-args.idle :]] if args.idle else []
            if repeat.idle:
                repeat.probe_idle = probe.between(repeat.idle[0].began, repeat.idle[-1].seen)
            if not held:
                behind_backlog(stack, host, watcher, probe, repeat, args, len(logged), None)
                return repeat
            load = submit_load(host.port, host.key, args.backlog, args.callers)
        # The held backlog is released: a host with every function starts on it at once; one
        # untimed high request first (the new worker's first use of the lane), then B and C.
        with running_host(root, values, work, name) as host:
            started = time.perf_counter()
            warm_up(watcher, host, (HIGH_BODY,))
            logged = logged_invocations(host, 1)
            behind_backlog(stack, host, watcher, probe, repeat, args, len(logged), (load, started))
    return repeat


def behind_backlog(
    stack: Services,
    host: Host,
    watcher: OutcomeWatcher,
    probe: StorageProbe,
    repeat: Repeat,
    args: argparse.Namespace,
    invocations_before: int,
    held: tuple[Load, float] | None,
) -> None:
    """B and C: (the backlog, unless ``held`` = (its load, when its processing began)), then
    the high request and the normal control at once; fills ``repeat``."""
    queue = stack.values()["RequestsQueueName"]
    meter = stack.cpu_meter(host.pid)
    meter.start()
    metered_from = time.perf_counter()
    if held is None:
        load = submit_load(host.port, host.key, args.backlog, args.callers)
        drain_began = load.began
    else:
        load, drain_began = held
    backlog_ids = list(load.accepted)
    repeat.backlog_accepted = len(backlog_ids)
    repeat.submit_s = load.ended - load.began
    repeat.done_at_submit = sum(1 for i in backlog_ids if watcher.observed(i) is not None)
    depth: list[int] = []
    reader = threading.Thread(target=lambda: depth.append(queue_depth(stack, queue)))
    reader.start()  # read while the high request goes in, without delaying it
    high = timed_submit(host, HIGH_BODY)
    control = timed_submit(host, NORMAL_BODY)
    reader.join()
    repeat.depth_at_submit = depth[0] if depth else -1
    repeat.high = settle(watcher, high, 60)
    repeat.done_at_high = sum(
        1 for i in backlog_ids if (watcher.observed(i) or float("inf")) <= high.seen
    )
    everything = [*backlog_ids, control.request_id]
    repeat.finished = watcher.wait_for(everything, timeout=120 + args.backlog * 0.5)
    repeat.control = settle(watcher, control, 1)
    repeat.cpu = meter.stop()
    repeat.cpu_seconds = time.perf_counter() - metered_from
    if backlog_ids:
        last = watcher.last_outcome_at(backlog_ids)
        repeat.span_s = last - drain_began
        repeat.probe_drain = probe.between(max(load.ended, drain_began), last)
    repeat.probe_high = probe.between(high.began, high.seen)
    outcomes = watcher.outcomes(backlog_ids)
    repeat.backlog_outcomes = outcome_text(outcomes, len(watcher.dead_letters))
    if good(outcomes) < len(backlog_ids):
        print(f"  note: backlog outcomes {repeat.backlog_outcomes}")
    during_b = logged_invocations(host, invocations_before + 1)[invocations_before:]
    repeat.priority_invocations = [invocation.ms for invocation in during_b]
    if during_b:  # the high one's: 202 -> its invocation began (the listener's part)
        repeat.dispatch_ms = (during_b[0].started - high.accepted_wall) * 1000


def print_repeat(index: int, repeat: Repeat, backlog: int) -> None:
    high, control = repeat.high, repeat.control
    assert high is not None
    assert control is not None
    idle = repeat.idle_ms
    print(
        f"  repeat {index}: A idle {idle:6.0f} ms (median of {len(repeat.idle)}); "
        f"B behind backlog {high.total_ms:6.0f} ms (POST->202 {high.accept_ms:.0f}, "
        f"202->result {high.after_accept_ms:.0f}; {high.outcome}); B/A "
        f"{ratio(high.total_ms, idle):.2f}; C normal control {control.total_ms:6.0f} ms "
        f"({control.outcome})"
    )
    print(
        f"    backlog {repeat.backlog_accepted}/{backlog} accepted in {repeat.submit_s:.1f} s; "
        f"when the high one was sent: standard queue depth {repeat.depth_at_submit}, "
        f"{repeat.done_at_submit} done; when its result came: {repeat.done_at_high} done; "
        f"backlog drain {repeat.span_s:.1f} s" + ("" if repeat.finished else "; NOT ALL FINISHED")
    )
    during_b = ", ".join(f"{ms:.0f}" for ms in repeat.priority_invocations)
    print(
        f"    {PRIORITY_PROCESSOR} invocations: A median {median(repeat.idle_invocations):.0f} "
        f"ms, during B {during_b or 'none seen'} ms (began {repeat.dispatch_ms:.0f} ms after the "
        f"202); storage probe GET p50: A "
        f"{median(repeat.probe_idle):.1f} ms, while the high one ran "
        f"{median(repeat.probe_high):.1f} ms (n={len(repeat.probe_high)}), backlog drain "
        f"{median(repeat.probe_drain):.1f} ms"
    )


def print_summary(args: argparse.Namespace, repeats: list[Repeat]) -> None:
    highs = [r.high for r in repeats if r.high is not None]
    controls = [r.control for r in repeats if r.control is not None]
    idle = [r.idle_ms for r in repeats]
    behind = [t.total_ms for t in highs]
    ratios = [ratio(t.total_ms, r.idle_ms) for t, r in zip(highs, repeats, strict=True)]
    control_ms = [t.total_ms for t in controls]
    print(f"\npriority lane, backlog {args.backlog} normal requests x {len(repeats)} repeats:")
    print(f"  A  high, idle stack:            {spread(idle, 0)} ms")
    print(
        f"  B  high, behind the backlog:    {spread(behind, 0)} ms "
        f"(POST->202 {spread([t.accept_ms for t in highs], 0)}, "
        f"202->result {spread([t.after_accept_ms for t in highs], 0)})"
    )
    print(
        f"  ratio B/A:                      {spread(ratios, 2)}   target {TARGET_RATIO:.1f} "
        "(the local limit is A: same request, same stack, nothing else running)"
    )
    print(
        f"  C  normal, same backlog:        {spread(control_ms, 0)} ms; C/B "
        f"{spread([ratio(c, b) for c, b in zip(control_ms, behind, strict=True)], 1)}"
        " (what the lane saves)"
    )
    b_invocations = [r.priority_invocations[0] for r in repeats if r.priority_invocations]
    print(
        f"  {PRIORITY_PROCESSOR} invocation (inside the worker): A "
        f"{spread([median(r.idle_invocations) for r in repeats], 0)} ms, B "
        f"{spread(b_invocations, 0)} ms; B's invocation began "
        f"{spread([r.dispatch_ms for r in repeats], 0)} ms after its 202 reached this client "
        "(a queue would show here; below 0: its message was sent before the 202 went back)"
    )
    print(
        f"  storage probe (GET of a small blob every {PROBE_INTERVAL_S * 1000:.0f} ms from this "
        f"client) p50: A {spread([median(r.probe_idle) for r in repeats])} ms; while the high "
        f"one ran {spread([median(r.probe_high) for r in repeats])} ms; backlog drain "
        f"{spread([median(r.probe_drain) for r in repeats])} ms"
    )
    print(
        "  backlog: queue depth when the high one was sent "
        f"{spread([float(r.depth_at_submit) for r in repeats], 0)}; done then "
        f"{spread([float(r.done_at_submit) for r in repeats], 0)}; done when its result came "
        f"{spread([float(r.done_at_high) for r in repeats], 0)}"
    )
    print(
        f"  backlog submit {spread([r.submit_s for r in repeats])} s; drain ("
        + ("the host's start" if args.held else "first submit")
        + f" -> last outcome) {spread([r.span_s for r in repeats])} s = "
        f"{spread([r.backlog_accepted / r.span_s for r in repeats])} req/s"
    )
    names = list(repeats[0].cpu)
    busy = [f"{name} {spread([r.cpu[name] / r.cpu_seconds for r in repeats], 2)}" for name in names]
    print("  CPU during B (cores busy, of " + f"{machine().split(',')[0]}): " + "; ".join(busy))


def main() -> int:
    parser = argument_parser(__doc__)
    parser.add_argument("--backlog", type=int, default=1000, help="normal requests (1000)")
    parser.add_argument(
        "--latency-ms", type=int, default=100, help="LocalModelLatencyMs per model call (100)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats (3)")
    parser.add_argument("--idle", type=int, default=5, help="idle high requests per repeat (5)")
    parser.add_argument("--callers", type=int, default=16, help="concurrent HTTP clients (16)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override an app setting (repeatable)",
    )
    parser.add_argument(
        "--batch-size", type=int, default=None, help="host.json maxMessageBatchSize override"
    )
    parser.add_argument(
        "--held",
        action="store_true",
        help="submit the backlog with the standard processor off, then start a host with "
        "every function on it: the high request meets the whole backlog waiting",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        metavar="DIR",
        help="run in DIR and keep it (host, Azurite and emulator logs); default: a temp folder",
    )
    args = parser.parse_args()
    overrides = {"LocalModelLatencyMs": str(args.latency_ms)}
    for item in args.set:
        key, _, value = item.partition("=")
        overrides[key] = value
    settings = sample_values() | overrides
    app = sample_settings(overrides)
    with work_folder("inferbus-priority-", args.keep) as work:
        extra = {"maxMessageBatchSize": args.batch_size} if args.batch_size else None
        root = app_snapshot(work / "app", extra)
        batch = BatchSettings.of(root)
        threads = settings.get("PYTHON_THREADPOOL_THREAD_COUNT", "unset: the runtime's default")
        print(
            f"priority_lane ({now_stamp()}, {machine()}): backlog {args.backlog} x "
            f"{args.repeats} repeats"
            + (" (held: submitted with the standard processor off)" if args.held else "")
            + f", {args.callers} callers, {args.idle} idle high requests "
            f"per repeat; LocalModelLatencyMs {app.local_model.latency_ms}, "
            f"ModelConcurrency {app.processing.model_concurrency}, PriorityModelConcurrency "
            f"{app.processing.priority_model_concurrency}; host.json {batch.label()}; "
            f"PYTHON_THREADPOOL_THREAD_COUNT {threads}"
            + (f"; overrides {args.set}" if args.set else "")
        )
        repeats: list[Repeat] = []
        for index in range(args.repeats):
            with services(work, f"repeat-{index}") as stack:
                repeat = run_repeat(stack, root, work, f"host-{index}", args, overrides)
            repeats.append(repeat)
            print_repeat(index + 1, repeat, args.backlog)
        print_summary(args, repeats)
        print(f"finished {now_stamp()}, {machine()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
