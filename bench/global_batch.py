"""The Global Batch lane's control plane: requests per JSONL file, and seconds of its work
per 10,000 requests.

What it measures. The app's services (``shared.entrypoints.bootstrap.build_services`` over
``azure_ports``) on a fresh in-memory Azurite, with the local Azure OpenAI batch emulator
(``tools/openai-emulator``, reached through the real ``openai`` SDK) as the service; the
request queue and both announcement channels are recorded in memory. Settings:
``GlobalBatch__deployments=local-analyzer=gpt-4o-mini-batch``, ``submitAfterSeconds`` 0,
``pollSeconds`` 0 and the service's file limits (100,000 lines, 200 MB per file).

* Staging (not control-plane work; shown apart): ``--requests`` jobs of the benchmarks'
  usual ~1.4 KB text created with the app's ``JobRepository`` (as intake records them),
  then staged with ``BatchStager.stage`` (the processor's staging call), 16 at a time.
* The control plane (``GlobalBatchControlPlane.run``, the library the timer calls), one
  phase per run, wall seconds and CPU seconds, each scaled to 10,000 requests:
  1. plan + upload + create: packs the staged lines into files, uploads them, creates the
     batches and marks every member's job ``running``;
  2. poll + copy + conclude, after every batch was moved to ``completed`` on the emulator
     (not timed: that is the service's work): copies the output and error files to our
     storage and concludes each member (job completed, announced, staged line deleted);
  3. the closing run, which finds nothing left to do.
  CPU is this process's (the control plane itself), Azurite's and the emulator's, so you
  can see which side the wall time waits on.
* Files: bytes per request line, the files produced and their lines, and the requests per
  JSONL file the service's limits allow for this line size: min(100,000 lines, 200 MB /
  line bytes). A variant with ``GlobalBatch__maxLinesPerFile=2500`` and
  ``--split-requests`` requests (run once, on its own fresh Azurite) shows a tenant's
  requests split over several files.

The control plane costs six storage operations per request (its staged line read once
when planning and deleted once closed, its job read and replaced twice), plus a few per
submission (the input file and the members' facts, written once and read once), each a
few milliseconds of SDK and Azurite CPU on a small machine, so 10,000 requests take
minutes per repeat: the default size (1,000 requests, scaled to 10,000) keeps a run near
three minutes. For the full-size figure run ``--requests 10000 --repeats 1``.

Completion is checked, not assumed: after the runs every job is read back and counted by
status, the announcements are counted, and the submissions' recorded outcomes are summed.
A repeat where anything is not completed says so loudly in its line and in the summary.

Unlike most of the app's benchmarks this imports the app's package: the control plane is
a library that the timer calls, so that is its public surface.

Run: ``.venv/bin/python bench/global_batch.py [--requests 1000] [--repeats 3]
[--split-requests 2600]``.
How to read: ``median [min..max, n=repeats]``; "per 10k" figures are scaled linearly
from ``--requests``. Figures only; nothing here asserts a speed.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _harness import (
    TEXT,
    CpuMeter,
    argument_parser,
    fresh_azurite,
    machine,
    now_stamp,
    spread,
    work_folder,
)

from openai_emulator.process import OpenAIEmulator, OpenAIEmulatorProcess
from shared.adapters.blob_storage import AzureBlobStore, blob_service_client
from shared.adapters.in_memory import RecordingPublisher, RecordingSender
from shared.contracts import InlineText, Job, JobStatus, ProcessingMode, RequestMessage
from shared.entrypoints.bootstrap import Services, build_services
from shared.entrypoints.port_sets import azure_ports, replaced
from shared.events.announcements import COMPLETED
from shared.global_batch.control_plane import GlobalBatchControlPlane
from shared.global_batch.files import encoded
from shared.global_batch.records import Submission
from shared.global_batch.store import BatchRecords
from shared.lanes import Lane
from shared.messaging import request_envelope
from shared.request_ids import new_request_id
from shared.settings import Settings
from shared.tracing import continue_or_start

MODEL = "local-analyzer"
DEPLOYMENT = "gpt-4o-mini-batch"
TENANT = "bench"
PER = 10_000  # figures are per this many requests
WORKERS = 16  # requests staged at once (the control plane reads 16 at a time too)
SPLIT_LINES = 2500  # the split variant's GlobalBatch__maxLinesPerFile
PHASES = ("plan + upload + create", "poll + copy + conclude", "closing run")
METERED = ("bench client", "azurite", "emulator")


@dataclass(frozen=True)
class GlobalBatchLane:
    services: Services
    records: BatchRecords
    control: GlobalBatchControlPlane
    events: RecordingPublisher
    topic: RecordingSender


@dataclass(frozen=True)
class Phase:
    wall: float
    cpu: dict[str, float]  # METERED name -> CPU seconds


@dataclass(frozen=True)
class Repeat:
    ids: list[str]
    jobs_seconds: float
    staging_seconds: float
    phases: list[Phase]
    line_bytes: int
    files: list[Submission]
    completion: str  # "" when every request completed, else what went wrong

    @property
    def control_wall(self) -> float:
        return sum(phase.wall for phase in self.phases)


def lane_settings(storage: str, emulator: OpenAIEmulator, **overrides: str) -> Settings:
    values = {
        "Storage": storage,
        "ServiceBusConnection": "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=x;"
        "SharedAccessKey=x;UseDevelopmentEmulator=true",  # never opened: the queue is recorded
        "MaxQueueBacklog": "0",
        "AllowedModels": MODEL,
        "GlobalBatch__deployments": f"{MODEL}={DEPLOYMENT}",
        "GlobalBatch__endpoint": emulator.endpoint,
        "GlobalBatch__apiKey": emulator.api_key,
        "GlobalBatch__submitAfterSeconds": "0",
        "GlobalBatch__pollSeconds": "0",
    }
    return Settings.model_validate(values | overrides)


def build_lane(settings: Settings) -> GlobalBatchLane:
    AzureBlobStore(blob_service_client(settings)).ensure_containers(settings.containers.names())
    events, topic = RecordingPublisher(), RecordingSender()
    ports = replaced(
        azure_ports(settings), requests=RecordingSender(), events=events, results_topic=topic
    )
    services = build_services(settings, ports)
    if services.http.batches.records is None or services.global_batch is None:
        raise RuntimeError("the Global Batch lane is not configured")
    return GlobalBatchLane(
        services, services.http.batches.records, services.global_batch, events, topic
    )


def in_parallel(work: Callable[[int], Any], count: int) -> list[Any]:
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        return list(pool.map(work, range(count)))


def timed(meter: CpuMeter, work: Callable[[], object]) -> Phase:
    meter.start()
    began = time.perf_counter()
    work()
    wall = time.perf_counter() - began
    used = meter.stop()
    return Phase(wall, {name: used[name] for name in METERED})


def stage(lane: GlobalBatchLane, count: int) -> tuple[list[str], float, float]:
    """``count`` batch-mode requests: their jobs created, then staged; (ids, seconds of
    creating the jobs, seconds of staging)."""
    now = datetime.now(UTC)
    jobs = [
        Job(
            id=new_request_id(),
            tenant_id=TENANT,
            model=MODEL,
            input=InlineText(text=TEXT),
            correlation_id=f"bench-{number}",
            created_at=now,
            updated_at=now,
            mode=ProcessingMode.BATCH,
        )
        for number in range(count)
    ]
    began = time.perf_counter()
    created = in_parallel(lambda n: lane.services.jobs.create(jobs[n]), count)
    jobs_seconds = time.perf_counter() - began
    if any(job is None for job in created):
        raise RuntimeError("a job existed already (request ids collided)")
    stager = lane.services.lanes[Lane.STANDARD].stager  # the processors' own
    assert stager is not None

    def stage_one(number: int) -> bool:
        job = jobs[number]
        request = RequestMessage(
            request_id=job.id,
            tenant_id=TENANT,
            model=MODEL,
            input=InlineText(text=TEXT),
            mode=ProcessingMode.BATCH,
        )
        message = request_envelope(
            request,
            correlation_id=job.correlation_id,
            trace=continue_or_start(None),
            now=now,
            source=job.source,
        )
        content, media_type = TEXT.encode(), "text/plain; charset=utf-8"
        return stager.stage(
            request, job.correlation_id, content, media_type, message.application_properties
        )

    began = time.perf_counter()
    staged = in_parallel(stage_one, count)
    staging_seconds = time.perf_counter() - began
    if not all(staged):
        raise RuntimeError(f"{staged.count(False)} requests were staged already")
    return [job.id for job in jobs], jobs_seconds, staging_seconds


def submissions(lane: GlobalBatchLane) -> list[Submission]:
    names = lane.services.ports.documents.list_names(lane.records.container, "submissions/")
    found = []
    for name in names:
        loaded = lane.records.submission(name.removeprefix("submissions/").removesuffix(".json"))
        if loaded is not None:
            found.append(loaded[0])
    return found


def completion(lane: GlobalBatchLane, ids: list[str], files: Iterable[Submission]) -> str:
    """ "" when every request completed, was announced once on each channel and counted
    in its submission's outcomes; else what was not."""
    statuses = Counter(
        in_parallel(lambda n: lane.services.jobs.get(TENANT, ids[n]).status, len(ids))
    )
    announced = {str(e.data["request_id"]) for e in lane.events.published if e.type == COMPLETED}
    outcomes: Counter[str] = Counter()
    for submission in files:
        outcomes.update(submission.outcomes)
    problems = []
    if statuses != Counter({JobStatus.COMPLETED: len(ids)}):
        problems.append(f"jobs {dict((s.value, n) for s, n in statuses.items())}")
    if announced != set(ids) or len(lane.topic.sent) != len(ids):
        problems.append(f"announced {len(announced)} events, {len(lane.topic.sent)} topic messages")
    if outcomes != Counter({"completed": len(ids)}):
        problems.append(f"submission outcomes {dict(outcomes)}")
    return "; ".join(problems)


