"""The Global Batch lane's durable records: what waits, what went out, what each tenant sent.

- A ``PendingRequest`` is a batch-mode request ready to go out: its JSONL line already
  built (the input read once, when the request was staged), and what its announcement
  needs later. It stays until its submission is closed, so a crash anywhere in between
  still knows every member.
- A ``Submission`` is one JSONL file and the service batch made from it, for one tenant
  and one deployment. Its ``state`` says which step is next; every step looks for what
  the step before it may already have done (``ports.BatchService``), so a run that died
  between two steps is finished by the next run without doing anything twice.
- A ``LedgerEntry`` records a submission against its tenant: the lane is metered even
  though no request passes through a gateway.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.contracts import InlineText, RequestMessage


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class PendingRequest(_Record):
    schema_: Literal["inferbus.batch-pending/v1"] = Field(
        "inferbus.batch-pending/v1", alias="schema"
    )
    request: RequestMessage
    deployment: str
    correlation_id: str
    # The request message's trace context (traceparent, tracestate): the announcement
    # hours later continues the request's trace.
    properties: dict[str, str] = Field(default_factory=dict)
    line: dict[str, Any]
    staged_at: datetime
    resubmissions: int = Field(0, ge=0)

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def tenant_id(self) -> str:
        return self.request.tenant_id

    def facts(self) -> MemberFacts:
        messages = self.line.get("body", {}).get("messages") or [{}]
        # Inline text is in the line already; the facts keep the request without it.
        request = self.request
        if isinstance(request.input, InlineText):
            request = request.model_copy(update={"input": InlineText(text="")})
        return MemberFacts(
            request=request,
            correlation_id=self.correlation_id,
            properties=self.properties,
            characters=len(str(messages[-1].get("content") or "")),
            resubmissions=self.resubmissions,
        )


class MemberFacts(_Record):
    """What concluding needs of a member besides its answer: kept for a whole submission in
    one document (``members.jsonl``) when it is planned, so the conclusion reads one blob
    instead of every staged line again. An inline text input is left out (its line holds
    it; a failed line sent to the queue lane takes the request from its staged line)."""

    request: RequestMessage
    correlation_id: str
    properties: dict[str, str] = Field(default_factory=dict)
    characters: int = Field(0, ge=0)
    resubmissions: int = Field(0, ge=0)


class SubmissionState(StrEnum):
    PLANNED = "planned"  # members chosen; nothing sent yet
    UPLOADED = "uploaded"  # the JSONL file is on the service (file_id)
    SUBMITTED = "submitted"  # the service batch exists (batch_id): polled until final
    ENDED = "ended"  # final, and its output and error files copied to our storage
    CLOSED = "closed"  # every member's job updated and announced


class Counts(_Record):
    total: int = 0
    completed: int = 0
    failed: int = 0


class RecordedError(_Record):
    code: str
    message: str


class Submission(_Record):
    schema_: Literal["inferbus.batch-submission/v1"] = Field(
        "inferbus.batch-submission/v1", alias="schema"
    )
    id: str
    tenant_id: str
    deployment: str
    model: str
    requests: int = Field(ge=1)  # its members are in files/<id>/members.jsonl
    bytes: int = Field(ge=0)
    # What the file is counted for against the deployment's enqueued-token quota
    # (``quota.line_tokens`` of each line), and its members' earliest deadline: a batch
    # refused for the quota waits no longer than that.
    estimated_tokens: int = Field(0, ge=0)
    deadline: datetime | None = None
    created_at: datetime
    updated_at: datetime
    state: SubmissionState = SubmissionState.PLANNED
    file_id: str | None = None
    batch_id: str | None = None
    submitted_at: datetime | None = None  # when its batch was first created (the ledger's day)
    output_file_id: str | None = None
    error_file_id: str | None = None
    # Batches the service refused for the enqueued-token quota: the same file is
    # submitted again (``quota_retries`` times so far) once ``retry_at`` has passed, up to
    # a limit counted from the first refusal (``quota.after_refusal``).
    refused_batches: list[str] = Field(default_factory=list)
    quota_retries: int = 0
    retry_at: datetime | None = None
    first_refused_at: datetime | None = None
    # Members whose jobs were marked running, and members concluded, so far: a run that
    # stops (its time is up, or it dies) goes on from there, 1,000 members at a time.
    marked: int = Field(0, ge=0)
    concluded: int = Field(0, ge=0)
    input_tokens: int = Field(0, ge=0)
    output_tokens: int = Field(0, ge=0)
    remote_status: str | None = None
    counts: Counts = Field(default_factory=Counts)
    errors: list[RecordedError] = Field(default_factory=list)
    last_polled_at: datetime | None = None
    cancel_requested: bool = False
    closed_at: datetime | None = None
    # What became of the members (completed, refused, failed, requeued, resubmitted...).
    outcomes: dict[str, int] = Field(default_factory=dict)

    @property
    def filename(self) -> str:
        """The input file's name on the service: how a retried upload finds the first."""
        return f"inferbus-{self.id}.jsonl"


def ledger_entry(submission: Submission) -> LedgerEntry:
    """The tenant's ledger entry of a submitted submission, as far as it has come."""
    assert submission.batch_id is not None
    assert submission.submitted_at is not None
    return LedgerEntry(
        submission_id=submission.id,
        tenant_id=submission.tenant_id,
        model=submission.model,
        deployment=submission.deployment,
        batch_id=submission.batch_id,
        requests=submission.requests,
        bytes=submission.bytes,
        submitted_at=submission.submitted_at,
        outcomes=submission.outcomes,
        input_tokens=submission.input_tokens,
        output_tokens=submission.output_tokens,
        total_tokens=submission.input_tokens + submission.output_tokens,
    )


class LedgerEntry(_Record):
    schema_: Literal["inferbus.batch-ledger/v1"] = Field("inferbus.batch-ledger/v1", alias="schema")
    submission_id: str
    tenant_id: str
    model: str
    deployment: str
    batch_id: str
    requests: int
    bytes: int
    submitted_at: datetime
    # Filled when the submission closes.
    outcomes: dict[str, int] = Field(default_factory=dict)
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
