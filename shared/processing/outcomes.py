"""The outcome table (docs/processing.md): every message the happy path could not settle,
settled by one table keyed by the exception it met.

``MessageProcessor`` (``pipeline``) runs the happy path, ``admission`` then
``execution``, which settle what goes as planned (a result, a duplicate, a deferral, an
expiry, a staged line). Whatever else it meets
comes here as the exception it is, and ``OutcomeTable.settle`` carries out the first row
whose exception type matches, most specific first, as a retry middleware decides once
after processing instead of an except-arm per failure in the pipeline. The ordered lane's
variants (a retry waits in place instead of a scheduled copy) are the rows' own, through
``retries.Retries``. Marking the job failed and announcing ``InferenceFailed`` are
best-effort: the dead-letter queue, with its reason and description, is the record that
cannot be lost.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace

from shared.accounting.spending import TenantSpending
from shared.clock import Clock
from shared.contracts import Job, RequestMessage
from shared.errors import (
    BudgetExceeded,
    CapacityExhausted,
    ClaimCheckInvalid,
    Conflict,
    InvalidInput,
    InvalidModelOutput,
    InvalidPayload,
    OrderedWaitRefused,
    PermanentError,
    PlatformUnavailable,
    PrerequisiteFailed,
    ResultNotAnnounced,
    TransientError,
)
from shared.events.announcements import Announcer, announcement_for
from shared.intake.request_rules import TenantNotAllowed
from shared.jobs import JobRepository, fail, rejected
from shared.processing.adopted_jobs import INVALID_REQUEST, job_from_message
from shared.processing.inbound import InboundMessage
from shared.processing.retries import Retries
from shared.processing.settlement import MAX_DESCRIPTION_CHARS, DeadLetterReason, NotedSettler
from shared.processing.values import Outcome

log = logging.getLogger(__name__)


@contextmanager
def platform_call() -> Iterator[None]:
    """Storage or the broker failing here is an outage (``PlatformUnavailable``), told
    apart from the model's own transient failures, which spend the request's retries."""
    try:
        yield
    except (PlatformUnavailable, ResultNotAnnounced):
        raise
    except TransientError as error:
        raise PlatformUnavailable(error) from error


def clip(text: str) -> str:
    """A dead-letter description within the broker's limit."""
    return text if len(text) <= MAX_DESCRIPTION_CHARS else text[: MAX_DESCRIPTION_CHARS - 1] + "…"


@dataclass(frozen=True)
class Unsettled:
    """A message the happy path left unsettled, and why: ``request`` is None for a
    message that is not a readable request."""

    message: InboundMessage
    settler: NotedSettler
    error: Exception
    request: RequestMessage | None = None


@dataclass(frozen=True)
class Row:
    """One row of the table: the exception it catches, the situations of
    docs/processing.md's outcome table it carries out, and how. ``readable``: the row
    needs a readable request (True), a message that is none (False), or either (None)."""

    catches: type[Exception]
    situations: tuple[str, ...]
    carry_out: Callable[[OutcomeTable, Unsettled], Outcome]
    readable: bool | None = True

    def applies(self, unsettled: Unsettled) -> bool:
        readable = unsettled.request is not None
        fits = self.readable is None or self.readable == readable
        return fits and isinstance(unsettled.error, self.catches)