def one_repeat(work: Path, name: str, count: int, **overrides: str) -> Repeat:
    azurite, storage = fresh_azurite(work, name)
    emulator_process = OpenAIEmulatorProcess(work / f"{name}-openai.log", port=0, auto_advance=0.0)
    try:
        emulator = emulator_process.wait_ready()
        lane = build_lane(lane_settings(storage, emulator, **overrides))
        ids, jobs_seconds, staging_seconds = stage(lane, count)
        pending = lane.records.pending(DEPLOYMENT, TENANT, ids[0])
        assert pending is not None
        meter = CpuMeter(
            {"azurite": azurite.process.pid, "emulator": emulator_process.child.process.pid}
        )
        phases = [timed(meter, lane.control.run)]
        for submission in submissions(lane):
            emulator.advance(str(submission.batch_id), to="completed")
        phases.append(timed(meter, lane.control.run))
        phases.append(timed(meter, lane.control.run))
        files = submissions(lane)
        return Repeat(
            ids,
            jobs_seconds,
            staging_seconds,
            phases,
            len(encoded(pending.line)),
            files,
            completion(lane, ids, files),
        )
    finally:
        emulator_process.stop()
        azurite.stop()


def per_10k(seconds: float, count: int) -> float:
    return seconds * PER / count


def print_control_plane(repeats: list[Repeat], count: int) -> None:
    def figure(values: Iterable[float]) -> str:
        return spread([per_10k(v, count) for v in values], 2)

    print(f"\nstaging, per {PER:,} requests (the processor's work, not the control plane's):")
    print(
        f"  jobs created {figure(r.jobs_seconds for r in repeats)} s, "
        f"lines staged {figure(r.staging_seconds for r in repeats)} s"
    )
    print(f"\ncontrol plane, per {PER:,} requests (wall s; CPU s of {', '.join(METERED)}):")
    for number, title in enumerate(PHASES):
        phases = [r.phases[number] for r in repeats]
        cpu = ", ".join(f"{figure(p.cpu[m] for p in phases)}" for m in METERED)
        print(f"  {number + 1} {title:<23} wall {figure(p.wall for p in phases)}; CPU {cpu}")
    cpu = ", ".join(figure(sum(p.cpu[m] for p in r.phases) for r in repeats) for m in METERED)
    print(f"    all three runs          wall {figure(r.control_wall for r in repeats)}; CPU {cpu}")


