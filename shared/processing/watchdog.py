"""The job watchdog: a job that can no longer end by itself is ended.

A job normally ends in the processor, or through the dead-letter reconciler when its
message is dead-lettered. A job can still be left behind: its message was lost to a
purge, a deferred message vanished before its ledger entry was written, the broker
dropped an expired message without dead-lettering it, a producer's job was recorded and
its send failed. A timer (``JobWatchdogSchedule``) ends such jobs:

- past its deadline by more than ``JobWatchdogGraceSeconds``: ``expired``, error
  ``deadline_exceeded``;
- without a deadline and unchanged for ``JobWatchdogStaleSeconds`` (beyond the request
  queues' message time to live, so no live message can end it): ``failed``, error
  ``stale_job``;

each announced with ``InferenceFailed``. Before that, a job whose message seems lost
(``accepted``, or ``running`` with its lock long gone, and unchanged for
``JobResend__afterSeconds``, its deadline still ahead) is sent again from its record, at
most ``JobResend__maxAttempts`` times (``processing.resends``); the count of each job's
resends is kept in the checkpoint until the job finishes. The grace period (never below
``MaxLockRenewalSeconds``) lets a model call that started before the deadline finish,
and a job written within the grace period is someone's current work: it is not even
read. The ending itself is a compare-and-swap whose change re-checks both rules on the
fresh document, so a processor that moves the job meanwhile wins.

Finding candidates costs what is open, never what is retained: the job index
(``job_index``: tags written with each job) names every open job with its last change,
one call per 5,000 open jobs, however many finished jobs are kept. A job is read when it
has been unchanged for the grace period and is not yet remembered; a job found unfinished
is remembered with the time it becomes due in a checkpoint document
(``<LedgerContainer>/watchdog/checkpoint.json``), so it is read again only then; a job
that leaves the open set (ended, deleted, or gone into a Global Batch submission) is
forgotten. The checkpoint is written as the run goes (every ``SAVE_EVERY`` reads, and
when a run fails) and a run stops by itself when its time is up
(``JobWatchdogMaxRunSeconds``), so a run cut short leaves its progress and the next one
continues. A first run, or one after the checkpoint was lost, reads the open jobs once.
Timer triggers run as a singleton, so the checkpoint has one writer.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from shared.clock import Clock, MonotonicClock, utc_now
from shared.contracts import Job, JobStatus
from shared.documents import JsonDocuments
from shared.job_index import JobIndex, in_a_global_batch, job_ids
from shared.jobs import JobRepository, Versioned
from shared.processing.endings import DEADLINE_EXCEEDED, STALE_JOB, Ending, JobEndings
from shared.processing.resends import JobResender, resend_due_at

log = logging.getLogger(__name__)

CHECKPOINT = "watchdog/checkpoint.json"
SETTLEMENT = "ended by the job watchdog"
# Reads between two checkpoint writes: a run cut short repeats at most this many.
SAVE_EVERY = 100


@dataclass(frozen=True)
class WatchdogPolicy:
    grace: timedelta
    stale: timedelta
    # How long one run may read before it saves and leaves the rest to the next run.
    max_run: timedelta = timedelta(minutes=4)


def due_at(job: Job, policy: WatchdogPolicy) -> datetime:
    """When ``job``, still unfinished, can no longer end by itself."""
    touched = job.updated_at + policy.grace
    if job.deadline is not None:
        return max(job.deadline + policy.grace, touched)
    return max(job.updated_at + policy.stale, touched)


def ending_for(job: Job, policy: WatchdogPolicy) -> Ending:
    if job.deadline is not None:
        why = (
            f"not finished by its deadline {job.deadline.isoformat()}: it was still "
            f"{job.status.value} (last changed {job.updated_at.isoformat()})"
        )
        return Ending(JobStatus.EXPIRED, DEADLINE_EXCEEDED, why, SETTLEMENT)
    why = (
        f"{job.status.value} without a change for {int(policy.stale.total_seconds())}s "
        "and no message left that could end it"
    )
    return Ending(JobStatus.FAILED, STALE_JOB, why, SETTLEMENT)


class WatchOutcome(StrEnum):
    """What one run of the watchdog found of one job blob (``WatchReport.outcomes``)."""

    NOT_A_JOB = "not-a-job"
    FINISHED = "finished"
    IN_A_BATCH = "in-a-batch"
    LEFT_ALONE = "left-alone"
    ENDED = "ended"
    ANNOUNCE_FAILED = "announce-failed"
    ANNOUNCED_AGAIN = "announced-again"
    WATCHING = "watching"
    RESENT = "resent"
    RESEND_FAILED = "resend-failed"


# The outcomes a run logs at WARNING: it changed a job, or failed to tell of it.
NOTEWORTHY = (WatchOutcome.ENDED, WatchOutcome.ANNOUNCE_FAILED, WatchOutcome.RESENT)


@dataclass
class WatchReport:
    # Open jobs the index named, jobs read, and whether the run ended before its time.
    open: int = 0
    read: int = 0
    finished: bool = True
    outcomes: Counter[WatchOutcome] = field(default_factory=Counter)


@dataclass
class Checkpoint:
    """What one run leaves the next: each remembered job's due time, the jobs whose end
    is still to be announced, and each job's resends so far."""

    pending: dict[str, datetime] = field(default_factory=dict)
    unannounced: list[str] = field(default_factory=list)
    resent: dict[str, int] = field(default_factory=dict)

    def forget_all_but(self, open_names: set[str]) -> None:
        """Forget the jobs no longer open (ended, deleted, or in a Global Batch)."""
        self.pending = {n: when for n, when in self.pending.items() if n in open_names}
        self.resent = {n: count for n, count in self.resent.items() if n in open_names}