class OutcomeTable:
    """Settles every message the happy path could not, by ``ROWS``."""

    def __init__(
        self,
        *,
        retries: Retries,
        jobs: JobRepository,
        announcer: Announcer,
        clock: Clock,
        invalid_output_retries: int,
        spending: TenantSpending | None = None,
    ) -> None:
        self._retries = retries
        self._jobs = jobs
        self._announcer = announcer
        self._clock = clock
        self._invalid_output_retries = invalid_output_retries
        self._spending = spending

    def settle(self, unsettled: Unsettled) -> Outcome:
        """The first row that applies. A failure after a settlement was attempted, the
        row's own included, is no row's (the message may be settled already, and a retry
        copy would run the request twice): the message is left to its redelivery, quietly
        when its job had ended. Any other failure of a row is unexpected."""
        row = self._row_for(unsettled)
        try:
            return row.carry_out(self, unsettled)
        except Exception as error:
            if row is UNEXPECTED:
                raise
            failed = replace(unsettled, error=error)
            if failed.settler.settling:
                return self._row_for(failed).carry_out(self, failed)
            return self.abandon(failed)

    def _row_for(self, unsettled: Unsettled) -> Row:
        if unsettled.settler.settling:
            return JOB_ENDED_BEFORE if self._job_ended(unsettled) else SETTLEMENT_FAILED
        return next((row for row in ROWS if row.applies(unsettled)), UNEXPECTED)

    # --- the rows ---------------------------------------------------------------------

    def retry_announcement(self, unsettled: Unsettled) -> Outcome:
        """The result is stored; only announcing it failed: a copy that announces again
        (the model never runs twice), until MaxRetries, then dead-lettered while the job
        keeps its result."""
        message, request, error = _parts(unsettled)
        if self._retries.exhausted(message):
            tries = self._retries.tries_before(message) + 1
            why = f"the result is stored; announcing it failed {tries} times: {error}"
            unsettled.settler.dead_letter(message, DeadLetterReason.MAX_RETRIES_EXCEEDED, clip(why))
            return Outcome.DEAD_LETTERED
        return self._retries.schedule(
            message, request, unsettled.settler, _transient(error), completed=True
        )

    def wait_for_capacity(self, unsettled: Unsettled) -> Outcome:
        """The deployment had no capacity within the wait (``inference.capacity``): its
        state, not the request's fault, so the copy keeps ``retry_count``. It comes back
        no later than the deadline, where it ends ``expired``. The ordered lane waits in
        place, in order, as for any failure."""
        if self._retries.in_place:
            return self.retry(unsettled)
        message, request, error = _parts(unsettled)
        return self._retries.capacity_copy(message, request, unsettled.settler, _transient(error))

    def wait_out_outage(self, unsettled: Unsettled) -> Outcome:
        """Storage or the broker, the platform's own dependencies, failed: a copy that
        keeps ``retry_count`` (the model's budget), so a healthy request survives a long
        outage. Past the deadline the message is dead-lettered; the job cannot be read or
        written now, so the dead-letter reconciler ends and announces it once storage is
        back. The ordered lane retries in place as for any failure."""
        message, request, error = _parts(unsettled)
        assert isinstance(error, PlatformUnavailable)
        log.warning("message %s: storage or the broker failed (%s); waiting it out",
                    message.message_id, error)  # fmt: skip
        if self._retries.in_place:
            return self.retry(unsettled)
        outcome = self._retries.outage_copy(message, request, unsettled.settler, error.cause)
        if outcome is not None:
            return outcome
        why = f"storage or the broker stayed unavailable past the deadline; last error: {error}"
        unsettled.settler.dead_letter(message, DeadLetterReason.MAX_RETRIES_EXCEEDED, clip(why))
        return Outcome.DEAD_LETTERED

    def retry_invalid_output(self, unsettled: Unsettled) -> Outcome:
        """An answer that breaks the task's schema: tried again like a transient failure
        (models are stochastic) while InvalidOutputRetries allows, then the job fails
        ``invalid_model_output`` with the validation message."""
        message, _, error = _parts(unsettled)
        if self._retries.tries_before(message) < self._invalid_output_retries:
            return self.retry(unsettled)
        code = error.code if isinstance(error, InvalidModelOutput) else "invalid_model_output"
        return self._give_up(unsettled, DeadLetterReason.PERMANENT_FAILURE, code)

    def retry(self, unsettled: Unsettled) -> Outcome:
        """A transient failure: tried again after a backoff while MaxRetries allows
        (a scheduled copy, or in place in the ordered lane), then the job fails."""
        return self._try_again(unsettled, _transient(unsettled.error))

    def give_up_on_claim_check(self, unsettled: Unsettled) -> Outcome:
        return self._give_up(unsettled, DeadLetterReason.CLAIM_CHECK_INVALID, "claim_check_invalid")

    def dead_letter_prerequisite(self, unsettled: Unsettled) -> Outcome:
        """An ordered step whose predecessor ended without a result can never run."""
        message, request, error = _parts(unsettled)
        self.fail_job(request.tenant_id, request.request_id, PrerequisiteFailed.code, str(error))
        unsettled.settler.dead_letter(message, DeadLetterReason.PERMANENT_FAILURE, str(error))
        return Outcome.DEAD_LETTERED

    def refuse_ordered_wait(self, unsettled: Unsettled) -> Outcome:
        """A session's messages are received by session, not by sequence number: a
        deferred one could not be swept. Intake never sends such a message."""
        return self._give_up(unsettled, DeadLetterReason.INVALID_PAYLOAD, INVALID_REQUEST)

    def give_up(self, unsettled: Unsettled) -> Outcome:
        error = unsettled.error
        code = error.code if isinstance(error, PermanentError) else "permanent"
        return self._give_up(unsettled, DeadLetterReason.PERMANENT_FAILURE, code)

    def dead_letter_unreadable(self, unsettled: Unsettled) -> Outcome:
        """Not a request at all: dead-lettered with the reason; its job, when the message
        names one (a tenant and a message id), is marked failed."""
        message, why = unsettled.message, str(unsettled.error)
        tenant = message.application_properties.get("tenant")
        if isinstance(tenant, str) and message.message_id:
            self.fail_job(tenant, message.message_id, "invalid_payload", why)
        unsettled.settler.dead_letter(message, DeadLetterReason.INVALID_PAYLOAD, clip(why))
        return Outcome.DEAD_LETTERED

    def refuse(self, unsettled: Unsettled) -> Outcome:
        """A producer's message that breaks a door's rule: dead-lettered with the rule and
        the fields, its job recorded as failed so the status API tells the producer too
        (unless the tenant itself is what is wrong: no job is kept for such a tenant)."""
        message, request, error = _parts(unsettled)
        assert isinstance(error, InvalidInput)
        fields = "; ".join(f"{f.field}: {f.message}" for f in error.fields)
        why = f"{error}" + (f" ({fields})" if fields else "")
        if not any(f.field == "tenant_id" for f in error.fields):
            now = self._clock()
            job = job_from_message(request, message, now, request.deadline or now)
            try:
                self._jobs.create(fail(job, INVALID_REQUEST, why, self._clock))
            except Exception:
                log.warning("could not record the failed job of %s", request.request_id)
            self.announce_end(request, "failed", INVALID_REQUEST, message.application_properties)
        reason = (
            DeadLetterReason.TENANT_NOT_ALLOWED
            if isinstance(error, TenantNotAllowed)
            else DeadLetterReason.INVALID_PAYLOAD
        )
        unsettled.settler.dead_letter(message, reason, clip(why))
        return Outcome.DEAD_LETTERED

    def reject_over_budget(self, unsettled: Unsettled) -> Outcome:
        """A producer's message over its tenant's budget: its job is recorded
        ``rejected`` (reason ``budget_exceeded``) and announced, and the message is
        done, as a door rejects such work; nothing ran. When the job cannot be recorded
        now, the message is left to a redelivery, which checks the budget again."""
        message, request, error = _parts(unsettled)
        now = self._clock()
        job = job_from_message(request, message, now, request.deadline)
        try:
            created = self._jobs.create(rejected(job, BudgetExceeded.code, str(error), self._clock))
        except TransientError:
            log.warning("could not record the rejection of %s yet", request.request_id)
            return self.leave_to_redelivery(unsettled)
        log.warning("request %s rejected: %s", request.request_id, error)
        if created is not None:
            self.announce_end(request, "rejected", BudgetExceeded.code,
                              message.application_properties)  # fmt: skip
        unsettled.settler.complete(message)
        return Outcome.REJECTED

    def ended_meanwhile(self, unsettled: Unsettled) -> Outcome:
        """The job was cancelled or finished while this delivery worked on it: there is
        nothing to tell, and the message is done."""
        unsettled.settler.complete(unsettled.message)
        return Outcome.DUPLICATE

    def leave_to_redelivery(self, unsettled: Unsettled) -> Outcome:
        """The job had ended (its result or failure is recorded) and settling its message
        failed, as every message whose lock a broker restart took does: not an error.
        The broker delivers it again when the lock lapses, and that delivery completes
        it as a duplicate; an abandon, when the lock still holds, only hastens that."""
        log.info(
            "message %s: its job had already ended, and settling it failed (%s); "
            "its next delivery completes it as a duplicate",
            unsettled.message.message_id, _first_line(unsettled.error),
        )  # fmt: skip
        return self._abandon_quietly(unsettled)

    def settlement_failed(self, unsettled: Unsettled) -> Outcome:
        """Settling failed while the job is still open (a lock a broker restart took, after
        a retry copy was scheduled, say): the message comes back when its lock lapses and
        is handled again as any redelivery is, so this is one WARNING line, not an error
        with a stack trace."""
        log.warning(
            "message %s: settling it failed (%s); it comes back when its lock lapses",
            unsettled.message.message_id, _first_line(unsettled.error),
        )  # fmt: skip
        return self._abandon_quietly(unsettled)

    def _abandon_quietly(self, unsettled: Unsettled) -> Outcome:
        """An abandon hastens the redelivery while the lock still holds; after a lost lock
        it fails too, which says nothing new."""
        message = unsettled.message
        try:
            unsettled.settler.abandon(message)
        except Exception as error:
            log.debug("message %s: not abandoned (%s)", message.message_id, _first_line(error))
        return Outcome.UNSETTLED

    def abandon(self, unsettled: Unsettled) -> Outcome:
        """Anything unexpected abandons only this message: the broker's max delivery
        count is the backstop for a bug that repeats."""
        message = unsettled.message
        log.error("unexpected failure on message %s; abandoning it", message.message_id,
                  exc_info=unsettled.error)  # fmt: skip
        try:
            unsettled.settler.abandon(message)
        except Exception:
            log.exception("abandon failed for %s; its lock will lapse", message.message_id)
        return Outcome.ABANDONED

    # --- what the rows share ----------------------------------------------------------

    def _job_ended(self, unsettled: Unsettled) -> bool:
        """Whether the message's job has ended (False when it cannot be read: then the
        failure stays unexpected)."""
        request = unsettled.request
        if request is None:
            return False
        try:
            job = self._jobs.find(request.tenant_id, request.request_id)
        except Exception:
            return False
        return job is not None and job.status.is_terminal

    def _try_again(self, unsettled: Unsettled, error: TransientError) -> Outcome:
        message, request, _ = _parts(unsettled)
        retries = self._retries.tries_before(message)
        if self._retries.exhausted(message):
            why = f"gave up after {retries} retries; last error: {error}"
            return self._give_up(
                unsettled, DeadLetterReason.MAX_RETRIES_EXCEEDED, "max_retries_exceeded", why
            )
        return self._retries.schedule(message, request, unsettled.settler, error)

    def _give_up(
        self, unsettled: Unsettled, reason: DeadLetterReason, code: str, why: str | None = None
    ) -> Outcome:
        """A request that can never succeed: its job failed, its message dead-lettered,
        ``InferenceFailed`` announced."""
        message, request, error = _parts(unsettled)
        why = str(error) if why is None else why
        failed = self.fail_job(request.tenant_id, request.request_id, code, why)
        unsettled.settler.dead_letter(message, reason, clip(why))
        if failed:
            self.announce_end(request, "failed", code, message.application_properties)
        return Outcome.DEAD_LETTERED

    def fail_job(self, tenant_id: str, request_id: str, code: str, why: str) -> bool:
        """Mark the job failed; False when it was not (already ended, or storage is
        down). Only a failure marked here is announced: a job that ended otherwise keeps
        its own outcome, and one storage could not reach is ended (and announced) by the
        dead-letter reconciler later."""
        try:
            failed = self._jobs.update(
                tenant_id, request_id, lambda job: fail(job, code, why, settlement="dead-lettered")
            )
        except Exception:
            log.info("job %s not marked failed (%s)", request_id, code, exc_info=True)
            return False
        self.release_budget(failed)
        return True

    def release_budget(self, ended: Job) -> None:
        """A job that ended without an answer gives back what it held of its tenant's
        budget (at the usage ledger's next flush), instead of holding it to its deadline."""
        if self._spending is not None:
            self._spending.release(ended.tenant_id, ended.id, ended.created_at)

    def announce_end(
        self,
        request: RequestMessage,
        outcome: str,
        error_code: str,
        properties: Mapping[str, object] | None = None,
    ) -> None:
        """Failures are announced best-effort: the dead-letter queue is the record."""
        try:
            self._announcer.announce(
                announcement_for(request, outcome, properties=properties, error_code=error_code)
            )
        except Exception:
            log.warning("could not announce %s of %s", outcome, request.request_id, exc_info=True)


