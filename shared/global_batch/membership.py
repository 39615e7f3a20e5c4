"""Marking: once its batch exists, each member's job shows it (``running``, with the
submission and the service batch), so a caller polling the request sees where it is."""

from __future__ import annotations

from shared.clock import Clock, utc_now
from shared.contracts import BatchMembership, Job, JobStatus
from shared.errors import Conflict, NotFound
from shared.global_batch.records import Submission
from shared.global_batch.store import concurrently
from shared.jobs import JobRepository, transition


def mark_members(
    jobs: JobRepository, submission: Submission, chunk: list[str], clock: Clock = utc_now
) -> None:
    """Mark the jobs of ``chunk`` (request ids of ``submission``). A job ended meanwhile
    (its caller cancelled it) stays ended, and its answer will be ignored; a job marked
    already (a repeated run) is left as it is, so ``attempts`` counts each batch once."""
    batch_id = submission.batch_id
    assert batch_id is not None

    def change(job: Job) -> Job:
        membership = BatchMembership(
            deployment=submission.deployment,
            submission_id=submission.id,
            batch_id=batch_id,
            resubmissions=job.batch.resubmissions if job.batch else 0,
        )
        return transition(
            job, JobStatus.RUNNING, clock, batch=membership,
            attempts=job.attempts + 1, settlement=None,
        )  # fmt: skip

    def mark(request_id: str) -> None:
        current = jobs.load(submission.tenant_id, request_id)
        if current is None or current.job.status.is_terminal:
            return
        if current.job.batch is not None and current.job.batch.batch_id == batch_id:
            return
        try:
            jobs.advance(current, change)
        except (Conflict, NotFound):
            return

    concurrently(mark, chunk)
