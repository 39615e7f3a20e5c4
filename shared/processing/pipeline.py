"""The pipeline for one request message, settled per the outcome table (docs/processing.md).

Every message is settled exactly once by this module: the rows of the table are methods
here, except those that end in a scheduled retry or in giving up, which ``failures``
carries out. Nothing one message does can touch another: errors are contained per
message, and anything unexpected abandons only that message (the broker's max delivery
count is the backstop for a bug that repeats).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from shared import telemetry
from shared.clock import Clock, utc_now
from shared.contracts import (
    ClaimCheck,
    Job,
    JobStatus,
    ProcessingMode,
    RequestMessage,
)
from shared.errors import (
    CapacityExhausted,
    Conflict,
    InvalidInput,
    InvalidModelOutput,
    InvalidPayload,
    PermanentError,
    PlatformUnavailable,
    TransientError,
)
from shared.events.announcements import Announcer, result_announcement
from shared.inference.served import ServedModels
from shared.intake.claim_checks import ClaimChecks
from shared.intake.request_rules import RequestRules
from shared.jobs import JobRepository, Versioned, held_by_a_delivery, transition
from shared.messaging import MessageSender
from shared.processing.adopted_jobs import INVALID_REQUEST, JobAdoption
from shared.processing.deferral import DeferredEntry
from shared.processing.failures import (
    ORDERED_RETRY_MAX_WAIT_SECONDS,
    Failures,
    clip,
    platform_call,
)
from shared.processing.inbound import InboundMessage
from shared.processing.ports import BatchStaging, DeferralLedger, Settler
from shared.processing.request_parsing import parse_request
from shared.processing.settlement import DeadLetterReason, NotedSettler, Outcome
from shared.results import run_model

log = logging.getLogger(__name__)

PREREQUISITE_RECHECK = timedelta(seconds=30)


@dataclass(frozen=True)
class ProcessingPolicy:
    queue_name: str
    aliases: tuple[str, ...]  # the models served here (the catalog's aliases)
    max_retries: int
    retry_base_seconds: float
    retry_max_seconds: float
    api_base_url: str | None = None  # announcements link to ``<this>/api/v1/requests/<id>/result``
    # The ordered lane (a session queue): a transient failure is retried in place, keeping
    # the document's order, instead of by a scheduled copy (``Failures.retry``).
    ordered: bool = False
    lane: str = "standard"  # the lane's name (shared.lanes.Lane), a metric dimension
    retry_jitter_floor: float = 0.0  # RetryJitterFloor (processing.backoff)
    # An answer that breaks its task's schema is tried again this many times, then the
    # job fails invalid_model_output (InvalidOutputRetries).
    invalid_output_retries: int = 2
    faults_allowed: bool = False  # LocalModelFaults: parameters.simulate is honoured
    # MaxLockRenewalSeconds: a running job changed more recently may be another delivery's.
    max_lock_renewal_seconds: float = 600.0
    # The ordered lane's longest wait in place a try (``failures.ordered_retry_max_wait``).
    ordered_retry_max_wait_seconds: float = ORDERED_RETRY_MAX_WAIT_SECONDS


class MessageProcessor:
    def __init__(
        self,
        *,
        policy: ProcessingPolicy,
        jobs: JobRepository,
        claim_checks: ClaimChecks,
        models: ServedModels,
        announcer: Announcer,
        retry_sender: MessageSender,
        ledger: DeferralLedger,
        rules: RequestRules,
        clock: Clock = utc_now,
        uniform: Callable[[float, float], float] = random.uniform,
        sleep: Callable[[float], None] = time.sleep,
        stager: BatchStaging | None = None,
    ) -> None:
        self._policy = policy
        self._stager = stager
        self._jobs = jobs
        self._claim_checks = claim_checks
        self._models = models
        self._announcer = announcer
        self._ledger = ledger
        self._clock = clock
        self._failures = Failures(
            max_retries=policy.max_retries,
            retry_base_seconds=policy.retry_base_seconds,
            retry_max_seconds=policy.retry_max_seconds,
            jobs=jobs,
            announcer=announcer,
            retry_sender=retry_sender,
            clock=clock,
            uniform=uniform,
            ordered=policy.ordered,
            sleep=sleep,
            jitter_floor=policy.retry_jitter_floor,
            deadline_of=rules.message_deadline,
            ordered_max_wait_seconds=policy.ordered_retry_max_wait_seconds,
        )
        self._adoption = JobAdoption(
            jobs=jobs,
            rules=rules,
            claim_checks=claim_checks,
            failures=self._failures,
            clock=clock,
            sleep=sleep,
        )

    def process(
        self, message: InboundMessage, settler: Settler, invocation: str | None = None
    ) -> Outcome:
        """Process and settle one message; returns the outcome (for logs and reports).

        One ``process <queue>`` span per message, a child of the trace the message carries
        (``Diagnostic-Id``, else ``traceparent``) and linked to the invocation that received
        it (``invocation``, a traceparent): a batch holds messages of many traces.
        """
        properties = message.application_properties
        carried = properties.get("Diagnostic-Id") or properties.get("traceparent")
        attributes = {
            "messaging.system": "servicebus",
            "messaging.operation.type": "process",
            "messaging.destination.name": self._policy.queue_name,
            "messaging.message.id": message.message_id,
            "messaging.message.delivery_count": message.delivery_count,
            "inferbus.retry_count": message.retry_count,
        }
        name = f"{telemetry.SPAN_PROCESS} {self._policy.queue_name}"
        tenant = properties.get("tenant")
        with (
            telemetry.detached(),
            telemetry.span(
                name,
                kind=telemetry.CONSUMER,
                parent=carried if isinstance(carried, str) else None,
                links=[invocation] if invocation else (),
                attributes=attributes,
            ) as span,
            telemetry.log_dimensions(
                message_id=message.message_id,
                correlation_id=message.correlation_id,
                tenant_id=tenant if isinstance(tenant, str) else None,
            ),
        ):
            noted = NotedSettler(settler)
            outcome = self._settle_safely(message, noted)
            span.set_attribute("inferbus.outcome", outcome)
            if noted.dead_letter_reason:
                span.set_attribute("inferbus.dead_letter_reason", noted.dead_letter_reason)
            if outcome in (Outcome.DEAD_LETTERED, Outcome.ABANDONED):
                telemetry.fail(span, outcome)
        telemetry.count_settled(self._policy.lane, outcome)
        return outcome

    def _settle_safely(self, message: InboundMessage, settler: NotedSettler) -> Outcome:
        try:
            return self._process(message, settler)
        except Exception:
            log.exception("unexpected failure on message %s; abandoning it", message.message_id)
            try:
                settler.abandon(message)
            except Exception:
                log.exception("abandon failed for %s; its lock will lapse", message.message_id)
            log.info("message %s -> abandoned", message.message_id)
            return Outcome.ABANDONED

    def _process(self, message: InboundMessage, settler: NotedSettler) -> Outcome:
        try:
            request = parse_request(message, self._policy.aliases)
        except InvalidPayload as error:
            outcome = self._dead_letter_invalid(message, settler, str(error))
            log.info("message %s -> %s", message.message_id, outcome)
            return outcome
        with telemetry.log_dimensions(request_id=request.request_id, tenant_id=request.tenant_id):
            try:
                outcome = self._route(message, request, settler)
            except TransientError as error:
                outcome = self._dependency_down(message, request, settler, error)
            log.info("message %s -> %s", message.message_id, outcome)
            return outcome

    def _dependency_down(
        self,
        message: InboundMessage,
        request: RequestMessage,
        settler: NotedSettler,
        error: TransientError,
    ) -> Outcome:
        """Storage or the broker failed outside the model run (the job lookup, the first
        job write, the ledger, a prerequisite): the transient row of the outcome table, so
        an outage is waited out with backoff instead of burning the broker's delivery count
        by abandoning at once. A failure that came while settling is re-raised: the message
        may be settled already, and only abandoning (or the lock lapsing) is safe then."""
        if settler.settling:
            raise error
        log.warning("message %s: a dependency failed (%s); retrying", message.message_id, error)
        return self._failures.wait_out_outage(message, request, settler, error)

    def _route(self, message: InboundMessage, request: RequestMessage, settler: Settler) -> Outcome:
        """The row of the outcome table a readable request falls into."""
        current = self._jobs.load(request.tenant_id, request.request_id)
        if current is None:
            try:
                current = self._adoption.adopt(message, request)
            except InvalidInput as error:
                return self._adoption.refuse(message, request, settler, error)
        job = current.job
        if job.status.is_terminal:
            return self._ended_already(message, request, settler, job)
        now = self._clock()
        if self._another_delivery_runs(message, job, now):
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
            if prerequisite is JobStatus.COMPLETED:
                return self._run(message, request, settler, current)
            if prerequisite is not None and prerequisite.is_terminal:
                return self._prerequisite_failed(message, request, settler, prerequisite)
            return self._defer(message, request, settler, now + PREREQUISITE_RECHECK, "after")
        return self._run(message, request, settler, current)

    def _another_delivery_runs(self, message: InboundMessage, job: Job, now: datetime) -> bool:
        """A first delivery that meets its job ``running`` and recently changed is a
        second message for work another delivery is doing (the job watchdog resends a
        job whose message seemed lost, with the same message id): running it too would
        pay for the model twice. A redelivery or a retry copy is the same work coming back
        (a lost lock, an abandon), and one that meets a job whose lock is long gone runs."""
        if message.attempted_before:
            return False
        if not held_by_a_delivery(job, now, self._policy.max_lock_renewal_seconds):
            return False
        log.info("message %s: job %s is running in another delivery", message.message_id, job.id)
        return True

    # --- the rows of the table ------------------------------------------------------------

    def _dead_letter_invalid(self, message: InboundMessage, settler: Settler, why: str) -> Outcome:
        tenant = message.application_properties.get("tenant")
        if isinstance(tenant, str) and message.message_id:
            self._failures.fail_job(tenant, message.message_id, "invalid_payload", why)
        settler.dead_letter(message, DeadLetterReason.INVALID_PAYLOAD, clip(why))
        return Outcome.DEAD_LETTERED

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
            try:
                self._announce_result(message, request, job)
            except TransientError as error:
                return self._failures.retry(message, request, settler, error, completed=True)
        settler.complete(message)
        return Outcome.DUPLICATE

    def _expire(
        self, message: InboundMessage, request: RequestMessage, settler: Settler, current: Versioned
    ) -> Outcome:
        try:
            self._jobs.advance(
                current, lambda job: transition(job, JobStatus.EXPIRED, settlement="completed")
            )
            self._failures.announce_end(
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
            # A session's messages are received by session, not by sequence number: a
            # deferred one could not be swept. Intake never sends such a message.
            why = f"a request with a document_id (session) cannot wait for {reason}"
            return self._failures.give_up(
                message, request, settler, DeadLetterReason.INVALID_PAYLOAD,
                INVALID_REQUEST, why,
            )  # fmt: skip
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

    def _prerequisite_failed(
        self,
        message: InboundMessage,
        request: RequestMessage,
        settler: Settler,
        prerequisite: JobStatus,
    ) -> Outcome:
        """An ordered step whose predecessor ended without a result can never run."""
        why = f"prerequisite {request.after} ended {prerequisite.value}"
        self._failures.fail_job(request.tenant_id, request.request_id, "prerequisite_failed", why)
        settler.dead_letter(message, DeadLetterReason.PERMANENT_FAILURE, why)
        return Outcome.DEAD_LETTERED

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
        try:
            if self._stager is None:
                raise PermanentError("this deployment has no Global Batch lane")
            with platform_call():
                content, media_type = self._read_input(request)
                self._stager.stage(
                    request, job.correlation_id, content, media_type,
                    message.application_properties,
                )  # fmt: skip
                now = self._jobs.find(request.tenant_id, request.request_id)
                if now is not None and now.status.is_terminal:
                    self._stager.withdraw(request)
                    settler.complete(message)
                    return Outcome.DUPLICATE
        except PlatformUnavailable as outage:
            return self._failures.wait_out_outage(message, request, settler, outage.cause)
        except PermanentError as error:
            return self._failures.give_up_on(message, request, settler, error)
        settler.complete(message)
        return Outcome.STAGED

    def _run(
        self,
        message: InboundMessage,
        request: RequestMessage,
        settler: Settler,
        current: Versioned,
    ) -> Outcome:
        """Success costs two job writes, each with the ETag of the step before: running,
        then completed with the result in it (durable before it is announced)."""
        try:
            running = self._jobs.advance(
                current,
                lambda job: transition(
                    job, JobStatus.RUNNING, attempts=job.attempts + 1, settlement=None
                ),
            )
        except Conflict:
            settler.complete(message)  # cancelled or finished meanwhile
            return Outcome.DUPLICATE
        try:
            with platform_call():
                content, media_type = self._read_input(request)
            document = run_model(
                request,
                content,
                media_type,
                self._models[request.model],
                self._failures.tries_before(message),
                self._clock,
                faults_allowed=self._policy.faults_allowed,
            )
            with telemetry.span(telemetry.SPAN_STORE_RESULT), platform_call():
                completed = self._jobs.advance(
                    running,
                    lambda job: transition(
                        job,
                        JobStatus.COMPLETED,
                        result=document,
                        settlement="completed",
                    ),
                )
        except Conflict:
            settler.complete(message)  # cancelled while the model ran: nothing to tell
            return Outcome.DUPLICATE
        except PlatformUnavailable as outage:
            log.warning("message %s: storage failed (%s); retrying", message.message_id, outage)
            return self._failures.wait_out_outage(message, request, settler, outage.cause)
        except PermanentError as error:
            return self._failures.give_up_on(message, request, settler, error)
        except InvalidModelOutput as error:
            return self._invalid_output(message, request, settler, error)
        except CapacityExhausted as error:
            return self._failures.wait_for_capacity(message, request, settler, error)
        except TransientError as error:
            return self._failures.retry(message, request, settler, error)
        try:
            self._announce_result(message, request, completed.job)
        except TransientError as error:
            return self._failures.retry(message, request, settler, error, completed=True)
        settler.complete(message)
        return Outcome(document.outcome)

    def _invalid_output(
        self,
        message: InboundMessage,
        request: RequestMessage,
        settler: Settler,
        error: InvalidModelOutput,
    ) -> Outcome:
        """An answer that breaks the task's schema: tried again like a transient failure
        (models are stochastic) while InvalidOutputRetries allows, then the job fails
        ``invalid_model_output`` with the validation message."""
        if self._failures.tries_before(message) < self._policy.invalid_output_retries:
            return self._failures.retry(message, request, settler, error)
        return self._failures.give_up(
            message, request, settler, DeadLetterReason.PERMANENT_FAILURE, error.code, str(error)
        )

    def _announce_result(self, message: InboundMessage, request: RequestMessage, job: Job) -> None:
        self._announcer.announce(
            result_announcement(
                request, job, message.application_properties, self._policy.api_base_url
            )
        )

    def _read_input(self, request: RequestMessage) -> tuple[bytes, str]:
        if isinstance(request.input, ClaimCheck):
            content = self._claim_checks.open(request.input, request.tenant_id)
            return content, request.input.media_type
        return request.input.text.encode("utf-8"), "text/plain; charset=utf-8"
