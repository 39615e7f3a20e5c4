"""Intake over HTTP (``POST /api/v1/requests`` -> 202) against its own storage and broker costs.

What it measures. The intake alone: the local host serves a snapshot of the app with the
request processor disabled (``AzureWebJobs.process_requests.Disabled=true``), so nothing
else competes for the CPU or storage, on a fresh in-memory Azurite and emulator per repeat.
Closed loops (each client sends its next request when the previous one is answered) of
``POST /api/v1/requests`` (a ~1.4 KB text) at 1 and at 8 callers, interleaved with the
same loops of ``GET /api/ping`` against the host benchmark's ping app (one anonymous
function, no I/O: what the host and the runtime cost per HTTP call).

What it compares against, measured in the same run:

* throughput at 8 callers vs the intake's storage-bound limit: the intake's own storage
  operations (counted at the storage boundary by a calibration through a counting proxy,
  see ``_harness.calibrate``: blob PUTs with and without ``If-None-Match: *``...) replayed
  with ``azure-storage-blob`` at 8 threads against a fresh Azurite, in intakes per second
  (= ops/s / ops per intake); ratio = measured / limit;
* p50 at 1 caller vs the sum of its own calls timed alone: the intake's calls made by one
  thread with the SDKs and nothing else, in its order (its storage operations, the
  request message sent before the last one), against the same Azurite and emulator the
  app is using, in slices interleaved with slices of the 1-caller loop, so both see the
  same number of blobs (Azurite's cost per operation grows with it) and the same pauses
  between calls (a call after a pause costs more here than one right after another);
  ratio = measured p50 / that floor's p50, target <= 1.5x. The difference is what the
  host, the runtime and the app's own code add; the ping p50 shows how much of it the
  host alone costs. Also printed, for comparison with earlier runs: the calls timed
  apart (the storage sequence on a fresh Azurite + a send right after another send).

Also CPU per intake (host and worker process, Azurite, emulator, this client; from /proc)
at 8 callers, and what it allows: on a small machine every process shares the same cores,
so CPU can bind before storage does. Two caps, in intakes/s = cores x 1000 / CPU ms:

* the app's: its measured CPU per intake, all processes;
* the floor's: the same calls with no app code in them, each measured in this run: the
  storage replay at 8 threads (Azurite and the SDK client), the Service Bus sends (the
  emulator and the SDK client) and the host's round trip of an empty function (host,
  worker and HTTP client, from the ping loop at 8 callers). It is the most any intake
  built on these SDKs, served by a host and its Python worker, can reach on this machine;
  printed as a ratio of the storage-bound limit, next to the 0.8 the target asks.

Run: ``.venv/bin/python bench/intake_http.py [--duration 3] [--repeats 5] [--callers 8]``.
How to read: ``median [min..max, n=repeats]``; limits are measured alone, the app's loops
share the machine's cores with Azurite, the emulator and this client. Figures only.
"""

from __future__ import annotations

import argparse
import functools
import http.client
import os
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from _harness import (
    FALLBACK_SHAPE,
    PING_APP,
    PROCESSOR,
    CpuMeter,
    CpuParts,
    Host,
    Loop,
    Services,
    TemplateOp,
    app_snapshot,
    argument_parser,
    calibrate,
    closed_loop,
    create_containers,
    intake_sequence_latencies,
    machine,
    now_stamp,
    per_call_ms,
    ping,
    post_request,
    quantile,
    ratio,
    send_latencies,
    services,
    spread,
    storage_replay,
    work_folder,
)

LATENCY_TARGET = 1.5
THROUGHPUT_TARGET = 0.8
SLICES = 3  # slices of the 1-caller loop, each after a slice of its floor's calls
SEQUENCE_INTAKES = 90  # intakes of the floor's calls per repeat


@dataclass
class Figures:
    """Per repeat: the loops, the limits and floors measured beside them, CPU per intake."""

    loops: dict[str, list[Loop]] = field(default_factory=dict)
    limit_rate: list[float] = field(default_factory=list)
    sequence_p50: list[float] = field(default_factory=list)  # the floor, ms
    storage_p50: list[float] = field(default_factory=list)  # the calls apart, ms
    send_p50: list[float] = field(default_factory=list)
    cpu: CpuParts = field(default_factory=CpuParts)  # the app's processes
    floor_cpu: CpuParts = field(default_factory=CpuParts)  # its calls alone

    def add_loop(self, name: str, loop: Loop) -> None:
        self.loops.setdefault(name, []).append(loop)