class JobWatchdog:
    def __init__(
        self,
        *,
        index: JobIndex,
        documents: JsonDocuments,
        checkpoint_container: str,
        jobs: JobRepository,
        endings: JobEndings,
        policy: WatchdogPolicy,
        clock: Clock = utc_now,
        resender: JobResender | None = None,
        elapsed: MonotonicClock = time.monotonic,
    ) -> None:
        self._resender = resender
        self._index = index
        self._documents = documents
        self._checkpoints = checkpoint_container
        self._elapsed = elapsed
        self._jobs = jobs
        self._endings = endings
        self._policy = policy
        self._clock = clock

    def watch(self) -> WatchReport:
        started = self._elapsed()
        now = self._clock()
        horizon = now - self._policy.grace
        checkpoint = self._load_checkpoint()
        report = WatchReport()
        checkpoint.unannounced = [
            name for name in checkpoint.unannounced if not self._announce_again(name, report)
        ]
        open_jobs = self._index.open_jobs()
        report.open = len(open_jobs)
        checkpoint.forget_all_but({name for name, _ in open_jobs})
        # Jobs never read first, then the longest due: a run cut short by its time (say,
        # resends failing while the broker is away) still gets to every job in turn.
        never = datetime.min.replace(tzinfo=now.tzinfo)
        to_read = sorted(
            (
                name
                for name, changed in open_jobs
                if changed <= horizon and checkpoint.pending.get(name, now) <= now
            ),
            key=lambda name: (checkpoint.pending.get(name, never), name),
        )
        try:
            for count, name in enumerate(to_read, start=1):
                if self._elapsed() - started > self._policy.max_run.total_seconds():
                    report.finished = False
                    log.warning(
                        "job watchdog: out of time after %d of %d jobs; the next run continues",
                        count - 1,
                        len(to_read),
                    )
                    break
                self._watch_one(name, now, checkpoint, report)
                if count % SAVE_EVERY == 0:
                    self._save_checkpoint(checkpoint)
        finally:
            # Also after a failure (storage gone mid-run): what was done is not redone.
            self._save_checkpoint(checkpoint)
        if any(report.outcomes.get(o) for o in NOTEWORTHY):
            log.warning("job watchdog: %s", {str(o): n for o, n in report.outcomes.items()})
        return report

    def _watch_one(
        self, name: str, now: datetime, checkpoint: Checkpoint, report: WatchReport
    ) -> None:
        report.read += 1
        outcome, still_due_at = self._examine(name, now, checkpoint.resent)
        report.outcomes[outcome] += 1
        if outcome is WatchOutcome.ANNOUNCE_FAILED:
            checkpoint.unannounced.append(name)
        if still_due_at is None:
            checkpoint.pending.pop(name, None)
            checkpoint.resent.pop(name, None)
        else:
            checkpoint.pending[name] = still_due_at

    def _announce_again(self, name: str, report: WatchReport) -> bool:
        """Announce a job this watchdog ended when announcing failed; True once done."""
        ids = job_ids(name)
        job = self._jobs.find(*ids) if ids else None
        if job is None or job.settlement != SETTLEMENT:
            return True
        try:
            self._endings.announce(job)
        except Exception:
            log.warning("announcing the end of job %s failed again", job.id, exc_info=True)
            return False
        report.outcomes[WatchOutcome.ANNOUNCED_AGAIN] += 1
        return True

    def _examine(
        self, name: str, now: datetime, resent: dict[str, int]
    ) -> tuple[WatchOutcome, datetime | None]:
        """What became of the job in blob ``name``, and when to look again (None: never);
        ``resent`` counts each job's resends (updated here)."""
        ids = job_ids(name)
        if ids is None:
            return WatchOutcome.NOT_A_JOB, None
        current = self._jobs.load(*ids)
        if current is None or current.job.status.is_terminal:
            return WatchOutcome.FINISHED, None
        if in_a_global_batch(current.job):
            # Its submission ends it; a later write brings it back.
            return WatchOutcome.IN_A_BATCH, None
        when = due_at(current.job, self._policy)
        if when > now:
            return self._resend_or_watch(name, current, now, when, resent)
        ended = self._endings.end(
            current,
            ending_for(current.job, self._policy),
            lambda fresh: due_at(fresh, self._policy) <= self._clock(),
        )
        if ended is None:
            # Finished or moved meanwhile: the next write brings it back if it is not over.
            return WatchOutcome.LEFT_ALONE, None
        try:
            self._endings.announce(ended)
        except Exception:
            log.warning("job %s ended; announcing it failed", ended.id, exc_info=True)
            return WatchOutcome.ANNOUNCE_FAILED, None
        log.warning("job %s ended %s (%s)", ended.id, ended.status.value, ended.error)
        return WatchOutcome.ENDED, None

    def _resend_or_watch(
        self,
        name: str,
        current: Versioned,
        now: datetime,
        ending_due: datetime,
        resent: dict[str, int],
    ) -> tuple[WatchOutcome, datetime]:
        """A job not due to end yet: resent when its message seems lost and resends are
        left, else watched until it is due to end or to be resent."""
        resender = self._resender
        attempts = resent.get(name, 0)
        if resender is None or attempts >= resender.policy.max_attempts:
            return WatchOutcome.WATCHING, ending_due
        resend_due = resend_due_at(current.job, resender.policy)
        if resend_due is None:
            return WatchOutcome.WATCHING, ending_due
        if resend_due > now:
            return WatchOutcome.WATCHING, min(ending_due, resend_due)
        if not resender.resend(current, attempts + 1):
            return WatchOutcome.RESEND_FAILED, now  # the broker did not take it: again next run
        resent[name] = attempts + 1
        return WatchOutcome.RESENT, min(ending_due, now + resender.policy.after)

    def _load_checkpoint(self) -> Checkpoint:
        """The last run's checkpoint (one written before the job index had a ``through``
        time too, which nothing needs now)."""
        found = self._documents.load(self._checkpoints, CHECKPOINT)
        if found is None:
            return Checkpoint()
        document = found[0]
        pending = document.get("pending") or {}
        resent = document.get("resent") or {}
        return Checkpoint(
            {str(k): datetime.fromisoformat(str(v)) for k, v in pending.items()},
            [str(name) for name in document.get("unannounced") or []],
            {str(k): int(v) for k, v in resent.items()},
        )

    def _save_checkpoint(self, checkpoint: Checkpoint) -> None:
        document = {
            "pending": {
                name: when.isoformat() for name, when in sorted(checkpoint.pending.items())
            },
            "unannounced": sorted(set(checkpoint.unannounced)),
            "resent": dict(sorted(checkpoint.resent.items())),
        }
        self._documents.put(self._checkpoints, CHECKPOINT, document)