def print_files(repeats: list[Repeat], split: Repeat | None, settings: Settings) -> None:
    line = repeats[0].line_bytes
    max_lines = settings.global_batch.max_lines_per_file
    max_bytes = settings.global_batch.max_bytes_per_file
    print("\nJSONL files:")
    print(
        f"  {line:,} bytes per request line; produced: "
        + ", ".join(f"{s.requests:,} lines in {s.bytes:,} bytes" for s in repeats[0].files)
    )
    print(
        f"  requests per JSONL file the limits allow at this line size: "
        f"{min(max_lines, max_bytes // line):,} = min({max_lines:,} lines, "
        f"{max_bytes:,} B / {line:,} B)"
    )
    if split is not None:
        count = len(split.ids)
        print(
            f"  GlobalBatch__maxLinesPerFile={SPLIT_LINES:,}, {count:,} requests (1 run): "
            f"{len(split.files)} files of {[s.requests for s in split.files]} requests; "
            f"control plane wall {per_10k(split.control_wall, count):.2f} s per {PER:,}"
        )


def print_completion(runs: list[Repeat]) -> None:
    failed = [r.completion for r in runs if r.completion]
    if failed:
        print(f"\n!!! NOT EVERY REQUEST COMPLETED, in {len(failed)} of {len(runs)} runs: {failed}")
    else:
        print(
            f"\ncompletion checked: in every run ({len(runs)}) every job read back completed, "
            "announced on both channels and counted in its submission's outcomes"
        )


