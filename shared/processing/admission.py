"""Which row a message falls into before its model runs, and the rows that need none.

``Admission`` reads the message, finds (or adopts) its job and settles the happy rows
that call no model: a duplicate delivery, an expiry, a deferral, a line staged for
Global Batch. A message that may run comes back ``Admitted``: its request, its job moved
to running (one write, with the ETag of the read before) and its input, for
``execution``. Whatever it meets instead it hands, as the exception it is, to the
outcome table (``outcomes``). Storage or the broker failing on the way is an outage
(``outcomes.platform_call``); the model's failures are its own.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta

from shared import telemetry
from shared.clock import Clock, utc_now
from shared.contracts import ClaimCheck, Job, JobStatus, ProcessingMode, RequestMessage
from shared.errors import Conflict, OrderedWaitRefused, PermanentError, PrerequisiteFailed
from shared.events.announcements import Announcer
from shared.intake.claim_checks import ClaimChecks
from shared.jobs import JobRepository, Versioned, held_by_a_delivery, transition
from shared.processing.adopted_jobs import JobAdoption
from shared.processing.execution import announce_result
from shared.processing.fair_turns import FairTurns
from shared.processing.inbound import InboundMessage
from shared.processing.outcomes import OutcomeTable, Unsettled, platform_call
from shared.processing.policy import ProcessingPolicy
from shared.processing.ports import BatchStaging, DeferralLedger, Settler
from shared.processing.request_parsing import parse_request
from shared.processing.settlement import NotedSettler
from shared.processing.values import NO_TURN, Admitted, DeferredEntry, Outcome, Turn

log = logging.getLogger(__name__)

PREREQUISITE_RECHECK = timedelta(seconds=30)


class Admission:
    """Admits one lane's messages to their model, or settles them without it."""

    def __init__(
        self,
        *,
        policy: ProcessingPolicy,
        jobs: JobRepository,
        claim_checks: ClaimChecks,
        announcer: Announcer,
        ledger: DeferralLedger,
        adoption: JobAdoption,
        outcomes: OutcomeTable,
        clock: Clock = utc_now,
        stager: BatchStaging | None = None,
        turns: FairTurns | None = None,
    ) -> None:
        self._policy = policy
        self._jobs = jobs
        self._claim_checks = claim_checks
        self._announcer = announcer
        self._ledger = ledger
        self._adoption = adoption
        self._outcomes = outcomes
        self._clock = clock
        self._stager = stager
        self._turns = turns

    def admit(self, message: InboundMessage, settler: NotedSettler) -> Outcome | Admitted:
        """``Admitted``, or the outcome of a message settled here or by the table."""
        try:
            request = parse_request(message, self._policy.aliases)
        except Exception as error:
            outcome = self._outcomes.settle(Unsettled(message, settler, error))
            log.info("message %s -> %s", message.message_id, outcome)
            return outcome
        with telemetry.log_dimensions(request_id=request.request_id, tenant_id=request.tenant_id):
            turn = self._turn(message, request, settler)
            if isinstance(turn, Outcome):
                return turn
            try:
                admitted = self._route(message, request, settler)
            except Exception as error:
                admitted = self._outcomes.settle(Unsettled(message, settler, error, request))
            if isinstance(admitted, Outcome):
                turn.release()
                log.info("message %s -> %s", message.message_id, admitted)
                return admitted
            return replace(admitted, turn=turn)

    def _turn(
        self, message: InboundMessage, request: RequestMessage, settler: NotedSettler
    ) -> Turn | Outcome:
        """The message's turn among its deployment's tenants (``fair_turns``), or the
        outcome of sending it back for it; a failure to book is no reason to hold it."""
        if self._turns is None:
            return NO_TURN
        try:
            return self._turns.take(message, request, settler)
        except Exception:
            log.warning("message %s: its tenant's turn was not booked", message.message_id,
                        exc_info=True)  # fmt: skip
            return NO_TURN

    def _route(
        self, message: InboundMessage, request: RequestMessage, settler: NotedSettler
    ) -> Outcome | Admitted:
        with platform_call():
            current = self._jobs.load(request.tenant_id, request.request_id)
            if current is None:
                current = self._adoption.adopt(message, request)
            ready = self._ready(message, request, settler, current)
            if isinstance(ready, Outcome):
                return ready
            running = self._jobs.advance(
                ready,
                lambda job: transition(
                    job, JobStatus.RUNNING, self._clock, attempts=job.attempts + 1, settlement=None
                ),
            )
            content, media_type = self._read_input(request)
        return Admitted(request, running, content, media_type)

    def _ready(
        self, message: InboundMessage, request: RequestMessage, settler: Settler, current: Versioned
    ) -> Outcome | Versioned:
        """The job to run, or the outcome of a message that must not run now."""
        job = current.job
        if job.status.is_terminal:
            return self._ended_already(message, request, settler, job)
        now = self._clock()
        # A first delivery that meets its job running and recently changed is a second
        # message for work another delivery is doing (the watchdog resends a job whose
        # message seemed lost, with the same message id): running it too would pay for the
        # model twice. A redelivery or a retry copy is the same work coming back (a lost
        # lock, an abandon), and one that meets a job whose lock is long gone runs.
        renewal = self._policy.max_lock_renewal_seconds
        if not message.attempted_before and held_by_a_delivery(job, now, renewal):
            log.info("message %s: job %s runs in another delivery", message.message_id, job.id)
            settler.complete(message)
            return Outcome.DUPLICATE
        deadline = request.deadline or job.deadline
        if deadline is not None and now >= deadline:
            return self._expire(message, request, settler, current)
        if request.not_before is not None and request.not_before > now:
            return self._defer(message, request, settler, request.not_before, "not_before")
        if request.mode is ProcessingMode.BATCH:
            return self._stage(message, request, settler, job)
        if request.after:
            prerequisite = self._prerequisite(request)
            if prerequisite is None or not prerequisite.is_terminal:
                return self._defer(message, request, settler, now + PREREQUISITE_RECHECK, "after")
            if prerequisite is not JobStatus.COMPLETED:
                why = f"prerequisite {request.after} ended {prerequisite.value}"
                raise PrerequisiteFailed(why)
        return current

    # --- the happy rows that call no model ---------------------------------------------

    def _ended_already(
        self, message: InboundMessage, request: RequestMessage, settler: Settler, job: Job
    ) -> Outcome:
        """A delivery of finished work. When it is a redelivery or a retry copy, a crash or
        a failed publication may have come between storing the result and announcing it,
        so a completed job is announced again (the events' ids are deterministic:
        consumers drop a repeat). A first delivery of another message for the same
        request is a duplicate whose original announces: it is only completed."""
        completed = job.status is JobStatus.COMPLETED and job.result is not None
        if message.attempted_before and completed:
            announce_result(
                self._announcer,
                request,
                job,
                message.application_properties,
                self._policy.api_base_url,
            )
        settler.complete(message)
        return Outcome.DUPLICATE

    def _expire(
        self, message: InboundMessage, request: RequestMessage, settler: Settler, current: Versioned
    ) -> Outcome:
        try:
            self._jobs.advance(
                current,
                lambda job: transition(job, JobStatus.EXPIRED, self._clock, settlement="completed"),
            )
            self._outcomes.announce_end(
                request, "expired", "deadline_exceeded", message.application_properties
            )
        except Conflict:
            pass
        settler.complete(message)
        return Outcome.EXPIRED

    def _defer(
        self,
        message: InboundMessage,
        request: RequestMessage,
        settler: Settler,
        due_at: datetime,
        reason: str,
    ) -> Outcome:
        if self._policy.ordered:
            raise OrderedWaitRefused(
                f"a request with a document_id (session) cannot wait for {reason}"
            )
        if message.sequence_number is None:
            settler.abandon(message)
            return Outcome.ABANDONED
        self._ledger.record(
            DeferredEntry(
                queue=self._policy.queue_name,
                sequence_number=message.sequence_number,
                tenant_id=request.tenant_id,
                request_id=request.request_id,
                due_at=due_at,
                reason=reason,
                recorded_at=self._clock(),
            )
        )
        settler.defer(message)
        return Outcome.DEFERRED

    def _prerequisite(self, request: RequestMessage) -> JobStatus | None:
        """The status of the request named by ``after`` (None while it does not exist)."""
        assert request.after is not None
        prerequisite = self._jobs.find(request.tenant_id, request.after)
        return prerequisite.status if prerequisite else None

    def _stage(
        self, message: InboundMessage, request: RequestMessage, settler: Settler, job: Job
    ) -> Outcome:
        """A batch-mode request joins the Global Batch lane (``global_batch.staging``):
        four storage operations (the job read before, the input, the staged line, the job
        read again), and the message is done. The control plane takes it from there. The
        second read closes a race with its caller: cancelled between the first read and
        the staging, it found no line to take back, so the line is taken back here."""
        if job.batch is not None and job.batch.submission_id is not None:
            settler.complete(message)  # a redelivery of work that went out already
            return Outcome.DUPLICATE
        if self._stager is None:
            raise PermanentError("this deployment has no Global Batch lane")
        content, media_type = self._read_input(request)
        self._stager.stage(
            request, job.correlation_id, content, media_type, message.application_properties
        )
        now = self._jobs.find(request.tenant_id, request.request_id)
        if now is not None and now.status.is_terminal:
            self._stager.withdraw(request)
            settler.complete(message)
            return Outcome.DUPLICATE
        settler.complete(message)
        return Outcome.STAGED

    def _read_input(self, request: RequestMessage) -> tuple[bytes, str]:
        if isinstance(request.input, ClaimCheck):
            content = self._claim_checks.open(request.input, request.tenant_id)
            return content, request.input.media_type
        return request.input.text.encode("utf-8"), "text/plain; charset=utf-8"