def _first_line(error: BaseException) -> str:
    """An error in one line, its type named (a gRPC or SDK error's text runs long)."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


def _parts(unsettled: Unsettled) -> tuple[InboundMessage, RequestMessage, Exception]:
    assert unsettled.request is not None  # the row is for a readable request
    return unsettled.message, unsettled.request, unsettled.error


def _transient(error: Exception) -> TransientError:
    """The error a retry's backoff reads (its Retry-After) and its job notes."""
    if isinstance(error, ResultNotAnnounced | PlatformUnavailable):
        return error.cause
    assert isinstance(error, TransientError)
    return error


RETRIES_LEFT = "transient failure, retries left"
UNEXPECTED = Row(
    Exception,
    ("unexpected exception",),
    OutcomeTable.abandon,
    readable=None,
)
SETTLEMENT_FAILED = Row(
    Exception,
    ("a settlement that failed, its job still open",),
    OutcomeTable.settlement_failed,
    readable=None,
)
JOB_ENDED_BEFORE = Row(
    Exception,
    ("settling the message of a job that had already ended failed (a lock lost to a restart)",),
    OutcomeTable.leave_to_redelivery,
)
# Most specific first: the first row whose exception type matches settles the message.
ROWS: tuple[Row, ...] = (
    Row(
        InvalidPayload,
        ("body not JSON, unknown schema version, schema invalid, unknown model",),
        OutcomeTable.dead_letter_unreadable,
        readable=False,
    ),
    Row(
        ResultNotAnnounced,
        ("the result is stored and announcing it failed",),
        OutcomeTable.retry_announcement,
    ),
    Row(
        CapacityExhausted,
        (
            "no capacity of the deployment within `ModelCapacity__waitSeconds`, or none "
            "expected within it (the call gives its message back at once)",
        ),
        OutcomeTable.wait_for_capacity,
    ),
    Row(
        PlatformUnavailable,
        ("storage or the broker unavailable (an outage)",),
        OutcomeTable.wait_out_outage,
    ),
    Row(
        InvalidModelOutput,
        (
            "the model's answer breaks its task's output schema, within `InvalidOutputRetries`",
            "the model's answer breaks its task's output schema, `InvalidOutputRetries` spent",
        ),
        OutcomeTable.retry_invalid_output,
    ),
    Row(
        TransientError,
        (
            RETRIES_LEFT,
            "transient failure, retries exhausted",
            "transient failure and the copy could not be scheduled",
        ),
        OutcomeTable.retry,
    ),
    Row(
        ClaimCheckInvalid,
        ("claim-check blob missing or SHA-256 mismatch",),
        OutcomeTable.give_up_on_claim_check,
    ),
    Row(
        PrerequisiteFailed,
        ("`after` names a request that ended without a result",),
        OutcomeTable.dead_letter_prerequisite,
    ),
    Row(
        OrderedWaitRefused,
        ("a request with a `document_id` that must wait (`not_before`, `after`)",),
        OutcomeTable.refuse_ordered_wait,
    ),
    Row(PermanentError, ("permanent failure",), OutcomeTable.give_up),
    Row(
        InvalidInput,
        ("no job yet and the message breaks a door's rule (Service Bus producers)",),
        OutcomeTable.refuse,
    ),
    Row(
        BudgetExceeded,
        ("no job yet and the tenant's budget is spent (Service Bus producers)",),
        OutcomeTable.reject_over_budget,
    ),
    Row(
        Conflict,
        ("cancelled or finished by another delivery while it ran",),
        OutcomeTable.ended_meanwhile,
    ),
    UNEXPECTED,
)
