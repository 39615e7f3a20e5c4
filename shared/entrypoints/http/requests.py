"""``/api/v1/requests``: submit work, poll its job, fetch its result, cancel it.

The asynchronous request-reply pattern: ``POST`` answers ``202 Accepted`` with a
``Location`` to poll and a ``Retry-After`` saying how soon; the status document names the
result URL once the job has completed. ``RequestEndpoints`` holds what the four
handlers use (intake, the job repository, the caller tenancy, the limits and the batch
endpoints), built by ``bootstrap``; each handler takes a framework-free ``ApiRequest``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from fnmatch import fnmatch
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shared.accounting.spending import TenantSpending
from shared.bounded_json import parse_json
from shared.contracts import (
    AcceptedRequest,
    BatchProgress,
    BlobReferenceInput,
    Job,
    JobErrorView,
    JobStatus,
    JobView,
    ModelName,
    Priority,
    ProcessingMode,
    RequestedMode,
    ResultSummary,
    SubmitRequestBody,
    TextInput,
)
from shared.entrypoints.http.batches import BatchEndpoints
from shared.entrypoints.http.messages import ApiRequest, ApiResponse, json_response
from shared.errors import (
    Conflict,
    FieldError,
    Gone,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    UnsupportedMediaType,
)
from shared.intake.submissions import BlobReference, InlineContent, Intake, Submission
from shared.intake.tenancy import CallerTenancy
from shared.jobs import JobRepository, transition
from shared.request_ids import is_retired
from shared.tracing import continue_or_start

JSON_ENVELOPE_ALLOWANCE = 65_536  # room for the JSON around the largest allowed inline text


@dataclass(frozen=True)
class RequestLimits:
    """What the request API answers by: MaxInlineTextBytes, MaxUploadBytes,
    AllowedUploadMediaTypes (patterns), StatusPollSeconds (the Retry-After of an
    unfinished job) and JobRetentionDays (after which an id is 410 Gone)."""

    max_inline_text_bytes: int
    max_upload_bytes: int
    upload_media_types: tuple[str, ...]
    status_poll_seconds: int
    retention_days: int

    def accepts_upload(self, media_type: str) -> bool:
        return bool(media_type) and any(
            fnmatch(media_type, allowed) for allowed in self.upload_media_types
        )


class UploadParameters(BaseModel):
    """Query parameters of a raw document upload."""

    model_config = ConfigDict(extra="forbid")

    model: ModelName
    priority: Priority = Priority.NORMAL
    not_before: datetime | None = None
    deadline_seconds: int | None = Field(None, ge=1)
    mode: RequestedMode | None = None


def _validation_error(error: ValidationError, prefix: str = "") -> InvalidInput:
    fields = tuple(
        FieldError(prefix + ".".join(str(part) for part in item["loc"]), item["msg"])
        for item in error.errors()
    )
    summary = "; ".join(f"{f.field}: {f.message}" for f in fields[:5])
    return InvalidInput(f"the request is invalid: {summary}", fields)


def collection_url(request: ApiRequest) -> str:
    """``.../api/v1/requests`` of the URL the caller used: status URLs are built on it,
    so they point wherever the caller reached the app (proxy, local host)."""
    base = request.url.split("?", 1)[0].split("#", 1)[0]
    marker = "/v1/requests"
    return base[: base.index(marker) + len(marker)] if marker in base else base.rstrip("/")


def job_view(job: Job, collection_url: str, batch: BatchProgress | None = None) -> dict[str, Any]:
    """What a caller sees of a job (internals such as the claim check stay private);
    ``batch``: where a batch-mode request stands in its batch."""
    status_url = f"{collection_url}/{job.id}"
    fields: dict[str, Any] = {}
    if job.mode is ProcessingMode.BATCH:
        fields["mode"] = job.mode
        fields["batch"] = batch
    if job.error:
        fields["error"] = JobErrorView(code=job.error.code, message=job.error.message)
    if job.status is JobStatus.COMPLETED:
        summary = job.result.summary() if job.result else None
        fields["result"] = ResultSummary.model_validate(summary) if summary else None
        fields["result_url"] = f"{status_url}/result"
    view = JobView(
        id=job.id,
        status=job.status,
        model=job.model,
        priority=job.priority,
        created_at=job.created_at,
        updated_at=job.updated_at,
        completed_at=job.completed_at,
        not_before=job.not_before,
        deadline=job.deadline,
        attempts=job.attempts,
        status_url=status_url,
        **fields,
    )
    return view.model_dump(mode="json", exclude_unset=True)


def _json_submission(request: ApiRequest, limits: RequestLimits, tenant_id: str) -> Submission:
    document = parse_json(
        request.body,
        max_bytes=limits.max_inline_text_bytes + JSON_ENVELOPE_ALLOWANCE,
        what="the JSON body",
    )
    try:
        body = SubmitRequestBody.model_validate(document)
    except ValidationError as error:
        raise _validation_error(error) from error
    content: InlineContent | BlobReference
    if isinstance(body.input, TextInput):
        data = body.input.text.encode("utf-8")
        if len(data) > limits.max_inline_text_bytes:
            raise PayloadTooLarge(
                f"input.text is {len(data)} bytes; the limit is {limits.max_inline_text_bytes}",
                (FieldError("input.text", "too large"),),
            )
        content = InlineContent(data, "text/plain; charset=utf-8")
    else:
        assert isinstance(body.input, BlobReferenceInput)
        content = BlobReference(body.input.blob_uri, body.input.sha256)
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":")).encode("utf-8")
    mode, batch_when_late = RequestedMode.intake_choice(body.mode)
    return Submission(
        tenant_id=tenant_id,
        model=body.model,
        content=content,
        parameters=body.parameters,
        priority=body.priority,
        not_before=body.not_before,
        deadline_seconds=body.deadline_seconds,
        metadata=body.metadata,
        after=body.after,
        document_id=body.document_id,
        mode=mode,
        batch_when_late=batch_when_late,
        idempotency_key=request.header("idempotency-key"),
        request_hash=hashlib.sha256(canonical).hexdigest(),
        trace=continue_or_start(request.header("traceparent"), request.header("tracestate")),
    )


def _upload_submission(request: ApiRequest, limits: RequestLimits, tenant_id: str) -> Submission:
    try:
        params = UploadParameters.model_validate(dict(request.params))
    except ValidationError as error:
        raise _validation_error(error, prefix="query.") from error
    if params.not_before is not None and params.not_before.tzinfo is None:
        raise InvalidInput(
            "not_before must include a time zone", (FieldError("query.not_before", "naive"),)
        )
    if not request.body:
        raise InvalidInput("the uploaded document is empty", (FieldError("body", "empty"),))
    if len(request.body) > limits.max_upload_bytes:
        raise PayloadTooLarge(
            f"the document is {len(request.body)} bytes; the limit is {limits.max_upload_bytes}"
        )
    digest = hashlib.sha256()
    digest.update(request.media_type.encode() + b"\n")
    digest.update(json.dumps(sorted(request.params.items())).encode() + b"\n")
    digest.update(request.body)
    mode, batch_when_late = RequestedMode.intake_choice(params.mode)
    return Submission(
        tenant_id=tenant_id,
        model=params.model,
        content=InlineContent(request.body, request.header("content-type") or request.media_type),
        priority=params.priority,
        not_before=params.not_before,
        deadline_seconds=params.deadline_seconds,
        mode=mode,
        batch_when_late=batch_when_late,
        idempotency_key=request.header("idempotency-key"),
        request_hash=digest.hexdigest(),
        trace=continue_or_start(request.header("traceparent"), request.header("tracestate")),
    )


@dataclass(frozen=True)
class RequestEndpoints:
    """``/api/v1/requests``: submit, status, result and cancel."""

    intake: Intake
    jobs: JobRepository
    tenancy: CallerTenancy
    limits: RequestLimits
    batches: BatchEndpoints
    spending: TenantSpending | None = None

    def submit(self, request: ApiRequest) -> ApiResponse:
        """``POST /api/v1/requests``: a JSON body, or a raw document with ``?model=``."""
        tenant_id = self.tenancy.tenant_of(request.headers)
        media_type = request.media_type
        if media_type == "application/json":
            submission = _json_submission(request, self.limits, tenant_id)
        elif self.limits.accepts_upload(media_type):
            submission = _upload_submission(request, self.limits, tenant_id)
        else:
            accepted = ", ".join(("application/json", *self.limits.upload_media_types))
            raise UnsupportedMediaType(
                f"Content-Type '{media_type or 'missing'}' is not accepted; use one of: {accepted}"
            )
        accepted_job = self.intake.submit(submission)
        view = job_view(accepted_job.job, collection_url(request))
        headers = {
            "Location": view["status_url"],
            "Retry-After": str(self.limits.status_poll_seconds),
        }
        body = AcceptedRequest(id=view["id"], status=view["status"], status_url=view["status_url"])
        return json_response(202, body.model_dump(mode="json"), headers)

    def status(self, request: ApiRequest) -> ApiResponse:
        """``GET /api/v1/requests/{id}``: the job as the caller may see it (one storage
        read, and one of its batch for a batch-mode request)."""
        job = self._job(request)
        headers = {}
        if not job.status.is_terminal:
            headers["Retry-After"] = str(self.limits.status_poll_seconds)
        view = job_view(job, collection_url(request), self.batches.progress(job))
        return json_response(200, view, headers)

    def result(self, request: ApiRequest) -> ApiResponse:
        """``GET /api/v1/requests/{id}/result``: 409 with Retry-After until the job is done.

        The result is kept in the job document, so this is one storage read too."""
        job = self._job(request)
        if not job.status.is_terminal:
            raise Conflict(
                f"request {job.id} is {job.status.value}; its result is not ready",
                code="result_not_ready",
                retry_after=self.limits.status_poll_seconds,
            )
        if job.status is not JobStatus.COMPLETED or job.result is None:
            raise Conflict(
                f"request {job.id} ended {job.status.value} without a result", "no_result"
            )
        body = job.result.model_dump_json(by_alias=True).encode("utf-8")
        return ApiResponse(200, body, {"Content-Type": "application/json"})

    def cancel(self, request: ApiRequest) -> ApiResponse:
        """``DELETE /api/v1/requests/{id}``: cancel unless already terminal (then 409)."""
        tenant_id = self.tenancy.tenant_of(request.headers)
        job_id = request.route_params.get("id", "")
        try:
            job = self.jobs.update(
                tenant_id, job_id, lambda current: transition(current, JobStatus.CANCELLED)
            )
        except NotFound:
            raise self._not_found(job_id) from None
        self.batches.forget_staged(job)
        if self.spending is not None:  # what it held of its tenant's budget goes back
            self.spending.release(job.tenant_id, job.id, job.created_at)
        return json_response(200, job_view(job, collection_url(request)))

    def _job(self, request: ApiRequest) -> Job:
        job_id = request.route_params.get("id", "")
        job = self.jobs.find(self.tenancy.tenant_of(request.headers), job_id)
        if job is None:
            raise self._not_found(job_id)
        return job

    def _not_found(self, job_id: str) -> NotFound:
        """404, or 410 Gone for an id minted before the retention period (its job retired)."""
        days = self.limits.retention_days
        if is_retired(job_id, timedelta(days=days), self.jobs.clock()):
            return Gone(
                f"request {job_id} was accepted more than {days} days ago; its records have "
                f"been retired (retention: {days} days)"
            )
        return NotFound(f"no request {job_id}")
