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
* p50 at 1 caller vs the sum of its own calls timed alone: the same storage sequence
  replayed by one thread (p50 per intake) + one Service Bus send of a message shaped like
  the app's request messages (p50, sender already open); ratio = measured p50 / that
  floor, target <= 1.5x. The difference is what the host, the runtime and the app's own
  code add; the ping p50 shows how much of it the host alone costs.

Also CPU per intake (host and worker process, Azurite, emulator; from /proc) at 8 callers.

Run: ``.venv/bin/python bench/intake_http.py [--duration 3] [--repeats 5] [--callers 8]``.
How to read: ``median [min..max, n=repeats]``; limits are measured alone, the app's loops
share the machine's cores with Azurite, the emulator and this client. Figures only.
"""

from __future__ import annotations

import argparse
import http.client
import sys
from collections import Counter

from _harness import (
    FALLBACK_SHAPE,
    PROCESSOR,
    REPO,
    Host,
    Loop,
    app_snapshot,
    argument_parser,
    calibrate,
    closed_loop,
    create_containers,
    machine,
    now_stamp,
    post_request,
    quantile,
    ratio,
    send_latencies,
    services,
    spread,
    storage_replay,
    work_folder,
)

PING_APP = REPO / "tools" / "functions-host" / "bench" / "ping_app"
LATENCY_TARGET = 1.5


def ping(connection: http.client.HTTPConnection) -> int:
    connection.request("GET", "/api/ping")
    response = connection.getresponse()
    response.read()
    return response.status


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
        loops: dict[str, list[Loop]] = {}
        limit_rate: list[float] = []
        storage_p50: list[float] = []
        send_p50: list[float] = []
        cpu: dict[str, list[float]] = {}
        for repeat in range(args.repeats):
            with services(work, f"run-{repeat}") as stack:
                values = stack.values()
                create_containers(stack.storage, values)
                app = Host(root, values, work, f"app-{repeat}", disabled=(PROCESSOR,))
                pinger = Host(PING_APP, values, work, f"ping-{repeat}")
                try:
                    app.start()
                    pinger.start()
                    post = post_request(app.key)
                    closed_loop(app.port, post, 2, 1.0)  # warm-up
                    closed_loop(pinger.port, ping, 2, 1.0)
                    meter = stack.cpu_meter(app.pid)
                    for callers in (1, args.callers):
                        loops.setdefault(f"ping c={callers}", []).append(
                            closed_loop(pinger.port, ping, callers, args.duration)
                        )
                        if callers > 1:
                            meter.start()
                        loop = closed_loop(app.port, post, callers, args.duration)
                        loops.setdefault(f"POST c={callers}", []).append(loop)
                        if callers > 1:
                            for name, seconds in meter.stop().items():
                                cpu.setdefault(name, []).append(
                                    seconds * 1000 / max(1, len(loop.latencies))
                                )
                    sends = send_latencies(
                        stack.servicebus, values["RequestsQueueName"], shape, 100
                    )
                    send_p50.append(quantile(sends, 0.5) * 1000)
                finally:
                    pinger.stop()
                    app.stop()
            replayed = storage_replay(
                work, f"replay-{repeat}", templates, 400, args.callers, timed=("intake",)
            )
            limit_rate.append(replayed.templates_per_second)
            alone = storage_replay(work, f"alone-{repeat}", templates, 100, 1, timed=("intake",))
            storage_p50.append(quantile(alone.latencies, 0.5) * 1000)
            print(
                f"  repeat {repeat + 1}: POST c={args.callers} "
                f"{loops[f'POST c={args.callers}'][-1].rate:.1f} req/s (storage-bound limit "
                f"{limit_rate[-1]:.1f}); POST c=1 p50 "
                f"{quantile(loops['POST c=1'][-1].latencies, 0.5) * 1000:.1f} ms (floor "
                f"{storage_p50[-1] + send_p50[-1]:.1f} ms)"
            )
        report(args, loops, limit_rate, storage_p50, send_p50, cpu, per_intake)
        print(f"finished {now_stamp()}, {machine()}")
    return 0


def report(
    args: argparse.Namespace,
    loops: dict[str, list[Loop]],
    limit_rate: list[float],
    storage_p50: list[float],
    send_p50: list[float],
    cpu: dict[str, list[float]],
    per_intake: float,
) -> None:
    many = f"c={args.callers}"

    def rates(name: str) -> list[float]:
        return [loop.rate for loop in loops[name]]

    def p(name: str, q: float) -> list[float]:
        return [quantile(loop.latencies, q) * 1000 for loop in loops[name]]

    statuses: Counter[int] = Counter()
    for name in (f"POST {many}", "POST c=1"):
        for loop in loops[name]:
            statuses.update(loop.statuses)
    post_rates = rates(f"POST {many}")
    floors = [s + b for s, b in zip(storage_p50, send_p50, strict=True)]
    single = p("POST c=1", 0.5)
    print(f"\nintake throughput at {args.callers} callers:")
    print(f"  POST /api/v1/requests:  {spread(post_rates)} req/s")
    print(f"  its latency:            p50 {spread(p(f'POST {many}', 0.5))} ms, "
          f"p99 {spread(p(f'POST {many}', 0.99))} ms")  # fmt: skip
    print(
        f"  storage-bound limit:    {spread(limit_rate)} intakes/s (the intake's "
        f"{per_intake:.1f} storage ops replayed alone at {args.callers} threads)"
    )
    print(
        "  ratio measured / limit: "
        + spread([ratio(a, b) for a, b in zip(post_rates, limit_rate, strict=True)], 2)
    )
    print(f"  host alone (GET /api/ping): {spread(rates(f'ping {many}'))} req/s")
    print(
        "  CPU ms per intake: "
        + "; ".join(f"{name} {spread(values, 2)}" for name, values in cpu.items())
    )
    print("intake latency at 1 caller:")
    print(f"  POST p50:               {spread(single)} ms (p99 {spread(p('POST c=1', 0.99))} ms)")
    print(
        f"  floor = storage alone {spread(storage_p50, 2)} ms + Service Bus send alone "
        f"{spread(send_p50, 2)} ms = {spread(floors, 2)} ms"
    )
    print(
        "  ratio p50 / floor:      "
        + spread([ratio(a, b) for a, b in zip(single, floors, strict=True)], 2)
        + f"   (target <= {LATENCY_TARGET})"
    )
    print(f"  host alone (GET /api/ping) p50: {spread(p('ping c=1', 0.5), 2)} ms")
    print(f"  HTTP statuses of the POST loops: {dict(statuses)}")


if __name__ == "__main__":
    sys.exit(main())
