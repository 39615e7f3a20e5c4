"""What one lane's processor is told: its queue, its models, its retry budget and limits.

One frozen value per lane, built by the wiring from the settings, read by the processor
(``pipeline``) and by the outcome table (``outcomes``) alike, so that both follow the same
numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

# The longest an ordered (session) message waits in place in one delivery before it is
# tried again: its session stays locked meanwhile (the lock keeper renews it), holding up
# that document only. It stays inside the invocation's limits with room for the try
# itself: host.json's functionTimeout (10 min) and MaxLockRenewalSeconds (600 s), past
# which the lock keeper stops renewing. Above the largest jitter floor of the default
# backoff (300 s), so the ordered lane waits out as long an outage as the other lanes.
ORDERED_RETRY_MAX_WAIT_SECONDS = 420.0
# What a try may take besides the wait, within MaxLockRenewalSeconds.
ORDERED_TRY_ALLOWANCE_SECONDS = 120.0


def ordered_retry_max_wait(max_lock_renewal_seconds: float) -> float:
    """The ordered lane's longest wait in place for this MaxLockRenewalSeconds: the lock
    keeper must still be renewing the session's lock when the wait ends."""
    room = max_lock_renewal_seconds - ORDERED_TRY_ALLOWANCE_SECONDS
    return max(0.0, min(ORDERED_RETRY_MAX_WAIT_SECONDS, room))


@dataclass(frozen=True)
class ProcessingPolicy:
    queue_name: str
    aliases: tuple[str, ...]  # the models served here (the catalog's aliases)
    max_retries: int
    retry_base_seconds: float
    retry_max_seconds: float
    api_base_url: str | None = None  # announcements link to ``<this>/api/v1/requests/<id>/result``
    # The ordered lane (a session queue): a transient failure is retried in place, keeping
    # the document's order, instead of by a scheduled copy (``retries.Retries``).
    ordered: bool = False
    lane: str = "standard"  # the lane's name (shared.lanes.Lane), a metric dimension
    retry_jitter_floor: float = 0.0  # RetryJitterFloor (processing.backoff)
    # An answer that breaks its task's schema is tried again this many times, then the
    # job fails invalid_model_output (InvalidOutputRetries).
    invalid_output_retries: int = 2
    faults_allowed: bool = False  # LocalModelFaults: parameters.simulate is honoured
    # MaxLockRenewalSeconds: a running job changed more recently may be another delivery's.
    max_lock_renewal_seconds: float = 600.0
    # The ordered lane's longest wait in place a try (``ordered_retry_max_wait``).
    ordered_retry_max_wait_seconds: float = ORDERED_RETRY_MAX_WAIT_SECONDS
    # ModelCapacity__fairShareSeconds: the work a tenant holds of a deployment here before
    # its next message goes back to the queue for its turn (``fair_turns``; 0: never).
    fair_share_seconds: float = 0.0
    # The longest a message waits for its tenant's turn: half of JobResend__afterSeconds.
    fair_share_longest_wait: float = 600.0
