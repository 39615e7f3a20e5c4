"""Per-request overhead of telemetry on the intake (``POST /api/v1/requests`` -> 202), on vs off.

What it measures. The intake path of bench/intake_http.py (the local host serving a
snapshot of the app with the request processor disabled, the real Functions Python worker,
a fresh in-memory Azurite and emulator) in variants that differ only in telemetry
settings, interleaved in one run: every repeat runs each variant once, the order rotating
from repeat to repeat, and each variant on a stack of its own (Azurite, emulator, host and
recorder started fresh: Azurite's cost per operation grows with what it holds, so no
variant inherits another's blobs). Per variant and repeat: a warm-up at ``--callers``,
then a closed loop at 1 caller and one at ``--callers``: throughput (req/s), latency p50
and p95, and CPU milliseconds per request of the host and its worker (from /proc; the
worker's share alone too), Azurite, the emulator and the recorder.

The variants (app settings in the host's local settings; ``--variants`` picks):

* ``off``: ``PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY=false``, with
  ``APPLICATIONINSIGHTS_CONNECTION_STRING`` still naming the recorder, so the switch alone
  decides, and the recorder must receive nothing (the control);
* ``on``: telemetry on and exported to the recorder as ``python -m devtools.stack
  --telemetry`` does (``devtools.stack.local_telemetry_settings``), less its ``OTEL_*``
  tuning: the distro's defaults, i.e. the rate-limited sampler at 5 traces/s, spans and
  logs exported every 5 s, metrics every 60 s, live metrics on (they ping the recorder,
  which says nobody watches). Statsbeat, SDK stats and remote configuration stay off as
  ``--telemetry`` has them: they would call Microsoft's endpoints, a few times an hour,
  not per request. This is what Azure runs, and what the target is about;
* ``every``: exactly ``--telemetry``'s settings, which keep every trace
  (``microsoft.fixed_percentage`` 1.0) and export spans and logs every 0.5 s, metrics
  every 5 s: the cost of a request whose trace is kept, of which, at the intake's rates
  here (tens to a hundred and more per second), the default sampler keeps at most 5 a
  second (the printed sample rate and traces per POST say how many it kept).

The recorder (``devtools.appinsights.IngestionRecorder``, the local ingestion endpoint)
runs in a child process of its own, so that parsing envelopes competes with neither the
load generator's threads nor, in the figures, the host; it counts what it received (by
envelope type, span name, metric and logger), divided by the POSTs the host answered
(warm-up and loops). Items exported in the host's shutdown flush are counted too.

What it compares against: the ``off`` variant of the same repeat. Each ratio on/off is the
median of the per-repeat ratios (pairs run minutes apart at most); the target is an
overhead under 10% on throughput at ``--callers`` (ratio >= 0.90) and on p50 at 1 caller
and at ``--callers`` (ratio <= 1.10). Also the CPU-bound limit of each variant: cores /
CPU seconds per request of every process of the stack and this client.

Run: ``.venv/bin/python bench/telemetry_overhead.py [--duration 3] [--repeats 5]
[--callers 8] [--warmup 2] [--variants off,on,every] [--keep DIR]``; the opt-in variants
``on-nologs`` (``OTEL_LOGS_EXPORTER=none``) and the others of ``DIAGNOSTIC`` are ``on``
less one part, to tell where its overhead goes, and ``on-sdkspans`` is ``on`` plus the
Azure SDKs' own spans, which the sample's settings leave off;
``--keep`` keeps every process's log. How to read: ``median [min..max,
n=repeats]``; the variants share the machine's cores with Azurite, the emulator, the
recorder and this client; variables in this process's environment win over the host's
local settings (a line says so when some would). Figures only, no assertion.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _harness import (
    PROCESSOR,
    REPO,
    Host,
    Loop,
    app_snapshot,
    argument_parser,
    closed_loop,
    create_containers,
    descendants,
    machine,
    median,
    now_stamp,
    post_request,
    quantile,
    ratio,
    services,
    spread,
    work_folder,
)

from devtools.appinsights import IngestionRecorder, is_bookkeeping, parse_envelope
from devtools.stack import TELEMETRY_SWITCH, local_telemetry_settings
from local_processes import Child

TARGET = 0.10  # overhead under 10% on throughput and p50
VARIANTS = ("off", "on", "every")
# Opt-in variants that tell where the overhead of ``on`` goes: ``on`` less one part of it.
DIAGNOSTIC = {
    "on-nologs": {"OTEL_LOGS_EXPORTER": "none"},  # no log records exported
    # the Azure SDKs' own spans on (two per storage call, plus the Service Bus send's):
    # what the sample's OTEL_PYTHON_DISABLED_INSTRUMENTATIONS leaves off, and why
    "on-sdkspans": {"OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "requests,urllib,urllib3"},
    "on-nospans": {"OTEL_TRACES_SAMPLER": "always_off"},  # spans made, none recorded
    "on-nometrics": {"OTEL_METRICS_EXPORTER": "none"},  # no metric reader
    "on-traces-only": {"OTEL_LOGS_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"},
}
RECORDER_READY = re.compile(r"recorder: (\S+)")
ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
COUNTS_LINE = re.compile(r"^counts: (\{.*\})$", re.MULTILINE)
# Settings that decide what the worker's telemetry does; set in this process's environment
# they would win over the host's local settings (the host applies Values under them).
TELEMETRY_PREFIXES = ("OTEL_", "APPLICATIONINSIGHTS_", "PYTHON_APPLICATIONINSIGHTS_")
# The distro's defaults the ``on`` variant keeps (azure-monitor-opentelemetry 1.8 and the
# OpenTelemetry SDK), printed beside the settings: what leaving OTEL_* unset means.
DISTRO_DEFAULTS = (
    "sampler microsoft.rate_limited at 5 traces/s (the distro's default), span and log "
    "batches every 5 s (OTEL_BSP/BLRP_SCHEDULE_DELAY 5000), metrics every 60 s "
    "(OTEL_METRIC_EXPORT_INTERVAL 60000), live metrics and performance counters on"
)


def variant_settings(variant: str, connection_string: str) -> dict[str, str]:
    """The telemetry app settings of ``variant`` with the recorder at ``connection_string``."""
    flagged = local_telemetry_settings(connection_string)  # what --telemetry sets
    if variant == "every":
        return flagged
    defaults = {k: v for k, v in flagged.items() if not k.startswith("OTEL_")}
    if variant == "off":
        return defaults | {TELEMETRY_SWITCH: "false"}
    return defaults | DIAGNOSTIC.get(variant, {})


def describe(variant: str) -> str:
    shown = variant_settings(variant, "<recorder>")
    text = ", ".join(f"{k}={v}" for k, v in shown.items())
    if variant == "every":
        return f"{text} (= devtools.stack --telemetry)"
    if variant == "off":
        return f"{text} (the recorder must receive nothing)"
    return f"{text}; other OTEL_* unset: {DISTRO_DEFAULTS}"


# --- the recorder, in a child process ------------------------------------------------------


def recorder_child() -> int:
    """``--recorder-child``: run an ingestion endpoint, print its connection string, and on
    SIGTERM or SIGINT print what it received (one ``counts: {json}`` line) and exit."""
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    recorder = IngestionRecorder().start()
    print(f"recorder: {recorder.connection_string}", flush=True)
    while not stop.wait(0.2):
        pass
    recorder.stop()
    print(f"counts: {json.dumps(summarize(recorder))}", flush=True)
    return 0


def summarize(recorder: IngestionRecorder) -> dict[str, Any]:
    """What the recorder received: envelopes by type, spans by kind and name, metric points
    (the app's and Azure Monitor's own), log records by logger, bytes, sample rates."""
    envelopes = recorder.envelopes()
    types: Counter[str] = Counter()
    span_names: Counter[str] = Counter()
    raw_names: set[str] = set()
    span_kinds: Counter[str] = Counter()
    metric_names: Counter[str] = Counter()
    loggers: Counter[str] = Counter()
    templates: dict[str, Counter[str]] = {}
    operations: set[str] = set()
    items: Counter[str] = Counter()
    sample_rates: list[float] = []
    size = 0
    for envelope in envelopes:
        data = envelope.get("data") or {}
        base_type = str(data.get("baseType") or "?")
        types[base_type] += 1
        size += len(json.dumps(envelope, separators=(",", ":")))
        if base_type in ("RequestData", "RemoteDependencyData"):
            sample_rates.append(float(envelope.get("sampleRate", 100.0)))
        for item in parse_envelope(envelope):
            own = "bookkeeping" if is_bookkeeping(item) else "app"
            kind = type(item).__name__
            items[f"{kind} {own}"] += 1
            if kind == "Span":
                span_kinds[str(getattr(item, "kind", "?"))] += 1
                raw_names.add(str(getattr(item, "name", "?")))
                operations.add(str(getattr(item, "operation_id", "")))
                span_names[ID.sub("{id}", str(getattr(item, "name", "?")))] += 1
            elif kind == "MetricPoint":
                metric_names[str(getattr(item, "name", "?"))] += 1
            elif kind == "LogRecord":
                dimensions = getattr(item, "dimensions", {})
                logger = str(dimensions.get("logger_name", "?"))
                loggers[logger] += 1
                message = ID.sub("{id}", str(getattr(item, "message", "")))[:90]
                templates.setdefault(logger, Counter())[message] += 1
    return {
        "batches": recorder.batches,
        "live_metrics_calls": recorder.live_metrics_pings,
        "envelopes": len(envelopes),
        "bytes": size,
        "types": dict(types),
        "items": dict(items),
        "span_kinds": dict(span_kinds),
        "span_names": dict(span_names),
        "distinct_span_names": len(raw_names),
        "metric_names": dict(metric_names),
        "loggers": dict(loggers),
        "log_examples": {k: c.most_common(1)[0][0] for k, c in templates.items()},
        "traces": len(operations),
        "sample_rate": median(sample_rates) if sample_rates else None,
    }


class Recorder:
    """The recorder child: its connection string, process id and, once stopped, counts."""

    def __init__(self, work: Path, name: str) -> None:
        command = [sys.executable, str(Path(__file__).resolve()), "--recorder-child"]
        self.child = Child(f"recorder-{name}", command, work / f"{name}-recorder.log", cwd=REPO)
        self.connection_string = self.child.wait_for(RECORDER_READY, 60).group(1)

    @property
    def pid(self) -> int:
        return self.child.process.pid

    def stop(self) -> dict[str, Any]:
        """Stop the child; what it received ({} when it printed no counts)."""
        self.child.stop(signal.SIGTERM, timeout=30)
        found = COUNTS_LINE.search(self.child.output())
        counts: dict[str, Any] = json.loads(found.group(1)) if found else {}
        return counts


# --- one run of one variant ----------------------------------------------------------------


@dataclass
class Run:
    """One variant on its own stack: its loops, CPU ms per request, POSTs, recorder counts."""

    variant: str
    loops: dict[int, Loop] = field(default_factory=dict)  # callers -> loop
    cpu: dict[int, dict[str, float]] = field(default_factory=dict)  # callers -> name -> ms
    posts: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    counts: dict[str, Any] = field(default_factory=dict)


def run_variant(work: Path, root: Path, variant: str, repeat: int, args: argparse.Namespace) -> Run:
    name = f"{variant}-{repeat}"
    run = Run(variant)
    with services(work, name) as stack:
        recorder = Recorder(work, name)
        try:
            values = stack.values(**variant_settings(variant, recorder.connection_string))
            create_containers(stack.storage, values)
            app = Host(root, values, work, f"app-{name}", disabled=(PROCESSOR,))
            try:
                app.start()
                post = post_request(app.key)
                warm = closed_loop(app.port, post, args.callers, args.warmup)
                run.statuses.update(warm.statuses)
                workers = descendants(app.pid)
                others = {"recorder": recorder.pid}
                if len(workers) == 1:
                    others["worker"] = workers[0]
                meter = stack.cpu_meter(app.pid, **others)
                for callers in (1, args.callers):
                    meter.start()
                    loop = closed_loop(app.port, post, callers, args.duration)
                    used = meter.stop()
                    answered = max(1, len(loop.latencies))
                    run.loops[callers] = loop
                    run.cpu[callers] = {k: s * 1000 / answered for k, s in used.items()}
                    run.statuses.update(loop.statuses)
            finally:
                app.stop()
        finally:
            run.counts = recorder.stop()  # last: the worker flushes as it stops
    run.posts = sum(count for status, count in run.statuses.items() if status > 0)
    return run


# --- the report ------------------------------------------------------------------------------


def pct(values: Sequence[float], digits: int = 1) -> str:
    """Overheads as percentages: the spread of ``ratio - 1``."""
    return spread([(v - 1) * 100 for v in values], digits, "%")


def per_request(runs: Sequence[Run], key: str, sub: str | None = None) -> list[float]:
    """A recorder count of each run (``counts[key]`` or ``counts[key][sub]``) per POST."""
    values = []
    for run in runs:
        found = run.counts.get(key, 0)
        if sub is not None:
            found = found.get(sub, 0) if isinstance(found, dict) else 0
        values.append(float(found or 0) / max(1, run.posts))
    return values


def report(args: argparse.Namespace, variants: Sequence[str], runs: dict[str, list[Run]]) -> None:
    many = args.callers
    figures: list[tuple[str, Any, int]] = [  # label, run -> value, digits
        (f"throughput c={many} (req/s)", lambda r: r.loops[many].rate, 1),
        (f"p50 c={many} (ms)", lambda r: quantile(r.loops[many].latencies, 0.5) * 1000, 2),
        (f"p95 c={many} (ms)", lambda r: quantile(r.loops[many].latencies, 0.95) * 1000, 2),
        (f"CPU host+worker c={many} (ms/req)", lambda r: r.cpu[many]["host+worker"], 2),
        (f"  of which worker c={many}", lambda r: r.cpu[many].get("worker", float("nan")), 2),
        ("throughput c=1 (req/s)", lambda r: r.loops[1].rate, 1),
        ("p50 c=1 (ms)", lambda r: quantile(r.loops[1].latencies, 0.5) * 1000, 2),
        ("p95 c=1 (ms)", lambda r: quantile(r.loops[1].latencies, 0.95) * 1000, 2),
        ("CPU host+worker c=1 (ms/req)", lambda r: r.cpu[1]["host+worker"], 2),
        (f"CPU azurite c={many} (ms/req)", lambda r: r.cpu[many]["azurite"], 2),
        (f"CPU emulator c={many} (ms/req)", lambda r: r.cpu[many]["emulator"], 2),
        (f"CPU recorder c={many} (ms/req)", lambda r: r.cpu[many]["recorder"], 3),
        (f"CPU bench client c={many} (ms/req)", lambda r: r.cpu[many]["bench client"], 2),
    ]
    w = max(len(v) for v in variants)
    base = "off" if "off" in variants else variants[0]
    others = [v for v in variants if v != base]
    print(f"\nfigures per variant (median [min..max, n={args.repeats}]), ratio = variant/{base}:")
    for label, of, digits in figures:
        print(f"  {label}")
        baseline = [of(r) for r in runs[base]]
        print(f"    {base:<{w}} {spread(baseline, digits)}")
        for variant in others:
            values = [of(r) for r in runs[variant]]
            ratios = [ratio(a, b) for a, b in zip(values, baseline, strict=True)]
            if any(b <= 0 for b in baseline):  # the recorder's CPU when nothing arrives
                print(f"    {variant:<{w}} {spread(values, digits)}")
                continue
            print(
                f"    {variant:<{w}} {spread(values, digits)}   ratio {spread(ratios, 3)} "
                f"(overhead {pct(ratios)})"
            )

    def cpu_limit(run: Run) -> float:
        cpu = run.cpu[many]
        total = sum(cpu[k] for k in ("host+worker", "azurite", "emulator", "bench client"))
        return (os.cpu_count() or 1) * 1000 / total if total else float("nan")

    print(
        f"  CPU-bound limit c={many} (cores / CPU per request of host, worker, Azurite, "
        "emulator and client; the recorder left out):"
    )
    for variant in variants:
        limits = [cpu_limit(r) for r in runs[variant]]
        rates = [r.loops[many].rate for r in runs[variant]]
        measured = [ratio(a, b) for a, b in zip(rates, limits, strict=True)]
        print(f"    {variant:<{w}} {spread(limits)} req/s; measured / limit {spread(measured, 2)}")

    print(f"\ntarget: overhead < {TARGET:.0%} on throughput c={many} and on p50 (median ratios):")
    for variant in others:
        checks = []
        for label, of, higher_is_better in (
            (f"throughput c={many}", lambda r: r.loops[many].rate, True),
            (f"p50 c={many}", lambda r: quantile(r.loops[many].latencies, 0.5), False),
            ("p50 c=1", lambda r: quantile(r.loops[1].latencies, 0.5), False),
        ):
            ratios = [ratio(of(a), of(b)) for a, b in zip(runs[variant], runs[base], strict=True)]
            middle = median(ratios)
            overhead = (1 - middle) if higher_is_better else (middle - 1)
            verdict = "met" if overhead < TARGET else "NOT met"
            checks.append(f"{label} {middle:.3f} ({overhead:+.1%}) {verdict}")
        print(f"  {variant:<{w}} " + "; ".join(checks))

    print("\nwhat the recorder received, per POST answered (warm-up and loops, shutdown flush):")
    for variant in variants:
        chosen = runs[variant]
        posts = [float(r.posts) for r in chosen]
        names = [float(r.counts.get("distinct_span_names", 0)) for r in chosen]
        print(
            f"  {variant:<{w}} POSTs {spread(posts, 0)} per run; distinct span names "
            f"{spread(names, 0)} per run (ids in names are shown as {{id}} below)"
        )
        print(
            f"         envelopes {spread(per_request(chosen, 'envelopes'), 3)}, bytes "
            f"{spread(per_request(chosen, 'bytes'), 0)} (JSON, before gzip), batches "
            f"{spread([float(r.counts.get('batches', 0)) for r in chosen], 0)} per run, "
            f"live-metrics calls {spread([float(r.counts.get('live_metrics_calls', 0)) for r in chosen], 0)} per run"  # noqa: E501
        )
        print(
            f"         traces (distinct operation ids of the spans) "
            f"{spread(per_request(chosen, 'traces'), 3)}; spans "
            f"{spread(per_request(chosen, 'types', 'RequestData'), 3)} request + "
            f"{spread(per_request(chosen, 'types', 'RemoteDependencyData'), 3)} dependency; "
            f"metric envelopes {spread(per_request(chosen, 'types', 'MetricData'), 3)}; logs "
            f"{spread(per_request(chosen, 'types', 'MessageData'), 3)}; exceptions "
            f"{spread(per_request(chosen, 'types', 'ExceptionData'), 3)}"
        )
        rates = [float(r.counts["sample_rate"]) for r in chosen if r.counts.get("sample_rate")]
        if rates:
            print(f"         span sample rate (envelope sampleRate, %): {spread(rates, 2)}")
        for key, title in (
            ("span_names", "span names"),
            ("metric_names", "metric points"),
            ("loggers", "log records by logger"),
            ("items", "items (app / Azure Monitor's own)"),
        ):
            totals: Counter[str] = Counter()
            for r in chosen:
                totals.update(r.counts.get(key, {}))
            total_posts = max(1, sum(r.posts for r in chosen))
            if totals:
                shown = ", ".join(
                    f"{name} {count / total_posts:.3f}" for name, count in totals.most_common(8)
                )
                more = f", +{len(totals) - 8} more" if len(totals) > 8 else ""
                print(f"         {title}: {shown}{more}")
        examples: dict[str, str] = {}
        for r in chosen:
            for logger, message in r.counts.get("log_examples", {}).items():
                examples.setdefault(logger, message)
        for logger, message in sorted(examples.items()):
            print(f"         the commonest log record of {logger}: {message!r}")
    statuses: dict[str, Counter[int]] = {}
    for variant in variants:
        statuses[variant] = Counter()
        for r in runs[variant]:
            statuses[variant].update(r.statuses)
    print("HTTP statuses of the POSTs: " + "; ".join(f"{v} {dict(s)}" for v, s in statuses.items()))


def environment_overrides() -> list[str]:
    return sorted(k for k in os.environ if k.startswith(TELEMETRY_PREFIXES))


def main() -> int:
    parser = argument_parser(__doc__)
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per loop (3)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved repeats (5)")
    parser.add_argument("--callers", type=int, default=8, help="callers of the throughput loop")
    parser.add_argument("--warmup", type=float, default=2.0, help="warm-up seconds (2)")
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"comma-separated, of {VARIANTS} and the diagnostic {tuple(DIAGNOSTIC)}",
    )
    parser.add_argument(
        "--keep", type=Path, help="run in this folder and keep it (logs of every process)"
    )
    parser.add_argument("--recorder-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.recorder_child:
        return recorder_child()
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = sorted(set(variants) - {*VARIANTS, *DIAGNOSTIC})
    if unknown or not variants:
        parser.error(f"unknown variants {unknown}; choose among {[*VARIANTS, *DIAGNOSTIC]}")
    with work_folder("inferbus-telemetry-", args.keep) as work:
        root = app_snapshot(work / "app")
        print(
            f"telemetry_overhead ({now_stamp()}, {machine()}): POST /api/v1/requests -> 202, "
            f"processor disabled; per variant and repeat a fresh Azurite, emulator, host and "
            f"recorder, a {args.warmup:g}s warm-up at {args.callers} callers, then loops of "
            f"{args.duration:g}s at 1 and {args.callers} callers; {args.repeats} repeats, "
            "variants interleaved (order rotating)"
        )
        w = max(len(v) for v in variants)
        for variant in variants:
            print(f"  {variant:<{w}} {describe(variant)}")
        overrides = environment_overrides()
        if overrides:
            print(f"  note: this environment sets {overrides}: they win over the settings above")
        runs: dict[str, list[Run]] = {v: [] for v in variants}
        for repeat in range(args.repeats):
            shift = repeat % len(variants)
            order = variants[shift:] + variants[:shift]
            parts = []
            for variant in order:
                run = run_variant(work, root, variant, repeat, args)
                runs[variant].append(run)
                loop = run.loops[args.callers]
                parts.append(
                    f"{variant} {loop.rate:.1f} req/s, p50 "
                    f"{quantile(loop.latencies, 0.5) * 1000:.1f} ms, c=1 p50 "
                    f"{quantile(run.loops[1].latencies, 0.5) * 1000:.1f} ms, "
                    f"{run.counts.get('envelopes', 0)} envelopes"
                )
            print(f"  repeat {repeat + 1}: " + "; ".join(parts))
        report(args, variants, runs)
        print(f"finished {now_stamp()}, {machine()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