def main() -> int:
    parser = argument_parser(__doc__)
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per loop (3)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved repeats (5)")
    parser.add_argument("--callers", type=int, default=8, help="callers of the throughput loop")
    parser.add_argument("--calibration", type=int, default=20, help="calibration requests (20)")
    args = parser.parse_args()
    with work_folder("inferbus-intake-") as work:
        root = app_snapshot(work / "app")
        print(
            f"intake_http ({now_stamp()}, {machine()}): loops of {args.duration:g}s at 1 and "
            f"{args.callers} callers, {args.repeats} repeats; processor disabled (intake alone)"
        )
        calibration = calibrate(work, root, args.calibration, processing=False)
        calibration.print()
        per_intake = calibration.ops_per_request(("intake",))
        templates = calibration.templates()
        shape = calibration.shape or FALLBACK_SHAPE
        figures = Figures()
        for repeat in range(args.repeats):
            with services(work, f"run-{repeat}") as stack:
                values = stack.values()
                create_containers(stack.storage, values)
                app = Host(root, values, work, f"app-{repeat}", disabled=(PROCESSOR,))
                pinger = Host(PING_APP, values, work, f"ping-{repeat}")
                try:
                    app.start()
                    pinger.start()
                    sequence = functools.partial(
                        intake_sequence_latencies,
                        stack.storage,
                        stack.servicebus,
                        values["RequestsQueueName"],
                        templates,
                        shape,
                    )
                    measure_loops(args, figures, stack, app, pinger, sequence)
                    send_meter = CpuMeter({"emulator": stack.emulator_pid})
                    sends = send_latencies(
                        stack.servicebus, values["RequestsQueueName"], shape, 100, send_meter
                    )
                    figures.floor_cpu.add(
                        "Service Bus send",
                        per_call_ms(send_meter.used, ("emulator", "bench client"), len(sends)),
                    )
                    figures.send_p50.append(quantile(sends, 0.5) * 1000)
                finally:
                    pinger.stop()
                    app.stop()
            measure_storage_alone(args, figures, work, repeat, templates)
            print(
                f"  repeat {repeat + 1}: POST c={args.callers} "
                f"{figures.loops[f'POST c={args.callers}'][-1].rate:.1f} req/s (storage-bound "
                f"limit {figures.limit_rate[-1]:.1f}); POST c=1 p50 "
                f"{quantile(figures.loops['POST c=1'][-1].latencies, 0.5) * 1000:.1f} ms "
                f"(floor {figures.sequence_p50[-1]:.1f} ms)"
            )
        report(args, figures, per_intake)
        report_cpu_caps(args, figures)
        print(f"finished {now_stamp()}, {machine()}")
    return 0


def measure_loops(
    args: argparse.Namespace,
    figures: Figures,
    stack: Services,
    app: Host,
    pinger: Host,
    sequence: Callable[[int], list[float]],
) -> None:
    """The ping and POST loops at 1 and at ``--callers`` callers; the 1-caller POST loop in
    slices interleaved with its floor's calls; CPU of the app and of the ping at 8."""
    post = post_request(app.key)
    closed_loop(app.port, post, 2, 1.0)  # warm-up
    closed_loop(pinger.port, ping, 2, 1.0)
    sequence(10)
    figures.add_loop("ping c=1", closed_loop(pinger.port, ping, 1, args.duration))
    lone, floor = sliced_loop(app.port, post, args.duration, sequence)
    figures.add_loop("POST c=1", lone)
    figures.sequence_p50.append(quantile(floor, 0.5) * 1000)
    ping_meter = stack.cpu_meter(pinger.pid)
    ping_meter.start()
    ping_loop = closed_loop(pinger.port, ping, args.callers, args.duration)
    used = ping_meter.stop()
    figures.add_loop(f"ping c={args.callers}", ping_loop)
    figures.floor_cpu.add(
        "host round trip",
        per_call_ms(used, ("host+worker", "bench client"), len(ping_loop.latencies)),
    )
    meter = stack.cpu_meter(app.pid)
    meter.start()
    loop = closed_loop(app.port, post, args.callers, args.duration)
    used = meter.stop()
    for name in used:
        figures.cpu.add(name, per_call_ms(used, (name,), len(loop.latencies)))
    figures.add_loop(f"POST c={args.callers}", loop)


