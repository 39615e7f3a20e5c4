"""Concluding a submission: each member's job gets what the service answered for it.

Answers are looked up by ``custom_id`` in the copies of the output and error files kept
in our storage (so a crash after the copy needs nothing more from the service), and every
job change is a compare-and-swap that leaves a job already terminal as it is: a request
its caller cancelled meanwhile stays cancelled. The ends, by what the service said:

- an answer: the alias's task makes the result of it, costed at the alias's batch prices,
  stored in the job (``completed``) and announced; an answer that breaks the task's
  schema is a failed line;
- the content filter stopped the prompt or the answer: a ``refused`` result, announced;
- the line failed: sent through the queue lane (``GlobalBatch__failedLines=queue``), or
  the job fails with the service's error (``fail``);
- no answer, because the batch expired: submitted again in a later file, up to
  ``GlobalBatch__maxResubmissions`` times, then the job expires (``batch_expired``);
- no answer, because the batch was cancelled: the job is cancelled (``batch_cancelled``);
- the batch failed as a whole: the job fails (``batch_failed``) with the batch's errors;
- the enqueued-token quota never let it in (its line alone passes the quota, or the quota
  stayed full past its deadline or ``GlobalBatch__quotaWaitLimitSeconds``): the job fails
  ``batch_quota_exceeded`` with why.

A repeated conclusion (a crash before the submission was closed) announces completed
members again: announcements have deterministic ids, and a consumer drops the repeat.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any, Literal

from shared import telemetry
from shared.accounting.cost import request_cost
from shared.accounting.ledger import Answer
from shared.accounting.spending import TenantSpending
from shared.clock import Clock, utc_now
from shared.contracts import (
    BatchMembership,
    Job,
    JobError,
    JobStatus,
    ProcessingMode,
)
from shared.errors import Conflict, InvalidModelOutput, NotFound
from shared.events.announcements import Announcer, result_announcement
from shared.global_batch.files import Answered, LineFailed, NotAnswered, Refused, answer
from shared.global_batch.quota import quota_exceeded
from shared.global_batch.records import MemberFacts, Submission
from shared.global_batch.store import BatchRecords
from shared.inference.catalog import ModelCard, ModelCatalog
from shared.jobs import JobRepository, Versioned, transition
from shared.messaging import MessageSender, request_envelope
from shared.processing.endings import Ending, JobEndings
from shared.results import TaskResult, completed_result, refused_result
from shared.tracing import continue_or_start

log = logging.getLogger(__name__)

BATCH_SETTLEMENT = "global_batch"
BATCH_FAILED = "batch_failed"
BATCH_EXPIRED = "batch_expired"
BATCH_CANCELLED = "batch_cancelled"
BATCH_LINE_FAILED = "batch_line_failed"
NO_LONGER_SERVED = "unknown_model"
# Between the request id and the submission id in the message id of a requeued line.
REQUEUE_MARK = ":requeue:"


@dataclass(frozen=True)
class ConclusionPolicy:
    failed_lines: Literal["queue", "fail"]
    max_resubmissions: int
    api_base_url: str | None = None


@dataclass(frozen=True)
class Concluded:
    """What became of one member (an outcome name) and the tokens its answer used."""

    outcome: str
    input_tokens: int = 0
    output_tokens: int = 0
    finished: bool = True  # False: it waits for a later file (keep its staged record)


class Conclusion:
    def __init__(
        self,
        *,
        records: BatchRecords,
        jobs: JobRepository,
        endings: JobEndings,
        announcer: Announcer,
        requeue: MessageSender,
        policy: ConclusionPolicy,
        catalog: ModelCatalog,
        spending: TenantSpending | None = None,
        clock: Clock = utc_now,
    ) -> None:
        self._catalog = catalog
        self._spending = spending
        self._records = records
        self._jobs = jobs
        self._endings = endings
        self._announcer = announcer
        self._requeue = requeue
        self._policy = policy
        self._clock = clock

    def conclude(
        self,
        submission: Submission,
        member: MemberFacts,
        line: dict[str, Any] | None,
    ) -> Concluded:
        request_id = member.request.request_id
        current = self._jobs.load(submission.tenant_id, request_id)
        if current is None:
            log.warning("batch member %s has no job (retired?); skipped", request_id)
            return Concluded("no_job")
        job = current.job
        if job.status.is_terminal:
            return self._ended_before(submission, job, member)
        if submission.remote_status == "failed":
            quota = quota_exceeded(submission)
            if quota is not None:  # never accepted for the quota: its own code, its reason
                return self._end(current, member, JobStatus.FAILED, quota.code, quota.message)
            why = "; ".join(f"{e.code}: {e.message}" for e in submission.errors) or "no reason"
            return self._end(current, member, JobStatus.FAILED, BATCH_FAILED,
                             f"the batch {submission.batch_id} failed: {why}")  # fmt: skip
        meaning = answer(line, member.characters) if line is not None else None
        if meaning is None or isinstance(meaning, NotAnswered):
            return self._unanswered(submission, current, member)
        card = self._catalog.card(member.request.model)
        if card is None:
            why = f"model '{member.request.model}' is no longer served here"
            return self._end(current, member, JobStatus.FAILED, NO_LONGER_SERVED, why)
        if isinstance(meaning, Answered):
            try:
                result = card.task.result(meaning.answer)
            except InvalidModelOutput as invalid:
                meaning = LineFailed(invalid.code, str(invalid))
            else:
                return self._complete(current, member, card, (result, meaning))
        if isinstance(meaning, LineFailed):
            if submission.cancel_requested:  # the tenant gave up on the rest
                return self._unanswered(submission, current, member)
            return self._line_failed(current, member, meaning, submission)
        return self._complete(current, member, card, meaning)

    # --- the ends ----------------------------------------------------------------------

    def _complete(
        self,
        current: Versioned,
        member: MemberFacts,
        card: ModelCard,
        meaning: tuple[TaskResult, Answered] | Refused,
    ) -> Concluded:
        request = member.request
        task = card.task.name
        completed_at = self._clock().isoformat()
        if isinstance(meaning, Refused):
            document = refused_result(
                request, task, meaning.categories, meaning.reason, completed_at
            )
        else:
            result, answered = meaning
            answer = answered.answer
            cost = request_cost(answer.usage, card.prices, ProcessingMode.BATCH)
            document = completed_result(
                request, task, result, answer.usage, answer.finish_reason, completed_at, cost=cost
            )
        try:
            completed = self._jobs.advance(
                current,
                lambda job: transition(
                    job, JobStatus.COMPLETED, self._clock,
                    result=document, settlement=BATCH_SETTLEMENT,
                ),
            )  # fmt: skip
        except (Conflict, NotFound):
            return Concluded("ended_before")
        if self._spending is not None:  # the answer kept: its tenant's usage, once
            job = completed.job
            self._spending.record(job.tenant_id, job.created_at, Answer.of(job))
        self._announce_result(completed.job, member)
        usage = document.usage
        telemetry.record_batch_answer(
            model=request.model,
            tenant=request.tenant_id,
            outcome=document.outcome,
            input_tokens=usage.input_tokens if usage else None,
            output_tokens=usage.output_tokens if usage else None,
        )
        if document.cost is not None:
            telemetry.record_cost(
                model=request.model, tenant=request.tenant_id, mode=ProcessingMode.BATCH.value,
                amount=float(document.cost.amount), currency=document.cost.currency,
            )  # fmt: skip
        return Concluded(
            document.outcome,
            usage.input_tokens if usage else 0,
            usage.output_tokens if usage else 0,
        )

    def _line_failed(
        self,
        current: Versioned,
        member: MemberFacts,
        failure: LineFailed,
        submission: Submission,
    ) -> Concluded:
        message = f"the service could not answer it: {failure.code}: {failure.message}"
        if self._policy.failed_lines == "fail":
            return self._end(current, member, JobStatus.FAILED, BATCH_LINE_FAILED, message)
        error = JobError(code=BATCH_LINE_FAILED, message=message)
        job = current.job
        handed_over = job.status is JobStatus.ACCEPTED and job.mode is ProcessingMode.QUEUE
        if not handed_over:  # else an earlier conclusion did, and died before sending
            try:
                self._jobs.advance(
                    current,
                    lambda job: transition(
                        job, JobStatus.ACCEPTED, self._clock,
                        mode=ProcessingMode.QUEUE, last_error=error, settlement="requeued",
                    ),
                )  # fmt: skip
            except (Conflict, NotFound):
                return Concluded("ended_before")
        staged = self._records.pending(submission.deployment, member.request.tenant_id,
                                       member.request.request_id)  # fmt: skip
        if staged is None:
            lost = "its staged line was gone when it had to go through the queue lane"
            return self._end(current, member, JobStatus.FAILED, BATCH_FAILED, lost)
        request = staged.request.model_copy(update={"mode": ProcessingMode.QUEUE})
        trace = continue_or_start(
            member.properties.get("traceparent"), member.properties.get("tracestate")
        )
        envelope = request_envelope(
            request,
            correlation_id=member.correlation_id,
            trace=trace,
            now=self._clock(),
            source=current.job.source,
        )
        # Its own message id: the request id was the intake message's, and the queue's
        # duplicate detection would drop a second message with it within its window.
        self._requeue.send(
            dataclasses.replace(
                envelope, message_id=f"{request.request_id}{REQUEUE_MARK}{submission.id}"
            )
        )
        telemetry.record_batch_answer(
            model=request.model, tenant=request.tenant_id, outcome="requeued",
            input_tokens=None, output_tokens=None,
        )  # fmt: skip
        return Concluded("requeued")

    def _unanswered(
        self, submission: Submission, current: Versioned, member: MemberFacts
    ) -> Concluded:
        if submission.cancel_requested or submission.remote_status == "cancelled":
            return self._end(current, member, JobStatus.CANCELLED, BATCH_CANCELLED,
                             f"its batch {submission.batch_id} was cancelled")  # fmt: skip
        job, membership = current.job, current.job.batch
        if job.status is JobStatus.ACCEPTED and membership and membership.submission_id is None:
            # An earlier conclusion of this submission resubmitted it (the job says how
            # often) and died before it was closed: finish that, count nothing twice.
            return self._resubmitted(submission, current, member, membership.resubmissions)
        if member.resubmissions >= self._policy.max_resubmissions:
            why = (
                f"its batch {submission.batch_id} ended {submission.remote_status} without "
                f"answering it, {member.resubmissions + 1} times"
            )
            return self._end(current, member, JobStatus.EXPIRED, BATCH_EXPIRED, why)
        again = member.resubmissions + 1
        membership = BatchMembership(deployment=submission.deployment, resubmissions=again)
        try:
            self._jobs.advance(
                current,
                lambda job: transition(
                    job, JobStatus.ACCEPTED, self._clock, batch=membership,
                    settlement="resubmitted",
                ),
            )  # fmt: skip
        except (Conflict, NotFound):
            return Concluded("ended_before")
        return self._resubmitted(submission, current, member, again)

    def _resubmitted(
        self, submission: Submission, current: Versioned, member: MemberFacts, times: int
    ) -> Concluded:
        """The staged line stays (a later file carries it), counting its resubmissions as
        the job does: the job is written first, so it is the count that holds."""
        job = current.job
        staged = self._records.pending(submission.deployment, job.tenant_id, job.id)
        if staged is None:
            lost = "its staged line was gone when its batch had to be submitted again"
            return self._end(current, member, JobStatus.FAILED, BATCH_FAILED, lost)
        if staged.resubmissions != times:
            self._records.restage(staged.model_copy(update={"resubmissions": times}))
        return Concluded("resubmitted", finished=False)

    def _end(
        self,
        current: Versioned,
        member: MemberFacts,
        status: JobStatus,
        code: str,
        message: str,
    ) -> Concluded:
        ended = self._endings.end(current, Ending(status, code, message, BATCH_SETTLEMENT))
        if ended is None:
            return Concluded("ended_before")
        self._endings.announce(ended, member.properties)
        telemetry.record_batch_answer(
            model=ended.model, tenant=ended.tenant_id, outcome=status.value,
            input_tokens=None, output_tokens=None,
        )  # fmt: skip
        return Concluded(status.value)

    def _ended_before(self, submission: Submission, job: Job, member: MemberFacts) -> Concluded:
        """A job already terminal: when this submission completed it (a run that died
        before closing), announce it again; anything else ended it, and stays."""
        ours = job.batch is not None and job.batch.submission_id == submission.id
        completed_here = job.status is JobStatus.COMPLETED and job.settlement == BATCH_SETTLEMENT
        if completed_here and ours and job.result is not None:
            self._announce_result(job, member)
            usage = job.result.usage
            if usage is None:
                return Concluded(job.result.outcome)
            return Concluded(job.result.outcome, usage.input_tokens, usage.output_tokens)
        return Concluded("ended_before")

    def _announce_result(self, job: Job, member: MemberFacts) -> None:
        self._announcer.announce(
            result_announcement(member.request, job, member.properties, self._policy.api_base_url)
        )
