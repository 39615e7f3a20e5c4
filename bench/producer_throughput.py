"""The producer's send rate (``python -m shared.producer``): batched vs one message per send.

What it measures. ``Producer.send`` (the library under the CLI) sending JSONL lines of
~1.4 KB texts (the benchmarks' usual short document) to the request queue of a fresh
Service Bus emulator (infra/local entities), through the unmodified ``azure-servicebus``
SDK: parsing and validating each line, building its message, filling batches and sending
them. Two variants of the same code path, interleaved within each repeat (A, B; then B, A
on the next repeat) on the same emulator:

* A, batched: ``ServiceBusSender.create_message_batch()`` filled up to the size the
  broker advertises on the link (256 KB: about 120 of these messages per batch);
* B, one by one: the same producer with ``max_batch_messages=1`` (one message per send,
  as a sender without batching does).

Figures per variant: messages per second (wall clock of ``send``, links opened before),
batches, CPU per message of this process (parse, validate, encode) and of the emulator
(from /proc), so you can see which side bounds the rate; and the ratio A/B repeat by
repeat. Every message arrives (the queue's count is checked after each repeat); ids are
unique per run, so the broker's duplicate detection drops nothing.

Unlike the app's other benchmarks this imports the app's producer package: the producer
is a library that producers call, so that is its public surface.

Run: ``.venv/bin/python bench/producer_throughput.py [--messages 5000] [--repeats 5]``.
How to read: ``median [min..max, n=repeats]``. Figures only; nothing here asserts a speed.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from dataclasses import dataclass

from _harness import (
    EMULATOR_CONFIG,
    TEXT,
    CpuMeter,
    argument_parser,
    machine,
    now_stamp,
    ratio,
    spread,
    work_folder,
)

from servicebus_emulator.process import EmulatorProcess, ServiceBusEmulator
from shared.adapters.servicebus import servicebus_client
from shared.adapters.servicebus_producer import ServiceBusBatchSenders
from shared.producer import Producer, parse_lines
from shared.settings import Settings

VARIANTS = {"batched": None, "one by one": 1}  # name -> max_batch_messages


@dataclass(frozen=True)
class Run:
    rate: float
    batches: int
    client_cpu_us: float
    emulator_cpu_us: float


def request_lines(tag: str, count: int) -> list[str]:
    return [
        json.dumps(
            {
                "request_id": f"{tag}-{number}",
                "tenant_id": "bench",
                "model": "local-analyzer",
                "input": {"text": TEXT},
                "metadata": {"document_type": "invoice"},
            }
        )
        for number in range(count)
    ]


def timed_send(
    settings: Settings,
    senders: ServiceBusBatchSenders,
    lines: list[str],
    max_batch_messages: int | None,
    emulator_pid: int,
) -> Run:
    producer = Producer.from_settings(settings, senders, max_batch_messages=max_batch_messages)
    meter = CpuMeter({"emulator": emulator_pid})
    meter.start()
    began = time.perf_counter()
    report = producer.send(parse_lines(lines))
    seconds = time.perf_counter() - began
    cpu = meter.stop()
    if report.sent != len(lines):
        raise RuntimeError(f"sent {report.sent} of {len(lines)}: {report.summary_text()}")
    per_message = 1e6 / len(lines)
    return Run(
        len(lines) / seconds,
        report.batches,
        cpu["bench client"] * per_message,
        cpu["emulator"] * per_message,
    )


def one_repeat(
    emulator: ServiceBusEmulator, emulator_pid: int, repeat: int, count: int
) -> dict[str, Run]:
    settings = Settings.model_validate(
        {"ServiceBusConnection": emulator.connection_string, "AllowedModels": "local-analyzer"}
    )
    senders = ServiceBusBatchSenders(servicebus_client(settings))
    runs: dict[str, Run] = {}
    try:
        warm_up = Producer.from_settings(settings, senders).send(
            parse_lines(request_lines("warm-up", 10))
        )
        assert warm_up.sent == 10, warm_up.summary_text()
        order = list(VARIANTS) if repeat % 2 == 0 else list(reversed(VARIANTS))
        for name in order:
            lines = request_lines(f"{name.replace(' ', '-')}-{uuid.uuid4().hex[:8]}", count)
            runs[name] = timed_send(settings, senders, lines, VARIANTS[name], emulator_pid)
    finally:
        senders.close()
    queued = int(emulator.runtime_properties(settings.queues.requests)["active_message_count"])
    if queued != 10 + count * len(VARIANTS):
        print(f"  note: the queue holds {queued} messages, expected {10 + count * len(VARIANTS)}")
    return runs


def main() -> int:
    parser = argument_parser(__doc__)
    parser.add_argument("--messages", type=int, default=5000, help="messages per variant (5000)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved repeats (5)")
    args = parser.parse_args()
    print(
        f"producer_throughput ({now_stamp()}, {machine()}): {args.messages} messages of "
        f"{len(TEXT)} B texts per variant, {args.repeats} repeats, a fresh emulator each"
    )
    results: dict[str, list[Run]] = {name: [] for name in VARIANTS}
    with work_folder("inferbus-producer-") as work:
        for repeat in range(args.repeats):
            process = EmulatorProcess(EMULATOR_CONFIG, work / f"emulator-{repeat}.log")
            try:
                emulator = process.wait_ready()
                pid = process.child.process.pid
                runs = one_repeat(emulator, pid, repeat, args.messages)
            finally:
                process.stop()
            for name, run in runs.items():
                results[name].append(run)
            print(
                f"  repeat {repeat + 1}: "
                + "; ".join(
                    f"{name} {run.rate:,.0f} msg/s ({run.batches} batches)"
                    for name, run in runs.items()
                )
            )
    print("\nsend rate (messages per second, links open):")
    for name, variant in results.items():
        print(
            f"  {name:<11} {spread([r.rate for r in variant], 0)} msg/s, "
            f"{spread([float(r.batches) for r in variant], 0)} batches; CPU per message: "
            f"client {spread([r.client_cpu_us for r in variant], 0)} us, "
            f"emulator {spread([r.emulator_cpu_us for r in variant], 0)} us"
        )
    ratios = [
        ratio(a.rate, b.rate)
        for a, b in zip(results["batched"], results["one by one"], strict=True)
    ]
    print(f"  ratio batched / one by one: {spread(ratios, 1)}")
    print(f"finished {now_stamp()}, {machine()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
