"""End-to-end throughput of the whole local stack against its local limit; lone latency.

What it measures. The full local stack (a fresh in-memory Azurite, the Service Bus emulator
with infra/local's entities, the local host serving a snapshot of the app with its own
host.json and the sample settings) takes ``--requests`` submissions of a ~1.4 KB text from
``--callers`` concurrent HTTP clients (``POST /api/v1/requests``). A request counts as
done when its outcome is seen where the world sees it: its result message on a benchmark
subscription of the results topic (``1=1``, added to a copy of the emulator config), or its
message in the request queue's dead-letter queue. Nothing polls the app while it works.
End-to-end req/s = requests that ended ``completed`` or ``refused`` / (last outcome - first
submit), so a run that fails or dead-letters everything scores 0 and its outcome counts
say why. One request goes through first, untimed (first-use costs of the host's clients).

The local limit it compares against, measured in the same run, interleaved with the
end-to-end repeats (limit, run, limit, run...):

* Service Bus: receive+complete msgs/s through the SDK against the emulator on the app's
  queue, received as a batch trigger receives (the app's host.json ``prefetchCount`` and
  ``maxMessageBatchSize``; see ``_harness.servicebus_ceiling``), messages shaped like the
  app's request messages (one is peeked during calibration), each completed on its own:
  the settle round trip. The broker's other work per request (the intake's send, the
  result's publication to the topic's subscriptions) is not in this figure; the emulator's
  CPU per request, printed below, covers all of it;
* storage: Azurite's ops/s for the app's op mix / storage ops per request. Ops per request
  are counted at the storage HTTP boundary in a calibration run: a small counting reverse
  proxy sits between the app's ``Storage`` connection and Azurite (see
  ``_harness.CountingProxy``); intake = operations while a POST waits for its 202 (one
  request at a time, processor disabled), processing = the rest (processor enabled, each
  operation attributed by the blob it touches). The op mix is then replayed request by
  request (same verbs, ``If-None-Match: *`` / ``If-Match`` conditions and sizes) with
  ``azure-storage-blob`` at the same concurrency against a fresh Azurite;
* local limit = min(the two), per repeat; ratio = end-to-end / local limit.

The Event Grid pull door is switched off (``EventGridPull__namespaceEndpoint`` empty): no
request comes through it, and its namespace emulator is not part of the request path.
Calibration also counts operations per request under load (16 callers, processor
running) to show that concurrency adds no conflict retries.

Also: CPU per request of the host and its worker process, of Azurite, of the emulator and
of this client (from /proc), with what it allows on this machine's cores; the same for a
floor: the calls a request makes, each timed in this run with no app code around them
(the storage op mix replayed with the SDK, Azurite and client; receive+complete as the
ceiling above, emulator and client; two single sends, the request and its result; the
host's round trip of an empty HTTP function, host and worker), so it leaves out the app's
code, its model, its events and the trigger's own invocation and settlement: the most
any app built on these SDKs and this host could reach here. And lone-request latency on
an idle stack: one request at a time, submit -> its result message (median/p90 of
``--lone``; target 400 ms), then one ``GET`` of its status right after the result message
(not polled): how often the API already says ``completed`` when the announcement arrives.

Run: ``.venv/bin/python bench/end_to_end.py [--requests 300] [--callers 16] [--repeats 5]
[--lone 30] [--calibration 20]`` (``make bench`` runs the defaults: a few minutes on 2
cores). How to read: a figure is ``median [min..max, n=repeats]``; the ratio near 1 means
the app reaches what this machine's Azurite/emulator allow, well below 1 means the app's
own path (host, worker, its waits) is the bottleneck. On a 2-core machine everything shares
the same cores, so the limits are measured alone and the end-to-end run pays for all
processes at once: the CPU line says where the time goes. Figures only: nothing asserts.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from _harness import (
    FALLBACK_SHAPE,
    BatchSettings,
    CpuMeter,
    CpuParts,
    Services,
    app_snapshot,
    argument_parser,
    calibrate,
    connect,
    create_containers,
    host_round_trip_cpu,
    job_status,
    load_to_outcomes,
    machine,
    median,
    now_stamp,
    outcome_text,
    per_call_ms,
    quantile,
    ratio,
    running_host,
    sample_settings,
    send_latencies,
    servicebus_ceiling,
    services,
    spread,
    storage_replay,
    submit,
    work_folder,
)

LONE_TARGET_MS = 400.0
THROUGHPUT_TARGET = 0.8


@dataclass
class Run:
    rate: float  # good outcomes per second, first submit to last outcome
    accepted_rate: float
    outcomes: Counter[str]
    dead_letters: int
    statuses: Counter[int]
    accept_ms: list[float]
    cpu: dict[str, float]
    finished: bool


@dataclass
class Limits:
    servicebus: list[float] = field(default_factory=list)
    storage_ops: list[float] = field(default_factory=list)
    storage_requests: list[float] = field(default_factory=list)
    local: list[float] = field(default_factory=list)
    binding: Counter[str] = field(default_factory=Counter)
    floor_cpu: CpuParts = field(default_factory=CpuParts)


def end_to_end(
    stack: Services, root: Path, work: Path, name: str, requests: int, callers: int
) -> Run:
    values = stack.values()
    with (
        stack.outcome_watcher(values) as watcher,
        running_host(root, values, work, name) as host,
    ):
        connection = connect(host.port)
        _, warm = submit(connection, host.key)
        connection.close()
        if warm is None or not watcher.wait_for([warm], 60):
            raise RuntimeError(f"the warm-up request did not finish: {warm}")
        run = load_to_outcomes(stack, host, watcher, requests, callers, timeout=60 + requests / 2)
        dead_letters = len(watcher.dead_letters)
    load = run.load
    return Run(
        rate=run.good_rate,
        accepted_rate=len(run.ids) / (load.ended - load.began),
        outcomes=run.outcomes,
        dead_letters=dead_letters,
        statuses=load.statuses,
        accept_ms=[(answered - began) * 1000 for began, answered in load.accepted.values()],
        cpu=run.cpu,
        finished=run.finished,
    )


def lone_latency(work: Path, root: Path, count: int) -> None:
    """One request at a time on an idle stack: submit -> result message; then one GET."""
    with services(work, "lone") as stack:
        values = stack.values()
        create_containers(stack.storage, values)
        with (
            stack.outcome_watcher(values) as watcher,
            running_host(root, values, work, "lone-host") as host,
        ):
            connection = connect(host.port)
            to_result: list[float] = []
            to_accept: list[float] = []
            to_status: list[float] = []
            first_status: Counter[str] = Counter()
            late: list[str] = []
            for index in range(count + 2):  # two warm-up requests first
                began = time.perf_counter()
                status, request_id = submit(connection, host.key)
                accepted = time.perf_counter()
                if request_id is None or not watcher.wait_for([request_id], 60):
                    raise RuntimeError(f"lone request not finished (POST {status})")
                seen = watcher.observed(request_id) or accepted
                job = job_status(connection, host.key, request_id)
                checked = time.perf_counter()
                if index < 2:
                    continue
                to_accept.append((accepted - began) * 1000)
                to_result.append((seen - began) * 1000)
                first_status[str(job.get("status"))] += 1
                if job.get("status") == "completed":
                    to_status.append((checked - began) * 1000)
                else:
                    late.append(request_id)
            final = Counter(str(job_status(connection, host.key, r).get("status")) for r in late)
            connection.close()
            outcomes = watcher.outcomes(list(watcher.results))
    print(f"\nlone request latency, idle stack, {count} requests one at a time ({now_stamp()}):")
    print(
        f"  POST -> 202:             p50 {quantile(to_accept, 0.5):7.1f} ms   "
        f"p90 {quantile(to_accept, 0.9):7.1f} ms"
    )
    p50 = quantile(to_result, 0.5)
    print(
        f"  submit -> result message: p50 {p50:7.1f} ms   p90 {quantile(to_result, 0.9):7.1f} ms"
        f"   [{min(to_result):.0f}..{max(to_result):.0f}]   target {LONE_TARGET_MS:.0f} ms: "
        f"p50/target {ratio(p50, LONE_TARGET_MS):.2f}"
    )
    print(
        f"  status GET right after the result message: {dict(first_status)}"
        + (
            f"; submit -> status completed p50 {quantile(to_status, 0.5):.1f} ms"
            if to_status
            else ""
        )
        + (f"; not yet completed then, at the end: {dict(final)}" if late else "")
    )
    print(f"  outcomes: {outcome_text(outcomes)}")


def main() -> int:
    parser = argument_parser(__doc__)
    parser.add_argument("--requests", type=int, default=300, help="requests per run (300)")
    parser.add_argument("--callers", type=int, default=16, help="concurrent HTTP clients (16)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved repeats (5)")
    parser.add_argument("--lone", type=int, default=30, help="lone requests, 0 skips (30)")
    parser.add_argument("--calibration", type=int, default=20, help="calibration requests (20)")
    parser.add_argument(
        "--ceiling-messages", type=int, default=1000, help="messages per Service Bus ceiling"
    )
    args = parser.parse_args()
    with work_folder("inferbus-e2e-") as work:
        root = app_snapshot(work / "app")
        batch = BatchSettings.of(root)
        settings = sample_settings()
        print(
            f"end_to_end ({now_stamp()}, {machine()}): {args.requests} requests x "
            f"{args.repeats} repeats, {args.callers} callers; host.json {batch.label()}; "
            f"ModelConcurrency {settings.processing.model_concurrency}, LocalModelLatencyMs "
            f"{settings.local_model.latency_ms}"
        )
        calibration = calibrate(
            work, root, args.calibration, load=(min(args.requests, 100), args.callers)
        )
        calibration.print()
        per_request = calibration.ops_per_request()
        templates = calibration.templates()
        shape = calibration.shape or FALLBACK_SHAPE
        limits = Limits()
        runs: list[Run] = []
        for repeat in range(args.repeats):
            replayed = storage_replay(
                work, f"replay-{repeat}", templates, args.requests, args.callers
            )
            floor = limits.floor_cpu
            floor.add("storage calls", replayed.cpu_per_template(("azurite", "bench client")))
            with services(work, f"run-{repeat}") as stack:
                values = stack.values()
                create_containers(stack.storage, values)
                queue = values["RequestsQueueName"]
                ceiling_meter = CpuMeter({"emulator": stack.emulator_pid})
                ceiling = servicebus_ceiling(
                    stack.servicebus, queue, shape, args.ceiling_messages, batch, ceiling_meter
                )
                floor.add(
                    "receive+complete",
                    per_call_ms(ceiling_meter.used, ("emulator", "bench client"),
                                args.ceiling_messages),
                )  # fmt: skip
                floor.add(
                    "host round trip",
                    host_round_trip_cpu(stack, work, f"ping-{repeat}", args.callers),
                )
                run = end_to_end(stack, root, work, f"host-{repeat}", args.requests, args.callers)
                # After the run (its host is gone): nobody processes these messages.
                send_meter = CpuMeter({"emulator": stack.emulator_pid})
                sends = send_latencies(stack.servicebus, queue, shape, 100, send_meter)
                one_send = per_call_ms(send_meter.used, ("emulator", "bench client"), len(sends))
                floor.add("2 sends", 2 * one_send)
            storage_limit = replayed.ops_per_second / per_request
            local = min(ceiling, storage_limit)
            limits.servicebus.append(ceiling)
            limits.storage_ops.append(replayed.ops_per_second)
            limits.storage_requests.append(storage_limit)
            limits.local.append(local)
            limits.binding["storage" if storage_limit <= ceiling else "Service Bus"] += 1
            runs.append(run)
            print(
                f"  repeat {repeat + 1}: {run.rate:6.1f} req/s end to end "
                f"(limit {local:6.1f}, ratio {ratio(run.rate, local):.2f}); "
                f"outcomes {outcome_text(run.outcomes, run.dead_letters)}; "
                f"HTTP {dict(run.statuses)}" + ("" if run.finished else "; NOT ALL FINISHED")
            )
        print_summary(args, runs, limits, per_request, calibration.per_request("intake"))
        if args.lone:
            lone_latency(work, root, args.lone)
        print(f"finished {now_stamp()}, {machine()}")
    return 0


def print_summary(
    args: argparse.Namespace,
    runs: list[Run],
    limits: Limits,
    per_request: float,
    intake_ops: list[int],
) -> None:
    rates = [run.rate for run in runs]
    ratios = [ratio(run.rate, local) for run, local in zip(runs, limits.local, strict=True)]
    totals: Counter[str] = Counter()
    for run in runs:
        totals.update(run.outcomes)
    accept_ms = [ms for run in runs for ms in run.accept_ms]
    print(f"\nend to end, {args.requests} requests x {len(runs)}, {args.callers} callers:")
    print(f"  end to end (completed+refused)/s: {spread(rates)} req/s")
    print(f"  accepted (202) during the runs:   {spread([r.accepted_rate for r in runs])} req/s; "
          f"POST -> 202 p50 {quantile(accept_ms, 0.5):.0f} ms, p99 "
          f"{quantile(accept_ms, 0.99):.0f} ms")  # fmt: skip
    print(f"  outcomes over all repeats: {outcome_text(totals)}")
    print("local limit, same run:")
    print(f"  Service Bus receive+complete:     {spread(limits.servicebus, 0)} msg/s")
    print(
        f"  storage, the app's op mix:        {spread(limits.storage_ops, 0)} ops/s "
        f"/ {per_request:.1f} ops per request "
        f"(intake {sum(intake_ops) / len(intake_ops):.1f}) = "
        f"{spread(limits.storage_requests)} req/s"
    )
    print(
        f"  local limit = min(...):           {spread(limits.local)} req/s "
        f"(bound by {dict(limits.binding)})"
    )
    print(f"  ratio end to end / local limit:   {spread(ratios, 2)}")
    cpu_ms = [  # per run: process -> CPU ms per request with an outcome
        {
            name: seconds * 1000 / max(1, sum(run.outcomes.values()))
            for name, seconds in run.cpu.items()
        }
        for run in runs
    ]
    total_ms = [sum(ms for name, ms in cpu.items() if name != "bench client") for cpu in cpu_ms]
    parts = [f"{name} {spread([cpu[name] for cpu in cpu_ms], 1)}" for name in runs[0].cpu]
    print("CPU ms per request: " + "; ".join(parts))
    cores = os.cpu_count() or 1
    print(
        f"  host+worker+azurite+emulator {spread(total_ms, 1)} ms per request: on {cores} "
        f"cores at most ~{cores * 1000 / median(total_ms):.0f} req/s from CPU alone"
    )
    floor = limits.floor_cpu
    floor_ms = floor.totals()
    floor_cap = [cores * 1000 / ms for ms in floor_ms]
    print(f"  the floor (the same calls, no app code): {floor.text()} ms")
    print(
        f"    = {spread(floor_ms, 1)} ms per request -> at most {spread(floor_cap)} req/s on "
        f"{cores} cores = "
        + spread([ratio(c, lim) for c, lim in zip(floor_cap, limits.local, strict=True)], 2)
        + f" x the local limit (the target asks {THROUGHPUT_TARGET})"
    )


if __name__ == "__main__":
    sys.exit(main())
