"""Batch processing through the local host, as in production: drain rate and outcomes.

What it measures. Per run, on a fresh in-memory Azurite and emulator: a local host with the
processor disabled (``AzureWebJobs.process_requests.Disabled=true``, which the local host
honours as the Functions host does) takes ``--messages`` requests over HTTP, so the queue
holds real request messages for real jobs and input blobs; that host stops. Then a host
with every function enabled starts on the same app snapshot and drains the queue through
the real Functions runtime (batch trigger, SDK-type binding, settlement over gRPC). The
clock runs from its ``Host started`` line until every message's outcome has been seen:
its result message on a benchmark subscription of the results topic, or its dead letter
in the request queue's dead-letter queue. Printed: drain msg/s (all outcomes / seconds),
good (completed or refused) msg/s, outcome counts, and deliveries as measured, not
computed: for requests, how often the job was run (its ``attempts``, read with one
``GET /api/v1/requests/{id}`` per request after the clock stops); for the poison messages,
the broker's count on the dead letter (failed deliveries, plus the delivery on which the
app dead-lettered it). Reprocessed = deliveries - messages. (A redelivery that finds its
job already finished is completed without a run and is not in ``attempts``.) Invocations
(the host's ``Executed`` lines) give the mean batch size.

Also the rate to the first 95% of the outcomes: the difference is the run's tail (with
``minMessageBatchSize`` > 1 a last partial batch waits ``maxBatchWaitTime``).

Variants, interleaved per repeat (clean, poison, clean, poison...), the same number of
messages each: ``clean``, and ``poison``: ``--poison-rate`` (2%) of them are messages with
an invalid body (not JSON, the app's application properties, a random id), sent with the
SDK in between the HTTP submissions, so they share batches with healthy messages.
Per-message settlement should dead-letter each on its first delivery and reprocess nothing.

Local limit, same run: min(Service Bus receive+complete msgs/s with host.json's prefetch and
batch size on the run's emulator after the drain, Azurite's ops/s for the processing op mix
replayed at min(ModelConcurrency, maxMessageBatchSize) threads / processing storage ops per
message) (see ``_harness``: calibration at the storage boundary, replay on a fresh
Azurite). Ratio = drain msg/s / limit.

The old in-process figures (the batch use case called directly, an arithmetic
amplification model) are gone: they did not go through the host, and the in-memory
per-message figure needed app internals that are being changed.

Run: ``.venv/bin/python bench/batch_processing.py [--messages 300] [--repeats 3]
[--poison-rate 0.02]``. How to read: ``median [min..max, n=repeats]``. Figures only.
"""

from __future__ import annotations

import argparse
import http.client
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from _harness import (
    FALLBACK_SHAPE,
    PROCESSOR,
    BatchSettings,
    CpuMeter,
    Host,
    MessageShape,
    app_snapshot,
    argument_parser,
    calibrate,
    connect,
    create_containers,
    good,
    job_status,
    machine,
    now_stamp,
    outcome_text,
    ratio,
    run_threads,
    running_host,
    sample_settings,
    send_messages,
    servicebus_ceiling,
    services,
    spread,
    storage_replay,
    submit_load,
    work_folder,
)


@dataclass
class Drain:
    variant: str
    messages: int
    rate: float
    rate_95: float  # the first 95% of the outcomes: without the tail of the run
    good_rate: float
    outcomes: Counter[str]
    deliveries: int
    unknown_attempts: int
    invocations: int
    cpu_ms: float
    servicebus: float
    limit: float
    finished: bool


def poison(shape: MessageShape) -> MessageShape:
    return MessageShape(b"{not json", shape.properties, "application/json")


