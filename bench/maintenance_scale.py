"""The periodic jobs' storage work as retained jobs grow: the job watchdog and ``ops usage``,
before (listing the jobs container) and after (the job index), side by side.

Why. Jobs are kept for ``JobRetentionDays`` (90 by default), and the periodic jobs want a
few of them. Until 202ec27 the watchdog and the usage report listed the whole jobs
container with last-modified times on every run (one List Blobs call per 5,000 jobs) and
read the jobs written since a point in time; now ``shared.job_index`` writes Blob index
tags with every job and both ask Find Blobs by Tags (one call per 5,000 matches). This
measures what each costs at 1,000, 10,000 and 100,000 retained jobs.

What it measures. Per size, a fresh in-memory Azurite holding that many jobs, built with
the project's contracts (``Job``, ``jobs.transition``) and stored through the app's own
code (``JobRepository(DocumentJobStore(BlobJsonDocuments(client), "jobs"))``, 16 writers
at once), so each carries the tags it carries in production: 20 tenants, ``completed_at``
spread over the 7 days before the data's "now" (today 18:00 UTC of a fixed date), nearly
all finished (96 % completed with token usage, 1.5 % refused, 1.5 % failed, 1 % expired),
plus 20 open jobs whatever the size (8 being worked on, 4 past their deadline, 2 stale,
3 whose resend falls due before the next tick, 3 whose message looks lost). The app's
``Storage`` then goes through a ``CountingProxy`` (``_harness``) that counts every storage
request by kind (list, find by tags, read, write) while one periodic job runs; the build
and the resets between runs talk to Azurite directly and are not counted.

* watchdog, after: the current ``JobWatchdog`` wired as ``entrypoints.builders.watchdog``
  wires it (announcements and resends go to in-memory recorders), on a clock set to the
  data's now: a first run (no checkpoint) and the next timer tick 5 minutes later
  (``JobWatchdogSchedule``'s default; checkpoint present, nothing changed meanwhile);
* watchdog, before: ``previous_watchdog_scan``, 202ec27's ``JobWatchdog.watch`` reproduced
  for its storage work: the checkpoint read, ``list_modified`` of the whole container (a
  List Blobs call per 5,000 jobs), a read of every job written since the checkpoint's
  ``through`` and up to the grace horizon (first run: all of them)
  and of the remembered jobs now due, the checkpoint written. The endings and resends it
  decides are counted but not written (that code did not change, and the "after" rows
  write the same jobs);
* ``ops usage`` for one day (the data's today) and for one day of one tenant: after = the
  current ``UsageReader`` with ``JobIndex``; before = ``previous_usage_scan``, 202ec27's
  ``UsageReader.report``: list everything (of the tenant, by prefix) with last-modified
  times, read what was modified since the day's start minus 5 minutes, 10 readers.

Last-modified times. Azurite stamps each blob with the moment the benchmark wrote it, not
with the time its job was last written in production. The "before" scans therefore make
the same List Blobs calls (counted and timed) but judge each listed job by the time it
would carry in production: its ``updated_at`` (its last write), or the run's time for a
job the scan itself would have ended or resent.

Azurite. Azurite 3.35's Find Blobs by Tags in a container looks only at the first 5,000
blobs in name order (``FilterBlobPage.fill`` stops at the first page that is not full of
matches and returns no continuation), so above 5,000 jobs the index would miss most of
them. For this benchmark Azurite starts with a small preload (``NODE_OPTIONS=--require``,
written to the run's folder) that pages Find Blobs by Tags as Azure does: up to 5,000
matches per call, then a continuation. ``--stock-azurite`` runs it as shipped; either
way every figure is checked against what was written (the open jobs the index names, the
day's ended jobs, before and after summing the same usage) and a mismatch is printed.

Local limit. This is Azurite on this machine: operation counts are exact (they are the
app's requests, whatever serves them), seconds are local. Azurite's in-memory store
costs more per operation the more blobs it holds (each lookup scans the account's
blobs), so seconds grow with the size for every operation, the index's and its reads
included, which Azure's do not; the "local limit" line gives Azurite's own cost of one
read, one list page and one tag query at each size, measured directly (no proxy). On a
2-CPU machine one read costs Azurite 5 ms at 1,000 jobs and 24 ms at 30,000; building
30,000 jobs took 6 minutes and ``--sizes 1000,10000,30000 --repeats 1`` 29 minutes, most
of it the "before" first run reading every job one at a time. 100,000 jobs take hours
there (over an hour to build, then ~100,000 reads at ~80 ms), so the defaults do not fit
in 10 minutes: ``--quick`` (200 and 2,000 jobs, one repeat) takes about 30 seconds.

Run: ``.venv/bin/python bench/maintenance_scale.py [--sizes 1000,10000,100000]
[--repeats 3] [--quick] [--stock-azurite]``.
How to read: cells are "lists+finds / reads / seconds" (reads include the watchdog's
checkpoint; seconds are the median of ``--repeats``; the state is reset between repeats).
Prints, never asserts.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import random
import re
import statistics
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import partial
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from _harness import (
    REPO,
    CountingProxy,
    argument_parser,
    machine,
    now_stamp,
    sample_settings,
    spread,
    work_folder,
)

from local_processes import Azurite, run_azurite
from local_processes.azurite import find_azurite
from shared.accounting.usage import DayRange, UsageLedger, UsageRow
from shared.accounting.usage_report import READERS, UsageReader
from shared.adapters.blob_documents import BlobJsonDocuments
from shared.adapters.blob_storage import blob_service_client
from shared.adapters.in_memory import RecordingPublisher, RecordingSender
from shared.clock import as_utc
from shared.contracts import (
    JOB_SCHEMA,
    ClaimCheck,
    InferenceResult,
    Job,
    JobError,
    JobStatus,
    ResultDocument,
    TokenUsage,
)
from shared.events.announcements import Announcer
from shared.job_index import JobIndex, finished_at, in_a_global_batch, job_name
from shared.jobs import DocumentJobStore, JobRepository, transition
from shared.processing.endings import JobEndings
from shared.processing.resends import JobResender, ResendPolicy, resend_due_at
from shared.processing.watchdog import (
    CHECKPOINT,
    JobWatchdog,
    WatchdogPolicy,
    WatchOutcome,
    WatchReport,
    due_at,
)
from shared.request_ids import new_request_id
from shared.settings import Settings

MODEL = "local-analyzer"
TENANTS = tuple(f"tenant-{number:02d}" for number in range(1, 21))
DAYS = 7
# The data's "now": a fixed date, so that every run writes the same spread of jobs.
NOW = datetime(2025, 6, 6, 18, 0, tzinfo=UTC)
TODAY = NOW.date()
TICK = timedelta(minutes=5)  # JobWatchdogSchedule's default, "45 */5 * * * *"
WRITERS = 16  # jobs written at once while building (Azurite gains nothing beyond ~16)
SEED = 20250606
OPEN = 20  # open jobs, whatever the size
LOCAL_LIMIT_READS = 30  # sequential reads timed directly for the local limit
# 202ec27: the watchdog's checkpoint (kept apart here, so "after" starts without one), and
# the usage report's allowance for the app's clock against storage's.
PREVIOUS_CHECKPOINT = "watchdog/checkpoint-202ec27.json"
PREVIOUS_CLOCK_SKEW = timedelta(minutes=5)
PREVIOUS_JOB_NAME = re.compile(r"^[^/]+/[^/]+\.json$")
PERIODIC = (
    "watchdog, first run",
    "watchdog, next run",
    "usage, one day",
    "usage, tenant-day",
)
VERSIONS = ("before", "after")

# Azurite's Find Blobs by Tags, paged as Azure pages it (see the module docstring): the
# container's blobs after the marker, in name order, up to ``maxResults`` matches, and a
# continuation when more could follow. Written to the run's folder and preloaded with
# NODE_OPTIONS; it names the file given in INFERBUS_BENCH_PATCHED once it is in place.
FIND_BY_TAGS_PATCH = """\
"use strict";
// Written by bench/maintenance_scale.py: Find Blobs by Tags paged as Azure pages it.
const fs = require("fs");
const path = require("path");
try {
  const dir = process.env.INFERBUS_AZURITE_PERSISTENCE;
  const Store = require(path.join(dir, "LokiBlobMetadataStore.js")).default;
  const query = require(path.join(dir, "QueryInterpreter", "QueryInterpreter.js"));
  const utils = require(path.join(dir, "..", "utils", "utils.js"));
  Store.prototype.filterBlobs = async function (
    context, account, container, where, maxResults = 5000, marker = ""
  ) {
    const selector = {};
    if (account !== undefined) selector.accountName = account;
    if (container !== undefined) {
      selector.containerName = container;
      await this.checkContainerExist(context, account, container);
    }
    const matches = query.generateQueryBlobWithTagsWhereFunction(context, where);
    const after = marker || "";
    const docs = this.db.getCollection(this.BLOBS_COLLECTION).chain().find(selector)
      .where((doc) => doc.name > after && (doc.snapshot === undefined || doc.snapshot === ""))
      .sort((a, b) => (a.name === b.name ? 0 : a.name > b.name ? 1 : -1))
      .data();
    const found = [];
    for (const doc of docs) {
      const met = matches({ name: doc.name, containerName: doc.containerName, tags: doc.blobTags });
      if (met.length === 0) continue;
      if (found.length >= maxResults) return [found, found[found.length - 1].name];
      found.push({
        name: doc.name,
        containerName: doc.containerName,
        tags: { blobTagSet: utils.toBlobTags(met) },
      });
    }
    return [found, ""];
  };
  fs.writeFileSync(process.env.INFERBUS_BENCH_PATCHED, "patched");
} catch (error) {
  process.stderr.write(`maintenance_scale: Find Blobs by Tags left as shipped: ${error}\\n`);
}
"""


# --- Azurite and the counting proxy ---------------------------------------------------------


@contextmanager
def azurite(work: Path, name: str, patched: bool) -> Iterator[tuple[Azurite, bool]]:
    """A fresh in-memory Azurite (``local_processes.run_azurite``), with Find Blobs by Tags
    paged as Azure pages it when ``patched``; (Azurite, whether the patch is in place)."""
    if not patched:
        with run_azurite(root=REPO) as stock:
            yield stock, False
        return
    preload = work / "find-by-tags.js"
    preload.write_text(FIND_BY_TAGS_PATCH)
    marker = work / f"{name}.patched"
    marker.unlink(missing_ok=True)
    main = Path(find_azurite("azurite-blob", REPO)).resolve()  # .../dist/src/blob/main.js
    added = {
        "NODE_OPTIONS": f"--require {preload}",
        "INFERBUS_AZURITE_PERSISTENCE": str(main.parent / "persistence"),
        "INFERBUS_BENCH_PATCHED": str(marker),
    }
    saved = {key: os.environ.get(key) for key in added}
    with ExitStack() as running:
        os.environ.update(added)  # Azurite's process starts with them; this one forgets them
        try:
            emulator = running.enter_context(run_azurite(root=REPO))
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        yield emulator, marker.exists()


def op_kind(method: str, path: str) -> tuple[str, str]:
    """(container, kind) of one storage request: list, find (by tags), read, write,
    delete or other."""
    parts = urlsplit(path)
    segments = parts.path.lstrip("/").split("/", 2)  # account, container, blob
    container = segments[1] if len(segments) > 1 else ""
    blob = unquote(segments[2]) if len(segments) > 2 else ""
    comp = dict(parse_qsl(parts.query)).get("comp")
    if comp == "list":
        return container, "list"
    if comp == "blobs":
        return container, "find"
    if blob and comp is None:
        kinds = {"GET": "read", "HEAD": "read", "PUT": "write", "DELETE": "delete"}
        return container, kinds.get(method, "other")
    return container, "other"


class KindCountingProxy(CountingProxy):
    """``CountingProxy`` that also counts requests by container and kind, Find Blobs by
    Tags apart from listings (the harness's own labels call both container calls).

    A request is counted when it arrives, so it belongs to the call that made it even
    though the proxy records its own ``StorageOp`` after answering."""

    def __init__(self, upstream_port: int) -> None:
        self.kinds: Counter[tuple[str, str]] = Counter()
        self._kinds_lock = threading.Lock()
        super().__init__(upstream_port)

    def forward(self, handler: BaseHTTPRequestHandler) -> None:
        kind = op_kind(handler.command, handler.path)
        with self._kinds_lock:
            self.kinds[kind] += 1
        super().forward(handler)

    def counted(self) -> Counter[tuple[str, str]]:
        with self._kinds_lock:
            return Counter(self.kinds)


# --- the retained jobs ----------------------------------------------------------------------


def at(moment: datetime) -> Callable[[], datetime]:
    return lambda: moment


def claim_check(tenant: str, request_id: str) -> ClaimCheck:
    return ClaimCheck(
        blob_uri=f"https://inferbusdata.blob.core.windows.net/inputs/{tenant}/{request_id}",
        sha256=hashlib.sha256(request_id.encode()).hexdigest(),
        size=1400,
        media_type="text/plain; charset=utf-8",
    )


def accepted_job(rng: random.Random, tenant: str, created: datetime) -> Job:
    request_id = new_request_id(at(created))
    return Job(
        id=request_id,
        tenant_id=tenant,
        model=MODEL,
        input=claim_check(tenant, request_id),
        metadata={"source-system": "erp", "batch": f"b{rng.randrange(1000):03d}"},
        correlation_id=uuid.UUID(int=rng.getrandbits(128)).hex,
        created_at=created,
        updated_at=created,
    )


def result_of(job: Job, ended: datetime, rng: random.Random, refused: bool) -> ResultDocument:
    prompt = rng.randrange(300, 1800)
    answer = rng.randrange(40, 400)
    usage = TokenUsage(input_tokens=prompt, output_tokens=answer, total_tokens=prompt + answer)
    if refused:
        return ResultDocument(
            request_id=job.id,
            tenant_id=job.tenant_id,
            model=job.model,
            outcome="refused",
            refusal={"reason": "content_filter", "message": "the model declined to answer"},
            usage=usage,
            finish_reason="content_filter",
            completed_at=ended.isoformat(),
        )
    analysis = InferenceResult(
        summary="Invoice 2291 for consulting services, 4,200 EUR due within 30 days.",
        document_type="invoice",
        confidence=round(rng.uniform(0.7, 0.99), 2),
        language="en",
        usage=usage,
        finish_reason="stop",
    )
    return ResultDocument(
        request_id=job.id,
        tenant_id=job.tenant_id,
        model=job.model,
        outcome="completed",
        result=analysis,
        usage=usage,
        finish_reason="stop",
        completed_at=ended.isoformat(),
    )


def finished_job(number: int) -> Job:
    """Retained job ``number``: finished in the ``DAYS`` days before ``NOW``, moved there
    by the same transitions as the processor's."""
    rng = random.Random(SEED * 1_000_003 + number)
    tenant = TENANTS[rng.randrange(len(TENANTS))]
    ended = NOW - timedelta(seconds=rng.uniform(30, DAYS * 86_400))
    created = ended - timedelta(seconds=rng.uniform(2, 300))
    started = created + (ended - created) * rng.uniform(0.01, 0.5)
    running = transition(accepted_job(rng, tenant, created), JobStatus.RUNNING, at(started))
    running = running.model_copy(update={"attempts": 1})
    draw = rng.random()
    if draw < 0.96:
        result = result_of(running, ended, rng, refused=False)
        return transition(running, JobStatus.COMPLETED, at(ended), result=result)
    if draw < 0.975:
        result = result_of(running, ended, rng, refused=True)
        return transition(running, JobStatus.COMPLETED, at(ended), result=result)
    if draw < 0.99:
        error = JobError(code="model_error", message="the model answered 500 three times")
        return transition(running, JobStatus.FAILED, at(ended), error=error, last_error=error)
    error = JobError(code="deadline_exceeded", message="not finished by its deadline")
    running = running.model_copy(update={"deadline": ended - timedelta(seconds=1)})
    return transition(running, JobStatus.EXPIRED, at(ended), error=error, last_error=error)


def open_jobs() -> list[tuple[str, Job]]:
    """The ``OPEN`` unfinished jobs every size holds, each with what the watchdog should
    make of it on its first run at ``NOW``."""
    rng = random.Random(SEED)
    jobs: list[tuple[str, Job]] = []

    def add(kind: str, tenant: str, created: datetime, **changes: Any) -> None:
        job = accepted_job(rng, tenant, created)
        jobs.append((kind, job.model_copy(update=changes)))

    for number in range(8):  # someone's current work: changed within the grace period
        changed = NOW - timedelta(minutes=1 + number)
        status = JobStatus.RUNNING if number % 2 else JobStatus.ACCEPTED
        add("in progress", TENANTS[number], changed, status=status, attempts=number % 2)
    for number in range(4):  # past their deadline by more than the grace period
        changed = NOW - timedelta(hours=2 + number)
        deadline = NOW - timedelta(minutes=30 + 10 * number)
        add("overdue", TENANTS[8 + number], changed, status=JobStatus.RUNNING, deadline=deadline)
    for number in range(2):  # no deadline, unchanged beyond JobWatchdogStaleSeconds
        changed = NOW - timedelta(hours=26 + number)
        add("stale", TENANTS[12 + number], changed, status=JobStatus.RUNNING, attempts=1)
    for number in range(3):  # running, deadline ahead, resend due in a few minutes: watched
        changed = NOW - timedelta(minutes=16 + number)
        deadline = NOW + timedelta(hours=3)
        add("watched", TENANTS[14 + number], changed, status=JobStatus.RUNNING, deadline=deadline)
    for number in range(3):  # accepted and quiet for longer than JobResend__afterSeconds
        changed = NOW - timedelta(minutes=45 + number)
        add("message lost", TENANTS[17 + number], changed)
    return jobs


@dataclass
class Retained:
    """What was written, as the checks need it."""

    size: int
    last_modified: dict[str, datetime]  # name -> its job's last write (updated_at)
    ended_on: Counter[tuple[date, str]]  # (UTC day, tenant) -> jobs that ended then
    open_names: dict[str, str]  # name -> its kind (``open_jobs``)
    originals: list[Job]  # the open jobs as written (restored between runs)
    seconds: float

    def ended_today(self, tenant: str | None = None) -> int:
        return sum(
            count
            for (day, owner), count in self.ended_on.items()
            if day == TODAY and tenant in (None, owner)
        )


def build(documents: BlobJsonDocuments, settings: Settings, size: int) -> Retained:
    """``size`` jobs (``OPEN`` of them open) written with ``WRITERS`` at once, through
    ``DocumentJobStore`` (so with the index tags production writes)."""
    jobs = JobRepository(DocumentJobStore(documents, settings.containers.jobs))
    opened = open_jobs()
    count = size - len(opened)

    def write(job: Job) -> tuple[str, Job]:
        if jobs.create(job) is None:
            raise RuntimeError(f"job {job.id} exists already")
        return job_name(job.tenant_id, job.id), job

    def write_finished(number: int) -> tuple[str, Job]:
        return write(finished_job(number))

    retained = Retained(size, {}, Counter(), {}, [], 0.0)
    began = time.perf_counter()
    step = max(1, count // 10)
    with ThreadPoolExecutor(WRITERS, thread_name_prefix="build") as pool:
        for kind, job in opened:
            name, _ = write(job)
            retained.open_names[name] = kind
            retained.originals.append(job)
            retained.last_modified[name] = as_utc(job.updated_at)
        for done, (name, job) in enumerate(pool.map(write_finished, range(count)), start=1):
            retained.last_modified[name] = as_utc(job.updated_at)
            retained.ended_on[(finished_at(job).date(), job.tenant_id)] += 1
            if done % step == 0 or done == count:
                spent = time.perf_counter() - began
                print(
                    f"    built {done + len(opened):,} of {size:,} jobs in {spent:.0f} s "
                    f"({done / spent:,.0f} jobs/s)",
                    flush=True,
                )
    retained.seconds = time.perf_counter() - began
    return retained


def reset(documents: BlobJsonDocuments, settings: Settings, retained: Retained) -> None:
    """Back to the state as built: no checkpoint, every open job as first written."""
    store = DocumentJobStore(documents, settings.containers.jobs)
    for name in (CHECKPOINT, PREVIOUS_CHECKPOINT):
        documents.delete(settings.containers.ledgers, name)
    for original in retained.originals:
        current = store.load(original.tenant_id, original.id)
        if current is None:
            store.create(original)
        elif current.job != original:
            store.replace(original, current.etag)


# --- the periodic jobs, after (the app's code) ----------------------------------------------


class SimulatedClock:
    """The periodic jobs' wall clock: the data's now, moved on by hand."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def watchdog_policy(settings: Settings) -> WatchdogPolicy:
    return WatchdogPolicy(
        grace=timedelta(seconds=settings.jobs.watchdog_grace_seconds),
        stale=timedelta(seconds=settings.jobs.watchdog_stale_seconds),
        max_run=timedelta(seconds=settings.jobs.watchdog_max_run_seconds),
    )


def current_watchdog(
    documents: BlobJsonDocuments, settings: Settings, clock: SimulatedClock
) -> JobWatchdog:
    """``JobWatchdog`` as ``entrypoints.builders.watchdog`` builds it; the announcements
    and the resent messages go to in-memory recorders."""
    jobs = JobRepository(DocumentJobStore(documents, settings.containers.jobs), clock)
    announcer = Announcer(RecordingPublisher(), RecordingSender())
    return JobWatchdog(
        index=JobIndex(documents, settings.containers.jobs),
        documents=documents,
        checkpoint_container=settings.containers.ledgers,
        jobs=jobs,
        endings=JobEndings(jobs, announcer, clock),
        policy=watchdog_policy(settings),
        clock=clock,
        resender=JobResender(
            sender=RecordingSender(),
            jobs=jobs,
            policy=ResendPolicy.from_settings(settings),
            count_resent=lambda lane: None,
            clock=clock,
        ),
    )


def current_usage(
    documents: BlobJsonDocuments, settings: Settings, tenant: str | None
) -> tuple[list[UsageRow], int]:
    """``ops usage`` for the data's today (of ``tenant``): its rows and the jobs it read."""
    container = settings.containers.jobs
    reader = UsageReader(documents, JobIndex(documents, container), container)
    report = reader.report(DayRange.single(TODAY), tenant)
    return report.rows, report.documents.read


# --- the periodic jobs, before (202ec27, reproduced for its storage work) --------------------


def previous_ids(name: str) -> tuple[str, str] | None:
    """202ec27's ``JobWatchdog._ids``."""
    tenant, _, file_name = name.rpartition("/")
    if not tenant or not file_name.endswith(".json"):
        return None
    return tenant, file_name.removesuffix(".json")


def previous_watchdog_scan(
    documents: BlobJsonDocuments,
    settings: Settings,
    now: datetime,
    last_modified: dict[str, datetime],
) -> WatchReport:
    """202ec27's ``JobWatchdog.watch``, its storage work: read the checkpoint, list the
    whole jobs container with last-modified times, read every job written since the
    checkpoint's ``through`` (all of them without one) and up to the grace horizon, and
    every remembered job now due, in name order, one at a time; write the checkpoint.

    Each listed job is judged by ``last_modified`` (its time in production, see the module
    docstring), falling back to Azurite's. A job it would end or resend is counted and
    remembered as 202ec27 did, but not written (that part is the same code as now); its
    ``last_modified`` becomes ``now``, as the write would have made it."""
    policy = watchdog_policy(settings)
    resends = ResendPolicy.from_settings(settings)
    jobs = JobRepository(DocumentJobStore(documents, settings.containers.jobs))
    horizon = now - policy.grace
    through: datetime | None = None
    pending: dict[str, datetime] = {}
    resent: dict[str, int] = {}
    found = documents.load(settings.containers.ledgers, PREVIOUS_CHECKPOINT)
    if found is not None:
        document = found[0]
        through = datetime.fromisoformat(document["through"])
        pending = {k: datetime.fromisoformat(v) for k, v in document["pending"].items()}
        resent = {k: int(v) for k, v in document["resent"].items()}
    report = WatchReport()
    written = []
    for name, modified in documents.list_modified(settings.containers.jobs, ""):
        when = last_modified.get(name, modified)
        if (through is None or when > through) and when <= horizon:
            written.append(name)
    due = [name for name, when in pending.items() if when <= now]
    for name in sorted(set(written) | set(due)):
        report.read += 1
        ids = previous_ids(name)
        current = jobs.load(*ids) if ids else None
        if ids is None:
            outcome, still_due = WatchOutcome.NOT_A_JOB, None
        elif current is None or current.job.status.is_terminal:
            outcome, still_due = WatchOutcome.FINISHED, None
        elif in_a_global_batch(current.job):
            outcome, still_due = WatchOutcome.IN_A_BATCH, None
        else:
            job = current.job
            ending_due = due_at(job, policy)
            attempts = resent.get(name, 0)
            resend_due = resend_due_at(job, resends) if attempts < resends.max_attempts else None
            if ending_due <= now:
                outcome, still_due = WatchOutcome.ENDED, None
                last_modified[name] = now
            elif resend_due is None:
                outcome, still_due = WatchOutcome.WATCHING, ending_due
            elif resend_due > now:
                outcome, still_due = WatchOutcome.WATCHING, min(ending_due, resend_due)
            else:
                outcome, still_due = WatchOutcome.RESENT, min(ending_due, now + resends.after)
                resent[name] = attempts + 1
                last_modified[name] = now
        report.outcomes[outcome] += 1
        if still_due is None:
            pending.pop(name, None)
            resent.pop(name, None)
        else:
            pending[name] = still_due
    checkpoint = {
        "through": horizon.isoformat(),
        "pending": {name: when.isoformat() for name, when in sorted(pending.items())},
        "unannounced": [],
        "resent": dict(sorted(resent.items())),
    }
    documents.put(settings.containers.ledgers, PREVIOUS_CHECKPOINT, checkpoint)
    return report


def previous_usage_scan(
    documents: BlobJsonDocuments,
    settings: Settings,
    tenant: str | None,
    last_modified: dict[str, datetime],
) -> tuple[list[UsageRow], int]:
    """202ec27's ``UsageReader.report`` for the data's today (of ``tenant``): list the
    container (the tenant's prefix) with last-modified times, read every job modified
    since the day's start minus ``PREVIOUS_CLOCK_SKEW`` with ``READERS`` at once, sum.
    Listed jobs are judged by ``last_modified`` (see ``previous_watchdog_scan``)."""
    days = DayRange.single(TODAY)
    container = settings.containers.jobs
    cut = days.start - PREVIOUS_CLOCK_SKEW
    to_read = [
        name
        for name, modified in documents.list_modified(container, f"{tenant}/" if tenant else "")
        if as_utc(last_modified.get(name, modified)) >= cut and PREVIOUS_JOB_NAME.fullmatch(name)
    ]
    ledger = UsageLedger(days, tenant)

    def read(name: str) -> Job | None:
        found = documents.load(container, name)
        if found is None or found[0].get("schema") != JOB_SCHEMA:
            return None
        return Job.model_validate(found[0])

    read_count = 0
    if to_read:
        with ThreadPoolExecutor(min(READERS, len(to_read)), thread_name_prefix="usage") as pool:
            for job in pool.map(read, to_read):
                read_count += 1
                if job is not None and job.status.is_terminal and job.result is not None:
                    ledger.add(job)
    return ledger.rows(), read_count


# --- measuring --------------------------------------------------------------------------------


@dataclass
class Figure:
    """One periodic job of one version at one size: its operations (first repeat) and
    seconds (every repeat)."""

    ops: Counter[tuple[str, str]] = field(default_factory=Counter)
    seconds: list[float] = field(default_factory=list)
    differing: bool = False  # a later repeat made other operations than the first
    reads_expected: int | None = None  # usage: the day's ended jobs

    def kind(self, *kinds: str) -> int:
        return sum(count for (_, kind), count in self.ops.items() if kind in kinds)

    @property
    def lists_finds(self) -> int:
        return self.kind("list", "find")

    @property
    def reads(self) -> int:
        return self.kind("read")

    def cell(self) -> str:
        seconds = statistics.median(self.seconds) if self.seconds else float("nan")
        return f"{self.lists_finds:,} / {self.reads:,} / {seconds:.2f}s"

    def detail(self) -> str:
        by_container: dict[str, list[str]] = {}
        for (container, kind), count in sorted(self.ops.items()):
            by_container.setdefault(container, []).append(f"{kind} {count:,}")
        parts = [f"{container}: {', '.join(kinds)}" for container, kinds in by_container.items()]
        text = "; ".join(parts) or "no storage operation"
        text += f"; {spread(self.seconds, 2, ' s')}"
        return text + (" (a later repeat made other operations)" if self.differing else "")


def timed[T](proxy: KindCountingProxy, figure: Figure, work: Callable[[], T]) -> T:
    """Run ``work``, adding its operations (first time) and seconds to ``figure``."""
    before = proxy.counted()
    began = time.perf_counter()
    result = work()
    seconds = time.perf_counter() - began
    ops = proxy.counted()
    ops.subtract(before)
    ops = +ops
    if not figure.seconds:
        figure.ops = ops
    elif ops != figure.ops:
        figure.differing = True
    figure.seconds.append(seconds)
    return result


@dataclass
class LocalLimit:
    read_ms: float
    list_page_s: float
    find_s: float

    def text(self) -> str:
        return (
            f"Azurite alone: one read {self.read_ms:.1f} ms (median of {LOCAL_LIMIT_READS}), "
            f"one list page of up to 5,000 blobs {self.list_page_s:.2f} s, the open-jobs tag "
            f"query {self.find_s:.2f} s"
        )


def local_limit(documents: BlobJsonDocuments, settings: Settings, names: list[str]) -> LocalLimit:
    """Azurite's own cost of one operation of each kind at this size (direct, no proxy)."""
    container = settings.containers.jobs
    rng = random.Random(SEED)
    reads = []
    for name in rng.sample(names, min(LOCAL_LIMIT_READS, len(names))):
        began = time.perf_counter()
        documents.load(container, name)
        reads.append(time.perf_counter() - began)
    began = time.perf_counter()
    client = blob_service_client(settings).get_container_client(container)
    next(iter(client.list_blobs().by_page()), None)
    list_page = time.perf_counter() - began
    began = time.perf_counter()
    JobIndex(documents, container).open_jobs()
    return LocalLimit(statistics.median(reads) * 1000, list_page, time.perf_counter() - began)


@dataclass
class SizeResult:
    retained: Retained
    patched: bool
    figures: dict[tuple[str, str], Figure]
    limit: LocalLimit
    checks: list[str]  # what did not match what was written ("" when everything did)


def measure_size(work: Path, size: int, repeats: int, stock: bool) -> SizeResult:
    with azurite(work, f"size-{size}", patched=not stock) as (emulator, patched):
        port = urlsplit(emulator.blob_endpoint).port
        if port is None:
            raise RuntimeError(f"no port in {emulator.blob_endpoint}")
        direct_settings = sample_settings({"Storage": emulator.connection_string})
        direct = BlobJsonDocuments(blob_service_client(direct_settings))
        client = blob_service_client(direct_settings)
        for container in (direct_settings.containers.jobs, direct_settings.containers.ledgers):
            client.create_container(container)
        print(f"  {size:,} jobs: building ...", flush=True)
        retained = build(direct, direct_settings, size)
        proxy = KindCountingProxy(port)
        try:
            settings = sample_settings({"Storage": proxy.connection_string()})
            documents = BlobJsonDocuments(blob_service_client(settings))
            figures = {(job, version): Figure() for job in PERIODIC for version in VERSIONS}
            checks = measure_all(direct, documents, settings, proxy, retained, figures, repeats)
        finally:
            proxy.close()
        limit = local_limit(direct, direct_settings, list(retained.last_modified))
    return SizeResult(retained, patched, figures, limit, checks)


def measure_all(
    direct: BlobJsonDocuments,
    documents: BlobJsonDocuments,
    settings: Settings,
    proxy: KindCountingProxy,
    retained: Retained,
    figures: dict[tuple[str, str], Figure],
    repeats: int,
) -> list[str]:
    """Every periodic job, before and after, ``repeats`` times (reset in between);
    returns what did not match what was written."""
    checks: list[str] = []
    tenant = TENANTS[0]
    for repeat in range(repeats):
        reset(direct, settings, retained)
        for label, who in (("usage, one day", None), ("usage, tenant-day", tenant)):
            modeled = dict(retained.last_modified)
            rows_before, _ = timed(
                proxy,
                figures[(label, "before")],
                partial(previous_usage_scan, documents, settings, who, modeled),
            )
            rows_after, read = timed(
                proxy,
                figures[(label, "after")],
                partial(current_usage, documents, settings, who),
            )
            expected = retained.ended_today(who)
            figures[(label, "after")].reads_expected = expected
            if repeat == 0 and read != expected:
                checks.append(f"{label}: the index named {read:,} jobs, {expected:,} ended then")
            if repeat == 0 and rows_before != rows_after:
                checks.append(f"{label}: before and after sum different usage")
        checks += watchdog_runs(direct, documents, settings, proxy, retained, figures, repeat)
        print(f"    repeat {repeat + 1} of {repeats} done", flush=True)
    return checks


def watchdog_runs(
    direct: BlobJsonDocuments,
    documents: BlobJsonDocuments,
    settings: Settings,
    proxy: KindCountingProxy,
    retained: Retained,
    figures: dict[tuple[str, str], Figure],
    repeat: int,
) -> list[str]:
    """The watchdog before, then after (reset in between): a first run at ``NOW`` and the
    next tick; returns what did not match what was written (first repeat only)."""
    checks: list[str] = []
    modeled = dict(retained.last_modified)
    runs: dict[tuple[str, str], WatchReport] = {}
    for label, now in (("watchdog, first run", NOW), ("watchdog, next run", NOW + TICK)):
        runs[(label, "before")] = timed(
            proxy,
            figures[(label, "before")],
            partial(previous_watchdog_scan, documents, settings, now, modeled),
        )
    reset(direct, settings, retained)
    clock = SimulatedClock(NOW)
    watchdog = current_watchdog(documents, settings, clock)
    for label, now in (("watchdog, first run", NOW), ("watchdog, next run", NOW + TICK)):
        clock.now = now
        runs[(label, "after")] = timed(proxy, figures[(label, "after")], watchdog.watch)
    if repeat:
        return checks
    first = runs[("watchdog, first run", "after")]
    if first.open != len(retained.open_names):
        checks.append(f"watchdog: the index named {first.open} open jobs of {OPEN}")
    for label in ("watchdog, first run", "watchdog, next run"):
        before = +Counter(runs[(label, "before")].outcomes)
        before.pop(WatchOutcome.FINISHED, None)
        after = +Counter(runs[(label, "after")].outcomes)
        after.pop(WatchOutcome.FINISHED, None)
        if label.endswith("first run") and before != after:
            decided = {str(o): n for o, n in sorted(before.items())}
            made = {str(o): n for o, n in sorted(after.items())}
            checks.append(f"{label}: before decided {decided}, after {made}")
    return checks


# --- printing ---------------------------------------------------------------------------------


def print_table(results: list[SizeResult]) -> None:
    sizes = [result.retained.size for result in results]
    width = max(26, *(len(r.figures[(j, v)].cell()) + 2 for r in results for j, v in r.figures))
    print("\nlists+finds / reads / seconds, per run, by retained jobs:")
    print(f"  {'':<21}{'':<8}" + "".join(f"{size:>{width},}" for size in sizes))
    for job in PERIODIC:
        for version in VERSIONS:
            cells = "".join(f"{r.figures[(job, version)].cell():>{width}}" for r in results)
            print(f"  {job if version == 'before' else '':<21}{version:<8}{cells}")
    print(
        "  (reads include the watchdog's checkpoint; seconds: median of the repeats; the "
        "next run is the timer's next tick, 5 minutes later, nothing written meanwhile)"
    )


def print_details(results: list[SizeResult]) -> None:
    print("\noperations by container and kind (first repeat), seconds [min..max, n]:")
    for result in results:
        retained = result.retained
        print(
            f"  {retained.size:,} jobs (built in {retained.seconds:.0f} s; ended today "
            f"{retained.ended_today():,}, of {TENANTS[0]} {retained.ended_today(TENANTS[0]):,}"
            f"; find by tags {'paged as in Azure' if result.patched else 'as Azurite ships'})"
        )
        for job in PERIODIC:
            for version in VERSIONS:
                text = result.figures[(job, version)].detail()
                print(f"    {job:<19} {version:<6} {text}")
        print(f"    local limit: {result.limit.text()}")


def holds(condition: bool) -> str:
    return "holds" if condition else "DOES NOT HOLD"


def print_targets(results: list[SizeResult]) -> None:
    smallest, largest = results[0], results[-1]
    print("\ntargets:")
    for job in PERIODIC[:2]:
        for version in VERSIONS:
            low = smallest.figures[(job, version)]
            high = largest.figures[(job, version)]
            steady = (
                abs(high.lists_finds - low.lists_finds) <= 1 and abs(high.reads - low.reads) <= 1
            )
            print(
                f"  {job} ({version}): lists+finds {low.lists_finds:,} -> {high.lists_finds:,}, "
                f"reads {low.reads:,} -> {high.reads:,} from {smallest.retained.size:,} to "
                f"{largest.retained.size:,} jobs: the same (+-1) "
                + (holds(steady) if version == "after" else f"[{'yes' if steady else 'no'}]")
            )
    for job in PERIODIC[2:]:
        for result in results:
            after = result.figures[(job, "after")]
            before = result.figures[(job, "before")]
            expected = after.reads_expected or 0
            print(
                f"  {job} (after) at {result.retained.size:,} jobs: reads {after.reads:,}, "
                f"the day's jobs {expected:,}: {holds(after.reads == expected)} "
                f"(before read {before.reads:,} after listing {before.kind('list'):,} pages)"
            )
    problems = [(r.retained.size, check) for r in results for check in r.checks]
    if problems:
        print("\n!!! FIGURES THAT DO NOT MATCH WHAT WAS WRITTEN:")
        for size, check in problems:
            print(f"  {size:,} jobs: {check}")
    else:
        print(
            "  checks: at every size the index named every open job, the day's ended jobs and "
            "nothing else, the watchdog decided the same before and after, and both usage "
            "reports summed the same rows"
        )


def parse_sizes(text: str) -> list[int]:
    try:
        sizes = sorted({int(part.replace("_", "")) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of sizes: {text!r}") from None
    if not sizes or sizes[0] < 2 * OPEN:
        raise argparse.ArgumentTypeError(f"sizes must be at least {2 * OPEN}")
    return sizes


def main() -> int:
    parser = argument_parser(__doc__)
    parser.add_argument(
        "--sizes",
        type=parse_sizes,
        default=[1000, 10_000, 100_000],
        help="retained jobs, comma-separated (1000,10000,100000)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="repeats per size (3)")
    parser.add_argument(
        "--quick", action="store_true", help="sizes 200,2000 and one repeat (a smoke run)"
    )
    parser.add_argument(
        "--stock-azurite",
        action="store_true",
        help="Find Blobs by Tags as Azurite ships it (searches the first 5,000 blobs only)",
    )
    args = parser.parse_args()
    sizes: list[int] = [200, 2000] if args.quick else args.sizes
    repeats = 1 if args.quick else args.repeats
    if repeats < 1:
        parser.error("--repeats must be at least 1")
    logging.getLogger("shared").setLevel(logging.ERROR)  # the watchdog warns of each ending
    print(
        f"maintenance_scale ({now_stamp()}, {machine()}): {', '.join(f'{s:,}' for s in sizes)} "
        f"retained jobs ({OPEN} open), {repeats} repeat(s), a fresh Azurite per size; data's "
        f"now {NOW:%Y-%m-%d %H:%M} UTC"
    )
    began = time.perf_counter()
    results = []
    with work_folder("inferbus-maintenance-scale-") as work:
        for size in sizes:
            results.append(measure_size(work, size, repeats, args.stock_azurite))
    print_table(results)
    print_details(results)
    print_targets(results)
    print(
        "\nlocal limit: Azurite on this machine, reached through a counting proxy; operation "
        "counts are exact (the app's own requests), seconds are local and grow with the "
        "stored blobs for every operation (Azurite's per-operation cost, above)."
    )
    print(f"finished {now_stamp()} after {time.perf_counter() - began:.0f} s, {machine()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
