"""Intake: turn a submission into a stored input, a job and a request message.

Every door (HTTP API, webhook, Event Grid trigger, blob trigger) ends here, so the
guarantees hold for all of them:

- everything cheap is validated before anything is written;
- a 202 (or any "accepted") is only ever given for work whose message the broker took:
  the input is stored, the message sent, and only then the job recorded, so a job
  exists only for queued work. When the send fails nothing was accepted: no job, the
  idempotency key is released and the caller is told to retry (503). When recording
  the job fails after the send, the processor records it from the message
  (``processing.adopted_jobs``);
- the same Idempotency-Key and body give the same job and never a second message.

Storage round trips are most of a request's cost: two on this path (the input, the
job), three with an Idempotency-Key (its marker), none of them a read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from shared import telemetry
from shared.accounting.cost import estimated_spend
from shared.accounting.spending import UNANSWERED_BATCH_SECONDS, TenantSpending
from shared.clock import Clock, utc_now
from shared.contracts import (
    ClaimCheck,
    Door,
    InlineText,
    Job,
    JobStatus,
    Priority,
    ProcessingMode,
    input_characters,
)
from shared.errors import (
    BudgetExceeded,
    FieldError,
    InferbusError,
    InvalidInput,
    ServiceUnavailable,
    TransientError,
)
from shared.inference import reads_as_text
from shared.intake.backpressure import LaneBacklogGates, WaitAdmission
from shared.intake.claim_checks import ClaimChecks
from shared.intake.idempotency import Claimed, IdempotencyGuard, Replay
from shared.intake.ports import TenantPacing
from shared.intake.releases import ScheduledReleases
from shared.intake.request_rules import RequestRules
from shared.jobs import JobRepository, rejected
from shared.lanes import Lane, lane_for
from shared.messaging import (
    PACED,
    MessageSender,
    OutgoingMessage,
    request_envelope,
    request_message_of,
)
from shared.request_ids import new_request_id
from shared.tracing import TraceContext, continue_or_start

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InlineContent:
    """Bytes to store as the claim check (inline text or an uploaded document)."""

    data: bytes
    media_type: str


@dataclass(frozen=True)
class BlobReference:
    """A caller-named blob in the app's own storage account."""

    blob_uri: str
    sha256: str | None = None


@dataclass(frozen=True)
class Submission:
    """One unit of work, normalised from whichever door it came through."""

    tenant_id: str
    model: str
    content: InlineContent | BlobReference | ClaimCheck
    parameters: dict[str, Any] = field(default_factory=dict)
    priority: Priority = Priority.NORMAL
    not_before: datetime | None = None
    deadline_seconds: int | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    after: str | None = None
    document_id: str | None = None  # orders the steps of one document (lanes.Lane.ORDERED)
    mode: ProcessingMode | None = None  # None: RequestRules.mode_for decides
    # ``mode: auto``: the batch lane when the queue lane's expected wait passes the deadline.
    batch_when_late: bool = False
    source: Door = Door.HTTP
    idempotency_key: str | None = None
    request_hash: str | None = None
    trace: TraceContext = field(default_factory=lambda: continue_or_start(None))
    # The trace the work arrived with, when it is not the invocation's own (an event's
    # traceparent): the intake span continues it.
    parent: str | None = None


@dataclass(frozen=True)
class Accepted:
    job: Job
    replayed: bool = False


