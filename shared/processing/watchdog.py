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

Finding candidates without reading every job on every run: a job is read when its blob
was written since the last run (Blob listing returns each blob's last-modified time, so
the listing itself reads no job), and a job found unfinished is remembered with the time
it becomes due in a checkpoint document (``<LedgerContainer>/watchdog/checkpoint.json``),
so it is read again only then. Finished jobs are read once after their last write and
never again. The listing is one call per 5,000 jobs; intake writes nothing extra (an index
written at intake would add a storage operation to every accepted request). Timer
triggers run as a singleton, so the checkpoint has one writer.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from shared.clock import Clock, utc_now
from shared.contracts import Job, JobStatus, ProcessingMode
from shared.documents import DocumentListing, JsonDocuments
from shared.jobs import JobRepository, Versioned
from shared.processing.endings import DEADLINE_EXCEEDED, STALE_JOB, Ending, JobEndings
from shared.processing.resends import JobResender, resend_due_at

log = logging.getLogger(__name__)

CHECKPOINT = "watchdog/checkpoint.json"
SETTLEMENT = "ended by the job watchdog"


@dataclass(frozen=True)
class WatchdogPolicy:
    grace: timedelta
    stale: timedelta


def in_a_global_batch(job: Job) -> bool:
    """A job in a submission of the Global Batch lane: that submission's control plane
    ends it (answered, resubmitted, failed, expired or cancelled), whatever its batch and
    the enqueued-token quota take, which can be days; so the watchdog leaves it alone."""
    membership = job.batch
    return (
        job.mode is ProcessingMode.BATCH
        and job.status is JobStatus.RUNNING
        and membership is not None
        and membership.submission_id is not None
    )


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
    read: int = 0
    outcomes: Counter[WatchOutcome] = field(default_factory=Counter)


class JobWatchdog:
    def __init__(
        self,
        *,
        listing: DocumentListing,
        documents: JsonDocuments,
        jobs_container: str,
        checkpoint_container: str,
        jobs: JobRepository,
        endings: JobEndings,
        policy: WatchdogPolicy,
        clock: Clock = utc_now,
        resender: JobResender | None = None,
    ) -> None:
        self._resender = resender
        self._listing = listing
        self._documents = documents
        self._jobs_container = jobs_container
        self._checkpoints = checkpoint_container
        self._jobs = jobs
        self._endings = endings
        self._policy = policy
        self._clock = clock

    def watch(self) -> WatchReport:
        now = self._clock()
        horizon = now - self._policy.grace
        through, pending, unannounced, resent = self._load_checkpoint()
        report = WatchReport()
        unannounced = [name for name in unannounced if not self._announce_again(name, report)]
        written = [
            name
            for name, modified in self._listing.list_modified(self._jobs_container, "")
            if (through is None or modified > through) and modified <= horizon
        ]
        due = [name for name, when in pending.items() if when <= now]
        for name in sorted(set(written) | set(due)):
            report.read += 1
            outcome, still_due_at = self._examine(name, now, resent)
            report.outcomes[outcome] += 1
            if outcome is WatchOutcome.ANNOUNCE_FAILED:
                unannounced.append(name)
            if still_due_at is None:
                pending.pop(name, None)
                resent.pop(name, None)
            else:
                pending[name] = still_due_at
        self._save_checkpoint(horizon, pending, unannounced, resent)
        if any(report.outcomes.get(o) for o in NOTEWORTHY):
            log.warning("job watchdog: %s", {str(o): n for o, n in report.outcomes.items()})
        return report

    @staticmethod
    def _ids(name: str) -> tuple[str, str] | None:
        tenant, _, file_name = name.rpartition("/")
        if not tenant or not file_name.endswith(".json"):
            return None
        return tenant, file_name.removesuffix(".json")

    def _announce_again(self, name: str, report: WatchReport) -> bool:
        """Announce a job this watchdog ended when announcing failed; True once done."""
        ids = self._ids(name)
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
        ids = self._ids(name)
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

    def _load_checkpoint(
        self,
    ) -> tuple[datetime | None, dict[str, datetime], list[str], dict[str, int]]:
        found = self._documents.load(self._checkpoints, CHECKPOINT)
        if found is None:
            return None, {}, [], {}
        document = found[0]
        through = document.get("through")
        pending = document.get("pending") or {}
        resent = document.get("resent") or {}
        return (
            datetime.fromisoformat(through) if isinstance(through, str) else None,
            {str(k): datetime.fromisoformat(str(v)) for k, v in pending.items()},
            [str(name) for name in document.get("unannounced") or []],
            {str(k): int(v) for k, v in resent.items()},
        )

    def _save_checkpoint(
        self,
        through: datetime,
        pending: dict[str, datetime],
        unannounced: list[str],
        resent: dict[str, int],
    ) -> None:
        document = {
            "through": through.isoformat(),
            "pending": {name: when.isoformat() for name, when in sorted(pending.items())},
            "unannounced": sorted(set(unannounced)),
            "resent": dict(sorted(resent.items())),
        }
        self._documents.put(self._checkpoints, CHECKPOINT, document)