def prefill(
    root: Path, values: dict[str, str], work: Path, name: str, count: int, callers: int,
    poisons: int, shape: MessageShape,
) -> tuple[list[str], list[str]]:  # fmt: skip
    """``count`` requests over HTTP with the processor disabled, ``poisons`` invalid
    messages sent in between; returns (request ids, poison message ids)."""
    ids: list[str] = []
    poison_ids: list[str] = []
    chunks = poisons + 1
    with running_host(root, values, work, name, disabled=(PROCESSOR,)) as host:
        for chunk in range(chunks):
            size = count // chunks + (1 if chunk < count % chunks else 0)
            ids += list(submit_load(host.port, host.key, size, callers).accepted)
            if chunk < poisons:
                message = poison(shape).message()
                poison_ids.append(str(message.message_id))
                send_messages(
                    values["ServiceBusConnection"], values["RequestsQueueName"], [message]
                )
    return ids, poison_ids


def attempts_of(port: int, key: str, ids: list[str]) -> tuple[int, int]:
    """Sum of the jobs' ``attempts`` (8 clients, once per job); (sum, jobs without it)."""
    total = [0, 0]
    lock = threading.Lock()
    todo = iter(ids)

    def reader() -> None:
        connection = connect(port)
        try:
            while True:
                with lock:
                    request_id = next(todo, None)
                if request_id is None:
                    return
                try:
                    job = job_status(connection, key, request_id)
                except (OSError, http.client.HTTPException):
                    job = {}
                    connection.close()
                    connection = connect(port)
                with lock:
                    if isinstance(job.get("attempts"), int):
                        total[0] += job["attempts"]
                    else:
                        total[1] += 1
        finally:
            connection.close()

    run_threads(reader, 8)
    return total[0], total[1]


def drain(
    variant: str, work: Path, root: Path, name: str, args: argparse.Namespace,
    shape: MessageShape, storage_limit: float,
) -> Drain:  # fmt: skip
    with services(work, name) as stack:
        values = stack.values()
        create_containers(stack.storage, values)
        queue = values["RequestsQueueName"]
        poisons = round(args.messages * args.poison_rate) if variant == "poison" else 0
        ids, poison_ids = prefill(
            root, values, work, f"{name}-fill", args.messages - poisons, args.callers, poisons,
            shape,
        )  # fmt: skip
        waiting = stack.queue_counts(queue)["active_message_count"]
        if waiting != len(ids) + len(poison_ids):
            print(f"  note: {waiting} messages queued for {len(ids) + len(poison_ids)} sent")
        everything = ids + poison_ids
        host = Host(root, values, work, f"{name}-drain")
        with stack.outcome_watcher(values) as watcher:
            try:
                host.start()
                started = time.perf_counter()
                meter = CpuMeter({"host": host.pid})
                meter.start()
                finished = watcher.wait_for(everything, timeout=120 + len(everything))
                ended = watcher.last_outcome_at(everything) if finished else time.perf_counter()
                times = sorted(t for t in map(watcher.observed, everything) if t is not None)
                cpu = meter.stop()["host"]
                attempts, unknown = attempts_of(host.port, host.key, ids)
                invocations = host.invocations(PROCESSOR)
            finally:
                host.stop()
            outcomes = watcher.outcomes(everything)
            poison_deliveries = sum(
                watcher.dead_letters[p].deliveries for p in poison_ids if p in watcher.dead_letters
            )
        ceiling = servicebus_ceiling(
            stack.servicebus, queue, shape, args.ceiling_messages, BatchSettings.of(root)
        )
    seconds = ended - started
    observed = sum(count for outcome, count in outcomes.items() if outcome != "missing")
    most = max(1, int(len(everything) * 0.95))
    return Drain(
        variant=variant,
        messages=len(everything),
        rate=observed / seconds,
        rate_95=most / (times[most - 1] - started) if len(times) >= most else 0.0,
        good_rate=good(outcomes) / seconds,
        outcomes=outcomes,
        deliveries=attempts + poison_deliveries,
        unknown_attempts=unknown,
        invocations=invocations,
        cpu_ms=cpu * 1000 / max(1, observed),
        servicebus=ceiling,
        limit=min(ceiling, storage_limit),
        finished=finished,
    )


