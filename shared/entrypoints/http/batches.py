"""The Global Batch lane in the HTTP API.

- ``GET /api/v1/batches/{id}``: a submission's progress (the status document of each of
  its requests links here through ``batch.submission_id``);
- ``DELETE /api/v1/batches/{id}``: cancel a whole submission. The control plane, the only
  part of the app that talks to the service, cancels the service batch at its next run;
  answers that arrived before the cancellation still complete their requests, and every
  other member ends ``cancelled`` (202 Accepted: the cancellation is under way);
- a request's own status document shows its batch (``BatchEndpoints.progress``), and
  cancelling a batch-mode request that has not gone out yet removes its staged line
  (``BatchEndpoints.forget_staged``).

A submission belongs to one tenant; another tenant's submission is "not found". The
endpoints hold the lane's records (None: no Global Batch lane), the catalog's batch
deployments and the caller tenancy, built by ``bootstrap``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from shared.contracts import BatchCounts, BatchProgress, BatchView, Job, ProcessingMode
from shared.entrypoints.http.messages import ApiRequest, ApiResponse, json_response
from shared.errors import ConcurrencyConflict, Conflict, NotFound
from shared.global_batch.records import Submission, SubmissionState
from shared.global_batch.store import BatchRecords
from shared.intake.tenancy import CallerTenancy

MAX_CAS_ATTEMPTS = 8


def _status(submission: Submission) -> str:
    if submission.state is SubmissionState.CLOSED:
        return "closed"
    if submission.state is SubmissionState.UPLOADED and submission.refused_batches:
        return "waiting_for_quota"  # its last batch was refused; the file goes again
    return submission.remote_status or submission.state.value


def batch_view(submission: Submission) -> BatchView:
    counts = submission.counts
    return BatchView(
        id=submission.id,
        status=_status(submission),
        model=submission.model,
        deployment=submission.deployment,
        requests=submission.requests,
        batch_id=submission.batch_id,
        request_counts=BatchCounts(
            total=counts.total, completed=counts.completed, failed=counts.failed
        ),
        created_at=submission.created_at,
        submitted_at=submission.submitted_at,
        closed_at=submission.closed_at,
        cancel_requested=submission.cancel_requested,
        outcomes=submission.outcomes,
    )


@dataclass(frozen=True)
class BatchEndpoints:
    """``/api/v1/batches/{id}`` and what a request's own endpoints ask of its batch."""

    records: BatchRecords | None  # None: this deployment has no Global Batch lane
    batch_deployments: Mapping[str, str]  # alias -> its Global Batch deployment
    tenancy: CallerTenancy

    def _records(self) -> BatchRecords:
        if self.records is None:
            raise NotFound("this deployment has no Global Batch lane")
        return self.records

    def progress(self, job: Job) -> BatchProgress | None:
        """What a batch-mode request's status document shows of its batch (one more
        read, of its submission, once it has one)."""
        if job.mode is not ProcessingMode.BATCH:
            return None
        membership = job.batch
        if membership is None or membership.submission_id is None:
            return BatchProgress(status="waiting")
        records = self.records
        loaded = records.submission(membership.submission_id) if records is not None else None
        if loaded is None:
            return BatchProgress(
                status="submitted",
                submission_id=membership.submission_id,
                batch_id=membership.batch_id,
            )
        view = batch_view(loaded[0])
        return BatchProgress(
            status=view.status,
            submission_id=view.id,
            batch_id=view.batch_id,
            request_counts=view.request_counts,
        )

    def forget_staged(self, job: Job) -> None:
        """A cancelled batch-mode request that has not gone out: its staged line goes, so
        no later file carries it (one that went out already is ignored when its answer
        comes)."""
        records = self.records
        deployment = self.batch_deployments.get(job.model)
        if records is None or deployment is None or job.mode is not ProcessingMode.BATCH:
            return
        if job.batch is None or job.batch.submission_id is None:
            records.unstage(deployment, job.tenant_id, [job.id])

    def _owned(self, request: ApiRequest) -> tuple[Submission, str]:
        tenant_id = self.tenancy.tenant_of(request.headers)
        submission_id = request.route_params.get("id", "")
        loaded = self._records().submission(submission_id)
        if loaded is None or loaded[0].tenant_id != tenant_id:
            raise NotFound(f"no batch {submission_id}")
        return loaded

    def get(self, request: ApiRequest) -> ApiResponse:
        """``GET /api/v1/batches/{id}``."""
        submission, _ = self._owned(request)
        return json_response(200, batch_view(submission).model_dump(mode="json"))

    def cancel(self, request: ApiRequest) -> ApiResponse:
        """``DELETE /api/v1/batches/{id}``: 202 while the cancellation is under way; 409
        once the batch has ended."""
        records = self._records()
        for _ in range(MAX_CAS_ATTEMPTS):
            submission, etag = self._owned(request)
            if submission.state in (SubmissionState.ENDED, SubmissionState.CLOSED):
                raise Conflict(
                    f"batch {submission.id} has ended ({_status(submission)}); nothing to cancel",
                    code="batch_ended",
                )
            if submission.cancel_requested:
                break
            cancelling = submission.model_copy(update={"cancel_requested": True})
            try:
                records.save(cancelling, etag)
            except ConcurrencyConflict:
                continue
            submission = cancelling
            break
        else:
            raise ConcurrencyConflict(f"batch {submission.id} kept changing; try again")
        return json_response(202, batch_view(submission).model_dump(mode="json"))
