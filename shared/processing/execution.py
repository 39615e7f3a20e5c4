"""A message's model call, its result stored and announced: the happy path's end.

``Execution`` runs what ``admission`` admitted. Success costs one job write (completed,
with the result in it, durable before it is announced), after the running write of
admission. A refusal by the content filter is a result like any other. Whatever else the
call meets goes, as the exception it is, to the outcome table (``outcomes``): a result
stored but not announced is ``ResultNotAnnounced`` (announced again without running the
model), storage failing is an outage (``outcomes.platform_call``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from shared import telemetry
from shared.accounting.ledger import Answer
from shared.accounting.spending import TenantSpending
from shared.clock import Clock, utc_now
from shared.contracts import Job, JobStatus, RequestMessage
from shared.errors import ResultNotAnnounced, TransientError
from shared.events.announcements import Announcer, result_announcement
from shared.inference.served import ServedModels
from shared.jobs import JobRepository, transition
from shared.processing.inbound import InboundMessage
from shared.processing.outcomes import OutcomeTable, Unsettled, platform_call
from shared.processing.policy import ProcessingPolicy
from shared.processing.ports import Settler
from shared.processing.retries import Retries
from shared.processing.settlement import NotedSettler
from shared.processing.values import Admitted, Outcome
from shared.results import run_model

log = logging.getLogger(__name__)


def announce_result(
    announcer: Announcer,
    request: RequestMessage,
    job: Job,
    properties: Mapping[str, Any],
    api_base_url: str | None,
) -> None:
    """The stored result of ``job``, announced; a failure is ``ResultNotAnnounced`` (tried
    again without running the model)."""
    try:
        announcer.announce(result_announcement(request, job, properties, api_base_url))
    except TransientError as error:
        raise ResultNotAnnounced(error) from error


class Execution:
    """Runs one lane's admitted messages through their model."""

    def __init__(
        self,
        *,
        policy: ProcessingPolicy,
        jobs: JobRepository,
        models: ServedModels,
        announcer: Announcer,
        outcomes: OutcomeTable,
        retries: Retries,
        spending: TenantSpending | None = None,
        clock: Clock = utc_now,
    ) -> None:
        self._policy = policy
        self._jobs = jobs
        self._models = models
        self._announcer = announcer
        self._outcomes = outcomes
        self._retries = retries
        self._spending = spending
        self._clock = clock

    def run(self, message: InboundMessage, admitted: Admitted, settler: NotedSettler) -> Outcome:
        """The result's outcome, or the outcome table's for what the call met instead."""
        request = admitted.request
        with telemetry.log_dimensions(request_id=request.request_id, tenant_id=request.tenant_id):
            try:
                outcome = self._run(message, admitted, settler)
            except Exception as error:
                outcome = self._outcomes.settle(Unsettled(message, settler, error, request))
            finally:
                admitted.turn.release()
            log.info("message %s -> %s", message.message_id, outcome)
            return outcome

    def _run(self, message: InboundMessage, admitted: Admitted, settler: Settler) -> Outcome:
        request = admitted.request
        document = run_model(
            request,
            admitted.content,
            admitted.media_type,
            self._models[request.model],
            self._retries.tries_before(message),
            self._clock,
            faults_allowed=self._policy.faults_allowed,
        )
        with telemetry.span(telemetry.SPAN_STORE_RESULT), platform_call():
            completed = self._jobs.advance(
                admitted.running,
                lambda job: transition(
                    job, JobStatus.COMPLETED, self._clock, result=document, settlement="completed"
                ),
            )
        if self._spending is not None:  # the answer kept: its tenant's usage, once
            job = completed.job
            self._spending.record(job.tenant_id, job.created_at, Answer.of(job))
        announce_result(
            self._announcer,
            request,
            completed.job,
            message.application_properties,
            self._policy.api_base_url,
        )
        settler.complete(message)
        return Outcome(document.outcome)
