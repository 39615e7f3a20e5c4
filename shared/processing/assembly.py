"""One lane's processor, assembled: its admission and execution, the outcome table, the
retries and the job adoption they are given.

``MessageProcessor`` and its parts build none of their collaborators, so that a test can
give them other ones; this is the one place that puts the usual ones together, for the
wiring and the tests alike.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from shared.accounting.spending import TenantSpending
from shared.clock import Clock, utc_now
from shared.events.announcements import Announcer
from shared.inference.served import ServedModels
from shared.intake.claim_checks import ClaimChecks
from shared.intake.request_rules import RequestRules
from shared.jobs import JobRepository
from shared.messaging import MessageSender
from shared.processing.admission import Admission
from shared.processing.adopted_jobs import JobAdoption
from shared.processing.execution import Execution
from shared.processing.fair_turns import FairTurns
from shared.processing.outcomes import OutcomeTable
from shared.processing.pipeline import MessageProcessor
from shared.processing.policy import ProcessingPolicy
from shared.processing.ports import BatchStaging, DeferralLedger
from shared.processing.retries import Retries


def lane_processor(
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
    spending: TenantSpending | None = None,
) -> MessageProcessor:
    """The processor of the lane ``policy`` describes (``uniform`` draws the backoff's
    jitter, ``sleep`` waits: both replaceable to make a test deterministic)."""
    retries = Retries(
        policy=policy,
        jobs=jobs,
        sender=retry_sender,
        deadline_of=rules.message_deadline,
        clock=clock,
        uniform=uniform,
        sleep=sleep,
    )
    outcomes = OutcomeTable(
        retries=retries,
        jobs=jobs,
        announcer=announcer,
        clock=clock,
        invalid_output_retries=policy.invalid_output_retries,
        spending=spending,
    )
    adoption = JobAdoption(
        jobs=jobs, rules=rules, claim_checks=claim_checks, clock=clock, sleep=sleep,
        spending=spending,
    )  # fmt: skip
    admission = Admission(
        policy=policy,
        jobs=jobs,
        claim_checks=claim_checks,
        announcer=announcer,
        ledger=ledger,
        adoption=adoption,
        outcomes=outcomes,
        clock=clock,
        stager=stager,
        turns=(
            FairTurns(
                models=models,
                retries=retries,
                horizon_seconds=policy.fair_share_seconds,
                longest_wait=policy.fair_share_longest_wait,
            )
            if policy.fair_share_seconds > 0 and not policy.ordered
            else None
        ),
    )
    execution = Execution(
        policy=policy,
        jobs=jobs,
        models=models,
        announcer=announcer,
        outcomes=outcomes,
        retries=retries,
        spending=spending,
        clock=clock,
    )
    return MessageProcessor(policy=policy, admission=admission, execution=execution)
