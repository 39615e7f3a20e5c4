"""The control plane: the one submitter of Global Batch jobs, driven by a timer.

Each run (``GlobalBatchSchedule``; Functions runs a timer on one instance at a time)
first moves every open submission as far as it can go, then plans new ones:

    planned --upload--> uploaded --create--> submitted --poll...--> ended --conclude--> closed

- plan: a tenant's staged requests for one deployment are due once
  ``GlobalBatch__submitAtLines`` of them wait or the oldest has waited
  ``GlobalBatch__submitAfterSeconds``; they are packed into files within the service's
  limits (``files.pack``), one submission per file;
- upload: the JSONL file, named after the submission (a retried upload finds the first);
  a one-line file whose line alone passes the enqueued-token quota ends at once instead;
- create: the batch over that file (a retried create finds the first), recorded against
  the tenant in the ledger; then every member's job shows its batch (``running``);
- poll: at most every ``GlobalBatch__pollSeconds``; a batch refused for the enqueued-token
  quota is created again after a doubling wait, its requests untouched, until its members'
  deadline or ``GlobalBatch__quotaWaitLimitSeconds`` (then they fail
  ``batch_quota_exceeded``: ``quota``); a final batch has its output and error files
  copied to our storage before anything reads them;
- conclude: ``conclusion`` gives each member its end; the staged records go, and the
  service's files are deleted (our copies stay).

Every step is safe to repeat: a run that dies anywhere is finished by the next, and no
request is submitted twice or lost (``tests/integration/test_global_batch_crashes.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from shared import telemetry
from shared.clock import Clock, utc_now
from shared.errors import (
    ConcurrencyConflict,
    InferbusError,
    NotFound,
    PermanentError,
)
from shared.global_batch.conclusion import Conclusion
from shared.global_batch.files import answer_lines
from shared.global_batch.membership import mark_members
from shared.global_batch.planning import Planner, PlanningPolicy
from shared.global_batch.ports import BatchService, RemoteBatch
from shared.global_batch.quota import (
    BATCH_QUOTA_EXCEEDED,
    QuotaPolicy,
    after_refusal,
    ending_status,
    never_fits,
)
from shared.global_batch.records import (
    Counts,
    MemberFacts,
    RecordedError,
    Submission,
    SubmissionState,
    ledger_entry,
)
from shared.global_batch.store import BatchRecords, concurrently
from shared.jobs import JobRepository

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ControlPolicy:
    planning: PlanningPolicy  # how requests are packed into files, and when one goes out
    output_expiry_seconds: int
    quota_retry: timedelta
    quota_retry_max: timedelta
    poll_interval: timedelta
    run_budget: timedelta = timedelta(minutes=4)
    # The longest a submission waits for the enqueued-token quota after its first refusal
    # (GlobalBatch__quotaWaitLimitSeconds; its members' earliest deadline may end it first).
    quota_wait_limit: timedelta = timedelta(days=1)
    # Members marked or concluded per step: each step's progress is saved, so a run that
    # stops (its time is up, or it dies) repeats at most this many members' work.
    chunk: int = 1000


@dataclass
class RunReport:
    """What one run did (logged; tests and the benchmark read it)."""

    planned: list[str] = field(default_factory=list)
    advanced: dict[str, str] = field(default_factory=dict)  # submission -> state reached
    closed: list[str] = field(default_factory=list)


# The service cancels a batch only before it finishes (finalizing and later: refused).
CANCELLABLE = frozenset({"validating", "in_progress"})

# A step returns the submission changed (saved), and whether to go on with the next step.
Step = tuple[Submission, bool] | None


class GlobalBatchControlPlane:
    def __init__(
        self,
        *,
        records: BatchRecords,
        service: BatchService,
        jobs: JobRepository,
        conclusion: Conclusion,
        policy: ControlPolicy,
        clock: Clock = utc_now,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._records = records
        self._service = service
        self._jobs = jobs
        self._conclusion = conclusion
        self._policy = policy
        self._planner = Planner(records, policy.planning, clock)
        self._quota = QuotaPolicy(
            policy.quota_retry, policy.quota_retry_max, policy.quota_wait_limit
        )
        self._clock = clock
        self._monotonic = monotonic
        self._stop_at = 0.0
        # Read once per run, not per step: members' facts, and a final batch's answers.
        self._members: dict[str, dict[str, MemberFacts]] = {}
        self._answers: dict[str, dict[str, dict[str, Any]]] = {}

    def run(self) -> RunReport:
        """One run: open submissions first, then new ones; no step starts after
        ``GlobalBatch__runSeconds`` (each saves its progress, so the next run goes on)."""
        report = RunReport()
        self._stop_at = self._monotonic() + self._policy.run_budget.total_seconds()
        self._members.clear()
        self._answers.clear()
        busy: set[str] = set()
        for submission_id in self._records.open_ids():
            members = self._advance(submission_id, report)
            busy.update(members)
        planned = self._planner.plan(busy, self._in_time)
        report.planned.extend(planned)
        for submission_id in planned:
            self._advance(submission_id, report)
        if report.planned or report.closed:
            log.info(
                "global batch run: planned %d, closed %d, open %s",
                len(report.planned), len(report.closed), report.advanced,
            )  # fmt: skip
        return report

    # --- the steps ---------------------------------------------------------------------

    def _advance(self, submission_id: str, report: RunReport) -> list[str]:
        """Move one submission on until it waits or closes; its members while open."""
        loaded = self._records.submission(submission_id)
        if loaded is None:
            self._records.unmark(submission_id)
            return []
        submission, etag = loaded
        steps = {
            SubmissionState.PLANNED: self._upload,
            SubmissionState.UPLOADED: self._create,
            SubmissionState.SUBMITTED: self._track,
            SubmissionState.ENDED: self._conclude,
        }
        try:
            while submission.state is not SubmissionState.CLOSED and self._in_time():
                outcome = steps[submission.state](submission)
                if outcome is None:
                    break
                changed, go_on = outcome
                changed = changed.model_copy(update={"updated_at": self._clock()})
                etag = self._records.save(changed, etag)
                ended = SubmissionState.ENDED
                if changed.state is ended and submission.state is not ended:
                    _report_ending(changed)  # once: after the save that recorded it
                submission = changed
                if not go_on:
                    break
        except ConcurrencyConflict:
            log.info("submission %s changed meanwhile; the next run goes on", submission_id)
        except (PermanentError, NotFound) as error:
            if submission.state is SubmissionState.ENDED:
                log.error("submission %s cannot be concluded: %s", submission_id, error)
            elif self._failed(submission, etag, error):
                return self._advance(submission_id, report)  # conclude it now
        except InferbusError as error:
            log.warning("submission %s waits: %s", submission_id, error)
        report.advanced[submission_id] = submission.state.value
        if submission.state is SubmissionState.CLOSED:
            self._records.unmark(submission_id)
            report.closed.append(submission_id)
            return []
        return list(self._members_of(submission))

    def _failed(self, submission: Submission, etag: str, error: InferbusError) -> bool:
        """A step the service refused for good (or a record that is gone): the submission
        ends ``failed`` with the reason, and concluding fails its members with it, rather
        than trying again every run for ever."""
        log.error(
            "Global Batch submission %s ended failed (%s): %s",
            submission.id, submission.state.value, error,
        )  # fmt: skip
        failed = submission.model_copy(
            update={
                "state": SubmissionState.ENDED,
                "remote_status": "failed",
                "errors": [RecordedError(code=error.code, message=str(error))],
                "updated_at": self._clock(),
            }
        )
        try:
            self._records.save(failed, etag)
        except InferbusError as unsaved:
            log.warning("submission %s: recording its failure failed: %s", submission.id, unsaved)
            return False
        telemetry.count_batch_ended("failed", submission.deployment)
        return True

    def _upload(self, submission: Submission) -> Step:
        if submission.cancel_requested:
            return self._cancelled_before_submission(submission)
        too_large = never_fits(submission, self._policy.planning.enqueued_tokens)
        if too_large is not None:  # refused for ever by the service: end it now
            update = {"state": SubmissionState.ENDED, "remote_status": "failed"}
            return submission.model_copy(update={**update, "errors": [too_large]}), True
        file_id = self._service.find_file(submission.filename, submission.created_at)
        if file_id is None:
            content = self._records.kept_file(submission.id, "input")
            if content is None:
                raise PermanentError(f"submission {submission.id} has lost its input file")
            file_id = self._service.upload(
                submission.filename, content, self._policy.output_expiry_seconds
            )
        return submission.model_copy(
            update={"state": SubmissionState.UPLOADED, "file_id": file_id}
        ), True

    def _create(self, submission: Submission) -> Step:
        now = self._clock()
        assert submission.file_id is not None
        refused = frozenset(submission.refused_batches)
        # A batch an earlier run created (and died, or lost a race with a cancelling
        # caller, before recording it) is recorded, and cancelled from there if need be.
        batch = self._service.find_batch(submission.file_id, refused, submission.created_at)
        if batch is None and submission.cancel_requested:
            return self._cancelled_before_submission(submission)
        if batch is None and submission.retry_at is not None and now < submission.retry_at:
            return None
        if batch is None:
            if self._service.file_status(submission.file_id) != "processed":
                return None  # the service is still reading the file: the next run
            batch = self._service.create_batch(
                submission.file_id,
                self._policy.output_expiry_seconds,
                {"inferbus_submission": submission.id, "tenant": submission.tenant_id},
            )
        log.info(
            "submission %s is batch %s (%d requests)",
            submission.id, batch.id, submission.requests,
        )  # fmt: skip
        submitted = _observed(
            submission.model_copy(
                update={
                    "state": SubmissionState.SUBMITTED,
                    "batch_id": batch.id,
                    "submitted_at": submission.submitted_at or now,
                    "retry_at": None,
                    "marked": 0,
                }
            ),
            batch,
            now,
        )
        self._records.record_in_ledger(ledger_entry(submitted))
        return submitted, True

    def _track(self, submission: Submission) -> Step:
        if submission.marked < submission.requests:
            members = list(self._members_of(submission))
            chunk = members[submission.marked : submission.marked + self._policy.chunk]
            mark_members(self._jobs, submission, chunk, self._clock)
            return submission.model_copy(update={"marked": submission.marked + len(chunk)}), True
        assert submission.batch_id is not None
        now = self._clock()
        if submission.cancel_requested and submission.remote_status in CANCELLABLE:
            try:
                batch = self._service.cancel_batch(submission.batch_id)
                return _observed(submission, batch, now), True
            except InferbusError as refused:  # finishing already: its status says how
                log.info("batch %s was not cancelled: %s", submission.batch_id, refused)
        polled = submission.last_polled_at
        if polled is not None and now - polled < self._policy.poll_interval:
            return None
        batch = self._service.get_batch(submission.batch_id)
        observed = _observed(submission, batch, now)
        if not batch.is_final:
            return observed, False
        if batch.refused_for_quota:
            waiting = after_refusal(observed, batch, now, self._quota)
            return waiting, waiting.state is SubmissionState.ENDED
        self._keep_files(submission, batch)
        return observed.model_copy(update={"state": SubmissionState.ENDED}), True

    def _conclude(self, submission: Submission) -> Step:
        """Conclude the next chunk of members; close the submission after the last."""
        lines, facts = self._answers_of(submission), self._members_of(submission)
        start = submission.concluded
        chunk = list(facts)[start : start + self._policy.chunk]
        concluded = concurrently(
            lambda rid: self._conclusion.conclude(submission, facts[rid], lines.get(rid)), chunk
        )
        finished = [rid for rid, c in zip(chunk, concluded, strict=True) if c.finished]
        self._records.unstage(submission.deployment, submission.tenant_id, finished)
        outcomes = dict(submission.outcomes)
        for member in concluded:
            outcomes[member.outcome] = outcomes.get(member.outcome, 0) + 1
        progressed = submission.model_copy(
            update={
                "concluded": start + len(chunk),
                "outcomes": outcomes,
                "input_tokens": submission.input_tokens + sum(c.input_tokens for c in concluded),
                "output_tokens": submission.output_tokens + sum(c.output_tokens for c in concluded),
            }
        )
        if progressed.concluded < submission.requests:
            return progressed, True
        if progressed.batch_id is not None:  # else never submitted: nothing was spent
            self._records.record_in_ledger(ledger_entry(progressed))
        self._delete_service_files(progressed)
        log.info("submission %s closed: %s", submission.id, outcomes)
        return progressed.model_copy(
            update={"state": SubmissionState.CLOSED, "closed_at": self._clock()}
        ), True

    def _members_of(self, submission: Submission) -> dict[str, MemberFacts]:
        """The members' facts by request id, in the order they were planned."""
        if submission.id not in self._members:
            self._members[submission.id] = self._records.kept_members(submission.id)
        return self._members[submission.id]

    def _answers_of(self, submission: Submission) -> dict[str, dict[str, Any]]:
        if submission.id not in self._answers:
            self._answers[submission.id] = answer_lines(
                self._records.kept_file(submission.id, "output"),
                self._records.kept_file(submission.id, "errors"),
            )
        return self._answers[submission.id]

    def _in_time(self) -> bool:
        return self._monotonic() < self._stop_at

    # --- pieces of the steps -------------------------------------------------------------

    def _keep_files(self, submission: Submission, batch: RemoteBatch) -> None:
        """Copy the service's output and error files to our storage before anything reads
        them: the service deletes them after GlobalBatch__outputExpiryDays."""
        for kind, file_id in (("output", batch.output_file_id), ("errors", batch.error_file_id)):
            if file_id:
                self._records.keep_file(submission.id, kind, self._service.download(file_id))

    def _cancelled_before_submission(self, submission: Submission) -> Step:
        """Cancelled before any batch existed: every member ends cancelled now."""
        update = {"remote_status": "cancelled", "state": SubmissionState.ENDED}
        return submission.model_copy(update=update), True

    def _delete_service_files(self, submission: Submission) -> None:
        for file_id in (submission.file_id, submission.output_file_id, submission.error_file_id):
            if file_id is None:
                continue
            try:
                self._service.delete_file(file_id)
            except InferbusError as error:
                log.warning("could not delete %s from the service: %s", file_id, error)


def _report_ending(submission: Submission) -> None:
    """The metric (the Bicep alert reads it) and, for an expired or failed batch (or one
    the enqueued-token quota ended), the ERROR log of a submission that just ended."""
    status = ending_status(submission)
    telemetry.count_batch_ended(status, submission.deployment)
    if status in ("expired", "failed", BATCH_QUOTA_EXCEEDED):
        counts = submission.counts
        log.error(
            "Global Batch %s ended %s (submission %s, tenant %s): %d of %d answered; %s",
            submission.batch_id, status, submission.id, submission.tenant_id,
            counts.completed, counts.total, [e.code for e in submission.errors],
        )  # fmt: skip


def _observed(submission: Submission, batch: RemoteBatch, now: datetime) -> Submission:
    """``submission`` with what the service just said of its batch."""
    return submission.model_copy(
        update={
            "remote_status": batch.status,
            "counts": Counts(total=batch.total, completed=batch.completed, failed=batch.failed),
            "errors": [RecordedError(code=e.code, message=e.message) for e in batch.errors],
            "last_polled_at": now,
            "output_file_id": batch.output_file_id,
            "error_file_id": batch.error_file_id,
        }
    )