def repeat_line(number: int, run: Repeat) -> str:
    walls = ", ".join(f"{p.wall:.1f}" for p in run.phases)
    text = (
        f"  repeat {number}: {len(run.ids):,} requests staged in "
        f"{run.jobs_seconds + run.staging_seconds:.1f} s; control plane {run.control_wall:.1f} s "
        f"(phases {walls}); {len(run.files)} file(s)"
    )
    return text + (
        f"  !!! NOT COMPLETED: {run.completion}" if run.completion else "; all completed"
    )


def main() -> int:
    parser = argument_parser(__doc__)
    parser.add_argument("--requests", type=int, default=1000, help="requests per repeat (1000)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats (3)")
    parser.add_argument(
        "--split-requests",
        type=int,
        default=2600,
        help=f"requests of the maxLinesPerFile={SPLIT_LINES} variant, run once (2600; 0: skip)",
    )
    args = parser.parse_args()
    if args.requests < 1 or args.repeats < 1 or args.split_requests < 0:
        parser.error("--requests and --repeats must be at least 1, --split-requests at least 0")
    print(
        f"global_batch ({now_stamp()}, {machine()}): {args.requests:,} requests of "
        f"{len(TEXT)} B texts, {args.repeats} repeats, a fresh Azurite and emulator each"
    )
    repeats: list[Repeat] = []
    split = None
    with work_folder("inferbus-global-batch-") as work:
        for number in range(args.repeats):
            repeats.append(one_repeat(work, f"r{number}", args.requests))
            print(repeat_line(number + 1, repeats[-1]), flush=True)
        if args.split_requests:
            lines = str(SPLIT_LINES)
            split = one_repeat(
                work, "split", args.split_requests, GlobalBatch__maxLinesPerFile=lines
            )
            print(repeat_line(0, split).replace("repeat 0", "split"), flush=True)
    print_control_plane(repeats, args.requests)
    print_files(repeats, split, Settings.model_validate({"AllowedModels": MODEL}))
    runs = [*repeats, *([split] if split else [])]
    print_completion(runs)
    print(f"finished {now_stamp()}, {machine()}")
    return 1 if any(r.completion for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
