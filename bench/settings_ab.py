"""A/B of the processing defaults: host.json serviceBus batch settings and ModelConcurrency.

What it measures. Each variant is a snapshot of the app whose host.json
``extensions.serviceBus`` is edited (``minMessageBatchSize``, ``maxBatchWaitTime``,
``maxMessageBatchSize``, ``prefetchCount``; the repository's host.json is never touched)
and app settings ``ModelConcurrency`` and ``LocalModelLatencyMs`` (default 200 ms: the
local model sleeps that long per message, standing in for real inference). Variants run
interleaved (A, B, C, ..., A, B, C, ...), each run on a fresh in-memory Azurite and
emulator and a fresh host:

* lone latency first, on the idle stack: ``--lone`` requests one at a time, submit -> its
  result message on a benchmark subscription of the results topic (median per run);
* then throughput: ``--requests`` submissions from ``--callers`` HTTP clients, completed or
  refused outcomes / (last outcome - first submit), outcomes seen on the results topic and
  the request queue's dead-letter queue (nothing polls the app).

Each variant also prints the limit it is held to, min(model-bound, CPU-bound), and the
ratio to it. Model-bound: the host hands the function one batch at a time and waits for
it, and the app runs a batch's messages ``ModelConcurrency`` at a time, so at most
``B / (ceil(B / K) x latency)`` msg/s pass (B = maxMessageBatchSize, K = ModelConcurrency).
CPU-bound: cores / CPU seconds per request of the host and its worker, Azurite and the
emulator in the same run (what the machine could do if CPU were the only constraint; on 2
cores it binds as soon as the model allows more than ~40 req/s; the storage and Service
Bus limits of bench/end_to_end.py sit above it). The lone latency is compared with the
model latency (its floor) and with the 400 ms target.

Run: ``.venv/bin/python bench/settings_ab.py [--repeats 3] [--requests 120] [--lone 6]
[--latency-ms 200] [--variant "min=1,max=32,prefetch=64,conc=16,wait=2" ...]``; keys of a
variant: min, max, wait (seconds), prefetch, conc; unset keys keep the repository's
host.json and the sample settings. How to read: ``median [min..max, n=repeats]`` per
variant; pick the variant with the best throughput whose lone latency meets the target.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _harness import (
    REPO,
    BatchSettings,
    app_snapshot,
    argument_parser,
    connect,
    create_containers,
    load_to_outcomes,
    machine,
    median,
    now_stamp,
    outcome_text,
    quantile,
    ratio,
    running_host,
    sample_settings,
    services,
    spread,
    submit,
    work_folder,
)

LONE_TARGET_MS = 400.0
DEFAULT_VARIANTS = (
    "",  # the repository's host.json and sample settings
    "min=1",
    "min=1,conc=16",
    "min=1,max=32,conc=16",
    "min=1,max=32,prefetch=64,conc=16",
    "min=4,wait=0.1,max=32,prefetch=64,conc=16",
)


@dataclass
class Variant:
    spec: str
    service_bus: dict[str, Any]
    concurrency: int
    root: Path = Path()
    rates: list[float] = field(default_factory=list)
    lone_ms: list[float] = field(default_factory=list)
    lone_all: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    stack_cpu_ms: list[float] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)

    @property
    def label(self) -> str:
        batch = BatchSettings.of(self.root)
        return (
            f"min {batch.min_batch} wait {batch.max_wait_s:g}s max {batch.max_batch} "
            f"prefetch {batch.prefetch} conc {self.concurrency}"
        )

    def model_bound(self, latency_ms: float) -> float:
        batch = BatchSettings.of(self.root).max_batch
        if latency_ms <= 0:
            return float("inf")
        return batch / (math.ceil(batch / self.concurrency) * latency_ms / 1000)


def parse_variant(spec: str, default_concurrency: int) -> Variant:
    keys = {"min": "minMessageBatchSize", "max": "maxMessageBatchSize", "prefetch": "prefetchCount"}
    service_bus: dict[str, Any] = {}
    concurrency = default_concurrency
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, value = item.partition("=")
        if name == "conc":
            concurrency = int(value)
        elif name == "wait":
            seconds = float(value)
            service_bus["maxBatchWaitTime"] = (
                f"{int(seconds // 3600):02d}:{int(seconds % 3600 // 60):02d}:{seconds % 60:06.3f}"
            )
        elif name in keys:
            service_bus[keys[name]] = int(value)
        else:
            raise SystemExit(f"unknown variant key {name!r} in {spec!r}")
    return Variant(spec or "repository", service_bus, concurrency)


def run_variant(
    variant: Variant, work: Path, name: str, args: argparse.Namespace
) -> tuple[float, list[float], dict[str, float], Counter[str]]:
    with services(work, name) as stack:
        values = stack.values(
            ModelConcurrency=str(variant.concurrency), LocalModelLatencyMs=str(args.latency_ms)
        )
        create_containers(stack.storage, values)
        with (
            stack.outcome_watcher(values) as watcher,
            running_host(variant.root, values, work, f"{name}-host") as host,
        ):
            connection = connect(host.port)
            lone: list[float] = []
            for index in range(args.lone + 1):  # one warm-up request first
                began = time.perf_counter()
                _, request_id = submit(connection, host.key)
                if request_id is None or not watcher.wait_for([request_id], 60):
                    raise RuntimeError(f"{variant.spec}: a lone request did not finish")
                if index:
                    lone.append(((watcher.observed(request_id) or began) - began) * 1000)
            connection.close()
            run = load_to_outcomes(
                stack, host, watcher, args.requests, args.callers, timeout=120 + args.requests
            )
    per_request = {
        process: seconds * 1000 / max(1, len(run.ids)) for process, seconds in run.cpu.items()
    }
    return run.good_rate, lone, per_request, run.outcomes


def main() -> int:
    parser = argument_parser(__doc__)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats (3)")
    parser.add_argument("--requests", type=int, default=120, help="requests per run (120)")
    parser.add_argument("--callers", type=int, default=16, help="HTTP clients (16)")
    parser.add_argument("--lone", type=int, default=6, help="lone requests per run (6)")
    parser.add_argument("--latency-ms", type=int, default=200, help="LocalModelLatencyMs (200)")
    parser.add_argument(
        "--variant",
        action="append",
        help="a variant, e.g. 'min=1,max=32,prefetch=64,conc=16' (repeatable; default: a set "
        "around the repository's values)",
    )
    args = parser.parse_args()
    default_concurrency = sample_settings().processing.model_concurrency
    specs = args.variant or list(DEFAULT_VARIANTS)
    variants = [parse_variant(spec, default_concurrency) for spec in specs]
    with work_folder("inferbus-ab-") as work:
        for index, variant in enumerate(variants):
            variant.root = app_snapshot(work / f"app-{index}", variant.service_bus)
        repo_batch = BatchSettings.of(REPO)
        print(
            f"settings_ab ({now_stamp()}, {machine()}): {len(variants)} variants x "
            f"{args.repeats} repeats, interleaved; {args.requests} requests at {args.callers} "
            f"callers and {args.lone} lone requests per run; LocalModelLatencyMs "
            f"{args.latency_ms}; repository: {repo_batch.label()}, ModelConcurrency "
            f"{default_concurrency}"
        )
        for repeat in range(args.repeats):
            for index, variant in enumerate(variants):
                rate, lone, cpu_ms, outcomes = run_variant(
                    variant, work, f"v{index}-r{repeat}", args
                )
                variant.rates.append(rate)
                variant.lone_ms.append(quantile(lone, 0.5))
                variant.lone_all += lone
                variant.cpu_ms.append(cpu_ms["host+worker"])
                variant.stack_cpu_ms.append(
                    sum(ms for name, ms in cpu_ms.items() if name != "bench client")
                )
                variant.outcomes.update(outcomes)
                print(
                    f"  repeat {repeat + 1} [{variant.label}]: {rate:6.1f} req/s, lone p50 "
                    f"{quantile(lone, 0.5):6.0f} ms; {outcome_text(outcomes)}"
                )
        cores = os.cpu_count() or 1
        print(f"\nper variant (LocalModelLatencyMs {args.latency_ms}):")
        for variant in variants:
            bound = variant.model_bound(args.latency_ms)
            cpu_bound = [cores * 1000 / ms for ms in variant.stack_cpu_ms]
            limits = [min(bound, c) for c in cpu_bound]
            ratios = [ratio(rate, limit) for rate, limit in zip(variant.rates, limits, strict=True)]
            print(f"  {variant.label}  ({variant.spec})")
            print(
                f"    throughput {spread(variant.rates)} req/s; limit {spread(limits)} = "
                f"min(model-bound {bound:.1f}, CPU-bound {spread(cpu_bound)}): "
                f"ratio {spread(ratios, 2)}"
            )
            print(
                f"    lone latency p50 {spread(variant.lone_ms, 0)} ms, p90 of all "
                f"{quantile(variant.lone_all, 0.9):.0f} ms; floor {args.latency_ms} ms, "
                f"target {LONE_TARGET_MS:.0f} ms: p50/target "
                f"{ratio(median(variant.lone_ms), LONE_TARGET_MS):.2f}"
            )
            print(
                f"    CPU per request: host+worker {spread(variant.cpu_ms)} ms, with Azurite and "
                f"the emulator {spread(variant.stack_cpu_ms)} ms; outcomes "
                f"{outcome_text(variant.outcomes)}"
            )
        print(f"finished {now_stamp()}, {machine()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
