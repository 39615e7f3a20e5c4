"""The deployment's enqueued-token quota: what a file is counted for, and how long a
refused batch may wait for room.

The service counts every batch of a deployment that is validating, in progress or
finalizing against the deployment's enqueued-token quota, and fails a batch that would
pass it (``token_limit_exceeded``). Two things would make a request wait for ever:

- **a file the quota can never hold.** Planning estimates each line as the capacity gate
  estimates a call (``capacity.estimated_tokens``: the messages at four characters a
  token, plus the line's ``max_completion_tokens`` or ``max_tokens``, or the gate's
  default) and splits files at ``GlobalBatch__enqueuedTokens``; a single line over it
  goes alone in its file, which is failed at once (``never_fits``) instead of being
  refused for ever;
- **a quota that never frees up.** A refused batch is created again after a doubling wait
  (``GlobalBatch__quotaRetrySeconds`` up to ``GlobalBatch__quotaRetryMaxSeconds``), until
  its members' earliest deadline and never longer than
  ``GlobalBatch__quotaWaitLimitSeconds`` after its first refusal; then the submission
  ends failed with ``batch_quota_exceeded`` and concluding fails its members with it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from shared.global_batch.ports import RemoteBatch
from shared.global_batch.records import RecordedError, Submission, SubmissionState
from shared.inference.capacity import estimated_tokens

log = logging.getLogger(__name__)

BATCH_QUOTA_EXCEEDED: Final = "batch_quota_exceeded"
# Doubling stops here: the wait is capped by ``retry_max`` long before, and a larger
# power would overflow ``timedelta`` after many retries.
MAX_DOUBLINGS: Final = 30


@dataclass(frozen=True)
class QuotaPolicy:
    retry: timedelta  # the first wait after a refusal, doubling
    retry_max: timedelta
    wait_limit: timedelta  # the longest a submission waits after its first refusal


def line_tokens(line: dict[str, Any]) -> int:
    """What one input line is counted for against the quota (the capacity gate's
    estimate of the same call)."""
    body = line.get("body")
    body = body if isinstance(body, dict) else {}
    messages = body.get("messages")
    texts = [_text(m.get("content")) for m in messages or [] if isinstance(m, dict)]
    # The line's longest answer under either name (the app writes max_completion_tokens,
    # which the estimate reads as the request's max_tokens).
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    return estimated_tokens("", "".join(texts), {"max_tokens": limit})


def _text(content: object) -> str:
    """A message's content: a string, or a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return ""


def never_fits(submission: Submission, quota: int | None) -> RecordedError | None:
    """The error of a one-line file whose line alone passes the quota (planning puts such
    a line in a file of its own): no batch can ever carry it."""
    if quota is None or submission.requests != 1 or submission.estimated_tokens <= quota:
        return None
    return RecordedError(
        code=BATCH_QUOTA_EXCEEDED,
        message=(
            f"the request is estimated at {submission.estimated_tokens} tokens (its messages "
            f"at 4 characters a token plus max_tokens), more than the enqueued-token quota "
            f"of {quota} of deployment {submission.deployment} (GlobalBatch__enqueuedTokens): "
            "no batch can carry it"
        ),
    )


def after_refusal(
    submission: Submission, batch: RemoteBatch, now: datetime, policy: QuotaPolicy
) -> Submission:
    """``submission`` after the service refused ``batch`` for the quota: waiting to be
    created again (``uploaded``, with ``retry_at``), or, once its members' earliest
    deadline or the wait limit has passed, ended failed with ``batch_quota_exceeded``."""
    first = submission.first_refused_at or now
    limit_at = first + policy.wait_limit
    deadline = submission.deadline
    give_up_at = limit_at if deadline is None else min(limit_at, deadline)
    refusals = submission.quota_retries + 1
    refused = [*submission.refused_batches, batch.id]
    if now >= give_up_at:
        why = (
            "its members' earliest deadline"
            if deadline is not None and deadline <= limit_at
            else f"the wait limit of {policy.wait_limit} (GlobalBatch__quotaWaitLimitSeconds)"
        )
        said = "; ".join(e.message for e in batch.errors if e.message)
        error = RecordedError(
            code=BATCH_QUOTA_EXCEEDED,
            message=(
                f"the service refused its batch for the enqueued-token quota of deployment "
                f"{submission.deployment} {refusals} times since {first.isoformat()}, and "
                f"{why} has passed: {said or 'token_limit_exceeded'}"
            ),
        )
        log.error(
            "batch %s was refused for the enqueued-token quota of %s; submission %s gives "
            "up after %d refusals (%s has passed)",
            batch.id, submission.deployment, submission.id, refusals, why,
        )  # fmt: skip
        return submission.model_copy(
            update={
                "state": SubmissionState.ENDED,
                "remote_status": "failed",
                "errors": [error],
                "refused_batches": refused,
                "quota_retries": refusals,
                "first_refused_at": first,
                "retry_at": None,
            }
        )
    doubled = policy.retry * (2 ** min(submission.quota_retries, MAX_DOUBLINGS))
    retry_at = min(now + min(doubled, policy.retry_max), give_up_at)
    log.warning(
        "batch %s was refused for the enqueued-token quota of %s; submission %s tries "
        "again in %s (refusal %d), %s left before it gives up",
        batch.id, submission.deployment, submission.id, retry_at - now, refusals,
        give_up_at - now,
    )  # fmt: skip
    return submission.model_copy(
        update={
            "state": SubmissionState.UPLOADED,
            "refused_batches": refused,
            "quota_retries": refusals,
            "first_refused_at": first,
            "retry_at": retry_at,
            "batch_id": None,
            "last_polled_at": None,
        }
    )


def quota_exceeded(submission: Submission) -> RecordedError | None:
    """The ``batch_quota_exceeded`` error a submission ended with, if it did."""
    return next((e for e in submission.errors if e.code == BATCH_QUOTA_EXCEEDED), None)


def ending_status(submission: Submission) -> str:
    """The ``inferbus.batch.status`` of a submission that just ended: the service's final
    status, or ``batch_quota_exceeded`` when the quota ended it."""
    if quota_exceeded(submission) is not None:
        return BATCH_QUOTA_EXCEEDED
    return submission.remote_status or "unknown"