def main() -> int:
    parser = argument_parser(__doc__)
    parser.add_argument("--messages", type=int, default=300, help="requests per run (300)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats of each variant (3)")
    parser.add_argument("--poison-rate", type=float, default=0.02, help="poison share (0.02)")
    parser.add_argument("--callers", type=int, default=16, help="HTTP clients of the prefill")
    parser.add_argument("--calibration", type=int, default=10, help="calibration requests (10)")
    parser.add_argument("--ceiling-messages", type=int, default=1000)
    args = parser.parse_args()
    with work_folder("inferbus-batch-") as work:
        root = app_snapshot(work / "app")
        batch = BatchSettings.of(root)
        concurrency = sample_settings().processing.model_concurrency
        threads = min(concurrency, batch.max_batch)
        print(
            f"batch_processing ({now_stamp()}, {machine()}): {args.messages} requests per run, "
            f"{args.repeats} repeats x (clean, poison {args.poison_rate:.0%}); host.json "
            f"{batch.label()}; ModelConcurrency {concurrency}"
        )
        calibration = calibrate(work, root, args.calibration)
        calibration.print()
        per_message = calibration.ops_per_request(("processing",))
        templates = calibration.templates()
        shape = calibration.shape or FALLBACK_SHAPE
        drains: dict[str, list[Drain]] = {"clean": [], "poison": []}
        storage: list[float] = []
        for repeat in range(args.repeats):
            replayed = storage_replay(
                work, f"replay-{repeat}", templates, args.messages, threads, timed=("processing",)
            )
            storage_limit = replayed.ops_per_second / per_message
            storage.append(storage_limit)
            for variant in drains:
                run = drain(variant, work, root, f"{variant}-{repeat}", args, shape, storage_limit)
                drains[variant].append(run)
                print(
                    f"  repeat {repeat + 1} {variant:<6}: {run.rate:6.1f} msg/s (limit "
                    f"{run.limit:.1f}); {outcome_text(run.outcomes)}; deliveries "
                    f"{run.deliveries} for {run.messages} messages; "
                    f"{run.invocations} invocations"
                    + ("" if run.finished else "; NOT ALL FINISHED")
                )
        report(drains, storage, per_message, threads)
        print(f"finished {now_stamp()}, {machine()}")
    return 0


def report(
    drains: dict[str, list[Drain]], storage: list[float], per_message: float, threads: int
) -> None:
    print(
        f"\nlocal limit: storage {spread(storage)} msg/s ({per_message:.1f} processing ops per "
        f"message, replayed at {threads} threads); Service Bus receive+complete per variant below"
    )
    for variant, runs in drains.items():
        totals: Counter[str] = Counter()
        for run in runs:
            totals.update(run.outcomes)
        messages = sum(run.messages for run in runs)
        deliveries = sum(run.deliveries for run in runs)
        unknown = sum(run.unknown_attempts for run in runs)
        invocations = sum(run.invocations for run in runs)
        print(f"{variant}:")
        print(f"  drain (all outcomes)/s:  {spread([r.rate for r in runs])} msg/s")
        print(f"  first 95% of outcomes/s: {spread([r.rate_95 for r in runs])} msg/s")
        print(f"  completed+refused/s:     {spread([r.good_rate for r in runs])} msg/s")
        print(
            f"  local limit:             {spread([r.limit for r in runs])} msg/s (Service Bus "
            f"receive+complete {spread([r.servicebus for r in runs], 0)} msg/s, storage above)"
        )
        print("  ratio drain / limit:     " + spread([ratio(r.rate, r.limit) for r in runs], 2))
        print(f"  outcomes (all repeats):  {outcome_text(totals)}")
        print(
            f"  deliveries (measured):   {deliveries} for {messages} messages: "
            f"{deliveries - messages} reprocessed"
            + (f" ({unknown} jobs did not show attempts)" if unknown else "")
        )
        print(
            f"  invocations:             {invocations} "
            f"(mean batch {ratio(messages, invocations):.1f} messages)"
        )
        print(f"  host+worker CPU:         {spread([r.cpu_ms for r in runs])} ms per message")


if __name__ == "__main__":
    sys.exit(main())