def sliced_loop(
    port: int,
    post: Callable[[http.client.HTTPConnection], int],
    seconds: float,
    sequence: Callable[[int], list[float]],
) -> tuple[Loop, list[float]]:
    """A 1-caller loop of ``seconds`` in ``SLICES`` slices, each after a slice of the
    floor's calls: (the loop, the floor's latencies)."""
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    spent = 0.0
    floor: list[float] = []
    for _ in range(SLICES):
        floor += sequence(SEQUENCE_INTAKES // SLICES)
        part = closed_loop(port, post, 1, seconds / SLICES)
        latencies += part.latencies
        statuses.update(part.statuses)
        spent += part.seconds
    return Loop(latencies, statuses, spent), floor


def measure_storage_alone(
    args: argparse.Namespace,
    figures: Figures,
    work: Path,
    repeat: int,
    templates: list[list[TemplateOp]],
) -> None:
    """The storage-bound limit (the intake's operations at ``--callers`` threads on a
    fresh Azurite) with its CPU, and the operations timed apart at one thread."""
    replayed = storage_replay(
        work, f"replay-{repeat}", templates, 400, args.callers, timed=("intake",)
    )
    figures.limit_rate.append(replayed.templates_per_second)
    figures.floor_cpu.add("storage calls", replayed.cpu_per_template(("azurite", "bench client")))
    alone = storage_replay(work, f"alone-{repeat}", templates, 100, 1, timed=("intake",))
    figures.storage_p50.append(quantile(alone.latencies, 0.5) * 1000)


def report(args: argparse.Namespace, figures: Figures, per_intake: float) -> None:
    many = f"c={args.callers}"
    loops = figures.loops

    def rates(name: str) -> list[float]:
        return [loop.rate for loop in loops[name]]

    def p(name: str, q: float) -> list[float]:
        return [quantile(loop.latencies, q) * 1000 for loop in loops[name]]

    statuses: Counter[int] = Counter()
    for name in (f"POST {many}", "POST c=1"):
        for loop in loops[name]:
            statuses.update(loop.statuses)
    post_rates = rates(f"POST {many}")
    apart = [s + b for s, b in zip(figures.storage_p50, figures.send_p50, strict=True)]
    single = p("POST c=1", 0.5)
    print(f"\nintake throughput at {args.callers} callers:")
    print(f"  POST /api/v1/requests:  {spread(post_rates)} req/s")
    print(f"  its latency:            p50 {spread(p(f'POST {many}', 0.5))} ms, "
          f"p99 {spread(p(f'POST {many}', 0.99))} ms")  # fmt: skip
    print(
        f"  storage-bound limit:    {spread(figures.limit_rate)} intakes/s (the intake's "
        f"{per_intake:.1f} storage ops replayed alone at {args.callers} threads)"
    )
    print(
        "  ratio measured / limit: "
        + spread([ratio(a, b) for a, b in zip(post_rates, figures.limit_rate, strict=True)], 2)
        + f"   (target >= {THROUGHPUT_TARGET})"
    )
    print(f"  host alone (GET /api/ping): {spread(rates(f'ping {many}'))} req/s")
    print("  CPU ms per intake: " + figures.cpu.text())
    print("intake latency at 1 caller:")
    print(f"  POST p50:               {spread(single)} ms (p99 {spread(p('POST c=1', 0.99))} ms)")
    print(
        f"  floor = its calls alone, in its order, same Azurite and emulator, interleaved: "
        f"p50 {spread(figures.sequence_p50, 2)} ms"
    )
    print(
        "  ratio p50 / floor:      "
        + spread([ratio(a, b) for a, b in zip(single, figures.sequence_p50, strict=True)], 2)
        + f"   (target <= {LATENCY_TARGET})"
    )
    print(
        f"  the calls timed apart:  storage on a fresh Azurite {spread(figures.storage_p50, 2)} "
        f"ms + a send after a send {spread(figures.send_p50, 2)} ms = {spread(apart, 2)} ms; "
        "ratio " + spread([ratio(a, b) for a, b in zip(single, apart, strict=True)], 2)
    )
    print(f"  host alone (GET /api/ping) p50: {spread(p('ping c=1', 0.5), 2)} ms")
    print(f"  HTTP statuses of the POST loops: {dict(statuses)}")


def report_cpu_caps(args: argparse.Namespace, figures: Figures) -> None:
    """What CPU allows on this machine: the app's cap and the floor's (module docstring)."""
    cores = os.cpu_count() or 1
    app_ms = figures.cpu.totals()
    floor_ms = figures.floor_cpu.totals()
    app_cap = [cores * 1000 / ms for ms in app_ms]
    floor_cap = [cores * 1000 / ms for ms in floor_ms]
    rates = [loop.rate for loop in figures.loops[f"POST c={args.callers}"]]
    print(f"what CPU allows on {cores} cores (all processes share them):")
    print(
        f"  the app: {spread(app_ms, 2)} ms per intake -> at most {spread(app_cap)} "
        "intakes/s; measured / that: "
        + spread([ratio(r, c) for r, c in zip(rates, app_cap, strict=True)], 2)
    )
    print(f"  the floor (the same calls, no app code): {figures.floor_cpu.text()} ms")
    limits = figures.limit_rate
    print(
        f"    = {spread(floor_ms, 2)} ms per intake -> at most {spread(floor_cap)} intakes/s "
        "= "
        + spread([ratio(c, limit) for c, limit in zip(floor_cap, limits, strict=True)], 2)
        + f" x the storage-bound limit (the target asks {THROUGHPUT_TARGET})"
    )


if __name__ == "__main__":
    sys.exit(main())