class Intake:
    def __init__(
        self,
        *,
        policy: RequestRules,
        jobs: JobRepository,
        claim_checks: ClaimChecks,
        idempotency: IdempotencyGuard,
        sender: MessageSender,
        backlog: LaneBacklogGates,
        admission: WaitAdmission | None = None,
        pacing: TenantPacing | None = None,
        releases: ScheduledReleases | None = None,
        longest_pacing: float = 600.0,
        spending: TenantSpending | None = None,
        announce_end: Callable[[Job], None] | None = None,
        clock: Clock = utc_now,
    ) -> None:
        self._policy = policy
        self._jobs = jobs
        self._claim_checks = claim_checks
        self._idempotency = idempotency
        self._sender = sender
        self._backlog = backlog
        self._admission = admission or WaitAdmission(backlog, None)
        self._pacing = pacing
        self._releases = releases
        self._longest_pacing = longest_pacing
        self._spending = spending
        self._announce_end = announce_end
        self._clock = clock

    @property
    def rules(self) -> RequestRules:
        """The rules every request obeys (the queue door checks them too)."""
        return self._policy

    def submit(self, submission: Submission) -> Accepted:
        """Accept the work durably or raise; see the module docstring for the guarantees.

        One ``intake`` span covers it (a child of the invocation's context, or of the
        trace the work arrived with: ``Submission.parent``); its context is what the
        request message carries on, and its trace id is the job's correlation id.
        """
        attributes = {
            "inferbus.door": submission.source,
            "inferbus.tenant": submission.tenant_id,
            "gen_ai.request.model": submission.model,
            "inferbus.priority": str(submission.priority),
        }
        with telemetry.span(
            telemetry.SPAN_INTAKE, parent=submission.parent, attributes=attributes
        ) as span:
            try:
                accepted = self._submit(submission, telemetry.current_trace(submission.trace))
            except InferbusError as error:
                telemetry.count_refused(submission.source, error.code)
                raise
            span.set_attribute("inferbus.request_id", accepted.job.id)
            span.set_attribute("inferbus.replayed", accepted.replayed)
        if not accepted.replayed and accepted.job.status is not JobStatus.REJECTED:
            telemetry.count_accepted(submission.source, submission.model, submission.priority)
        return accepted

    def _submit(self, submission: Submission, trace: TraceContext) -> Accepted:
        submission, deadline_seconds = self._validate(submission)
        lane = lane_for(submission.priority, submission.document_id)
        self._backlog.check(lane)
        if submission.mode is ProcessingMode.QUEUE:
            try:
                self._admission.check(
                    lane,
                    submission.model,
                    deadline_seconds,
                    _text_chars(submission),
                    submission.parameters,
                )
            except ServiceUnavailable as late:
                if not self._may_batch(submission):
                    raise
                submission, deadline_seconds = self._to_batch(submission, late)
        claim: Claimed | None = None
        if submission.idempotency_key:
            outcome = self._idempotency.begin(
                submission.tenant_id,
                submission.idempotency_key,
                submission.request_hash or "",
            )
            if isinstance(outcome, Replay):
                return Accepted(outcome.job, True)
            claim = outcome
        request_id = claim.record.request_id if claim else new_request_id(self._clock)
        with telemetry.log_dimensions(
            request_id=request_id, tenant_id=submission.tenant_id, correlation_id=trace.trace_id
        ):
            try:
                queued = self._enqueue(submission, request_id, deadline_seconds, trace)
            except BudgetExceeded as over:
                if submission.source is Door.HTTP:  # the caller is there to be told: 429
                    if claim:
                        self._release_quietly(claim)
                    raise
                return Accepted(self._reject(submission, request_id, trace, over))
            except BaseException:
                if claim:  # nothing was accepted: the key is free for a new attempt
                    self._release_quietly(claim)
                raise
            self._backlog.sent(lane)
            job = self._record(queued)
            log.info(
                "accepted request %s tenant=%s model=%s source=%s",
                request_id,
                submission.tenant_id,
                submission.model,
                submission.source,
            )
        return Accepted(job)

    def _validate(self, submission: Submission) -> tuple[Submission, int | None]:
        """The submission with its parameters typed and normalised and its lane decided
        (what the message and the job carry), and its deadline in seconds; or the rule
        it breaks. A batch-mode request has a deadline only when it asks for one: the
        service takes up to 24 hours, and the job watchdog bounds the wait."""
        rules = self._policy
        rules.check_model(submission.model)
        rules.check_tenant_model(submission.tenant_id, submission.model)
        checked = rules.check_parameters(submission.parameters, submission.model)
        ordered = bool(submission.document_id or submission.after)
        mode = rules.mode_for(submission.mode, submission.model, submission.priority, ordered)
        submission = replace(submission, parameters=checked, mode=mode)
        content = submission.content
        if mode is ProcessingMode.BATCH and isinstance(content, InlineContent):
            rules.check_batch_media_type(content.media_type)
        rules.check_message_size(submission.parameters, submission.metadata)
        deadline_seconds = rules.deadline_for(submission.deadline_seconds, mode)
        rules.check_ordering(submission.document_id, submission.not_before, submission.after)
        if deadline_seconds is not None:
            rules.check_timing(
                submission.not_before, self._clock() + timedelta(seconds=deadline_seconds)
            )
        if isinstance(submission.content, BlobReference):
            self._claim_checks.locate(submission.content.blob_uri, submission.tenant_id)
        if submission.after and self._jobs.find(submission.tenant_id, submission.after) is None:
            raise InvalidInput(
                f"after names request '{submission.after}', which does not exist",
                (FieldError("after", "no such request"),),
            )
        return submission, deadline_seconds

    def _may_batch(self, submission: Submission) -> bool:
        """Whether ``mode: auto`` work can go to the batch lane: its alias has a batch
        deployment and it is part of no order."""
        ordered = bool(submission.document_id or submission.after)
        return (
            submission.batch_when_late
            and not ordered
            and submission.model in self._policy.batch_models
        )

    def _to_batch(
        self, submission: Submission, late: ServiceUnavailable
    ) -> tuple[Submission, int | None]:
        """``mode: auto`` work the queue lane cannot finish in time, as batch-lane work (its
        deadline only the one it asked for, as for any batch request)."""
        rules = self._policy
        if isinstance(submission.content, InlineContent):
            rules.check_batch_media_type(submission.content.media_type)
        log.info("mode auto: to the Global Batch lane (%s)", late)
        batched = replace(submission, mode=ProcessingMode.BATCH)
        return batched, rules.deadline_for(submission.deadline_seconds, ProcessingMode.BATCH)

    def _claim_check(self, submission: Submission, request_id: str) -> ClaimCheck:
        content = submission.content
        if isinstance(content, ClaimCheck):
            return content
        if isinstance(content, BlobReference):
            return self._claim_checks.reference(
                content.blob_uri, submission.tenant_id, content.sha256
            )
        return self._claim_checks.store(
            submission.tenant_id, request_id, content.data, content.media_type
        )

    def _enqueue(
        self,
        submission: Submission,
        request_id: str,
        deadline_seconds: int | None,
        trace: TraceContext,
    ) -> Job:
        """Hold the request's estimate against its tenant's budgets, store the input and
        send the message; the job to record (not yet stored). Nothing is stored for a
        request over budget, and what it held is given back when it is not queued."""
        content = submission.content
        referenced = (
            None
            if isinstance(content, InlineContent)
            else self._claim_check(submission, request_id)
        )
        held = self._hold_budget(submission, request_id, deadline_seconds, referenced)
        try:
            claim_check = referenced or self._claim_check(submission, request_id)
            job = self._new_job(submission, request_id, claim_check, deadline_seconds, trace)
            envelope = request_envelope(
                request_message_of(job),
                correlation_id=job.correlation_id,
                trace=trace,
                now=self._clock(),
                source=job.source,
            )
            release_at = self._release_time(job)
            if release_at is not None:
                properties = {**envelope.application_properties, PACED: True}
                envelope = replace(
                    envelope, scheduled_enqueue_time=release_at, application_properties=properties
                )
            try:
                self._send(job, envelope)
            except TransientError as error:
                raise ServiceUnavailable(
                    "the request could not be queued; nothing was accepted, retry later",
                    retry_after=error.retry_after or 5,
                ) from error
        except BaseException:
            if held is not None and self._spending is not None:
                self._spending.release(submission.tenant_id, request_id, held)
            raise
        return job

    def _hold_budget(
        self,
        submission: Submission,
        request_id: str,
        deadline_seconds: int | None,
        referenced: ClaimCheck | None,
    ) -> datetime | None:
        """Reserve the request's estimated tokens and cost against its tenant's budgets
        (``TenantSpending.reserve``: BudgetExceeded when one would be passed); when it
        was held, or None for a tenant without a budget. The input's length is what is
        known before it is read: an inline text's bytes, a document's size."""
        spending, card = self._spending, self._policy.catalog.card(submission.model)
        if spending is None or card is None or not spending.has_budget(submission.tenant_id):
            return None
        content = submission.content
        if isinstance(content, InlineContent):
            chars = len(content.data)
        else:
            chars = referenced.size if referenced is not None else 0
        mode = submission.mode or ProcessingMode.QUEUE
        estimate = estimated_spend(card, chars, submission.parameters, mode)
        now = self._clock()
        longest = deadline_seconds or UNANSWERED_BATCH_SECONDS
        until = now + timedelta(seconds=longest)
        spending.reserve(submission.tenant_id, request_id, estimate, until)
        return now

    def _send(self, job: Job, envelope: OutgoingMessage) -> None:
        """Send the request's message; one paced for later is kept by ``releases``, which
        may call it back and send it sooner."""
        if envelope.scheduled_enqueue_time is None or self._releases is None:
            self._sender.send(envelope)
            return
        self._releases.schedule(
            envelope,
            tenant=job.tenant_id,
            model=job.model,
            text_chars=input_characters(job.input),
            parameters=job.parameters,
        )

    def _release_time(self, job: Job) -> datetime | None:
        """When the request's message should reach the queue (None: now): a tenant's
        burst is paced into the standard lane (``TenantPacing``), so that it does not
        stand in front of every other tenant's work. Not paced: high priority and the
        ordered lane (their own queues), Global Batch work, a request that waits for
        ``not_before`` or ``after`` anyway, and one whose deadline would come first. None
        waits longer than ``longest_pacing`` (half of JobResend__afterSeconds: the
        watchdog would take a job still ``accepted`` then for one whose message was
        lost)."""
        if self._pacing is None or lane_for(job.priority, job.document_id) is not Lane.STANDARD:
            return None
        if job.mode is not ProcessingMode.QUEUE or job.not_before or job.after:
            return None
        chars = input_characters(job.input)
        delay = self._pacing.release_delay(job.tenant_id, job.model, chars, job.parameters)
        if delay < 1.0:
            return None
        due = self._clock() + timedelta(seconds=min(delay, self._longest_pacing))
        return due if job.deadline is None or due < job.deadline else None

    def _record(self, job: Job) -> Job:
        """Record the job of queued work (exclusive create: no read first).

        The work is accepted once the broker took its message, so a storage failure here
        still answers 202: the processor records the job from the message, and until
        then the status URL answers 404.
        """
        try:
            created = self._jobs.create(job)
        except TransientError:
            log.warning("request %s is queued; its job will be recorded from its message", job.id)
            return job
        if created is None:
            # The processor was quicker and recorded the job from the message, or an
            # earlier attempt with the same Idempotency-Key got this far.
            return self._jobs.get(job.tenant_id, job.id)
        return job

    def _new_job(
        self,
        submission: Submission,
        request_id: str,
        claim_check: ClaimCheck | InlineText | None,
        deadline_seconds: int | None,
        trace: TraceContext,
    ) -> Job:
        now = self._clock()
        deadline = now + timedelta(seconds=deadline_seconds) if deadline_seconds else None
        return Job(
            id=request_id,
            tenant_id=submission.tenant_id,
            model=submission.model,
            priority=submission.priority,
            source=submission.source,
            input=claim_check,
            parameters=submission.parameters,
            metadata=submission.metadata,
            after=submission.after,
            document_id=submission.document_id,
            correlation_id=trace.trace_id,
            created_at=now,
            updated_at=now,
            not_before=submission.not_before,
            deadline=deadline,
            mode=submission.mode or ProcessingMode.QUEUE,
        )

    def _reject(
        self, submission: Submission, request_id: str, trace: TraceContext, over: BudgetExceeded
    ) -> Job:
        """Work that came through an asynchronous door over its tenant's budget: no caller
        waits for an answer, so the request is recorded ``rejected`` with the reason
        ``budget_exceeded`` (its status says so) and announced as ended; nothing is run
        and no input is stored. A job that cannot be recorded is the door's transient
        trouble: the event is delivered again."""
        content = submission.content
        stored = content if isinstance(content, ClaimCheck) else None
        job = self._new_job(submission, request_id, stored, None, trace)
        job = rejected(job, BudgetExceeded.code, str(over), self._clock)
        created = self._jobs.create(job)
        job = job if created is not None else self._jobs.get(job.tenant_id, job.id)
        log.warning("request %s of tenant %s rejected at the %s door: %s",
                    request_id, submission.tenant_id, submission.source, over)  # fmt: skip
        telemetry.count_refused(submission.source, over.code)
        if self._announce_end is not None and created is not None:
            try:
                self._announce_end(job)
            except TransientError:
                log.warning("the rejection of %s is recorded but not announced", request_id)
        return job

    def _release_quietly(self, claim: Claimed) -> None:
        try:
            self._idempotency.release(claim)
        except Exception:
            log.warning("could not release idempotency key for %s", claim.record.request_id)


def _text_chars(submission: Submission) -> int | None:
    """The length of a request's text when it came inline and reads as text, known before
    anything is stored (None for a document referenced or uploaded: its bytes are not its
    text)."""
    content = submission.content
    if isinstance(content, InlineContent) and reads_as_text(content.media_type):
        return len(content.data)
    return None
