"""Versioned contracts: what crosses a boundary (HTTP, Service Bus, Blob storage).

Each stored or sent document carries an explicit ``schema`` so a reader can refuse a
version it does not know with a clear reason instead of misreading it. The HTTP request
body is versioned by its URL (``/api/v1/...``) and therefore has no schema field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Any, Final, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    StringConstraints,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

REQUEST_MESSAGE_SCHEMA: Final = "inferbus.request/v1"
JOB_SCHEMA: Final = "inferbus.job/v1"
RESULT_SCHEMA: Final = "inferbus.result/v1"
# The built-in task: its result is an ``InferenceResult``; any other task's result is the
# answer object its output schema describes.
DOCUMENT_ANALYSIS: Final = "document-analysis"

Sha256Hex = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
ModelName = Annotated[
    str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
]
MetadataKey = Annotated[
    str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
]
MetadataValue = Annotated[str, StringConstraints(max_length=256)]
# A document's id orders its steps: it becomes the message's session id (at most 128
# characters on Service Bus), so printable ASCII without spaces.
DocumentId = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[!-~]+$")]
# A tenant id is a blob prefix, an index tag and a key of the tenant catalog: every ring
# that names a tenant checks it against this one pattern.
TENANT_ID_PATTERN: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
# A currency is named by its ISO 4217 code (USD, EUR): the model catalog's prices and every
# cost are in one.
CURRENCY_PATTERN: Final = re.compile(r"^[A-Z]{3}$")


class Priority(StrEnum):
    LOW = "low"
    NORMAL = "normal"
    HIGH = "high"


class Door(StrEnum):
    """The way a request came in, by name: the value is what a job document's ``source``,
    a message's ``source`` property and the ``inferbus.door`` dimension carry, so these
    strings are a wire format and never change."""

    HTTP = "http"
    WEBHOOK = "webhook"
    EVENTGRID = "eventgrid"
    EVENTGRID_PULL = "eventgrid-pull"
    BLOB = "blob"
    REPLAY = "replay"  # an Event Grid event replayed from its dead letters
    PRODUCER = "producer"
    SERVICEBUS = "servicebus"  # a message sent straight to the queue, with no job yet


class JobStatus(StrEnum):
    """Lifecycle of a job; all but the first two are terminal. ``rejected``: the request
    reached an asynchronous door over its tenant's budget, and was recorded without
    running (the HTTP API refuses such a request instead, with 429)."""

    ACCEPTED = "accepted"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    REJECTED = "rejected"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATUSES


class ProcessingMode(StrEnum):
    """Which lane runs a request: the Service Bus queue lane (minutes) or the Azure OpenAI
    Global Batch lane (hours, at half the price, through one control plane)."""

    QUEUE = "queue"
    BATCH = "batch"


class RequestedMode(StrEnum):
    """The lane a caller asks for: ``queue``, ``batch``, or ``auto``: the queue lane,
    unless its expected wait passes the request's deadline and the alias has a Global
    Batch deployment; then the batch lane (the job's ``mode`` says which it got)."""

    QUEUE = "queue"
    BATCH = "batch"
    AUTO = "auto"

    @staticmethod
    def intake_choice(requested: RequestedMode | None) -> tuple[ProcessingMode | None, bool]:
        """What a door's ``mode`` asks of intake: the lane (None: the deployment decides;
        ``auto`` starts with the queue lane), and whether a late request may go to batch."""
        if requested is None:
            return None, False
        lane = ProcessingMode.BATCH if requested is RequestedMode.BATCH else ProcessingMode.QUEUE
        return lane, requested is RequestedMode.AUTO


TERMINAL_STATUSES = frozenset(
    {
        JobStatus.COMPLETED,
        JobStatus.FAILED,
        JobStatus.EXPIRED,
        JobStatus.CANCELLED,
        JobStatus.REJECTED,
    }
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --- the HTTP request body (API v1) ------------------------------------------------------


class TextInput(_Strict):
    """Inline text; its size limit comes from settings and is checked by intake."""

    text: str = Field(min_length=1)


class BlobReferenceInput(_Strict):
    """A document already in the app's storage account; ``sha256`` is verified later."""

    blob_uri: str = Field(min_length=1, max_length=2048)
    sha256: Sha256Hex | None = None


class SubmitRequestBody(_Strict):
    """``POST /api/v1/requests`` with a JSON body."""

    model: ModelName
    input: TextInput | BlobReferenceInput
    parameters: dict[str, Any] = Field(default_factory=dict, max_length=32)
    priority: Priority = Priority.NORMAL
    not_before: AwareDatetime | None = None
    deadline_seconds: int | None = Field(None, ge=1)
    metadata: dict[MetadataKey, MetadataValue] = Field(default_factory=dict, max_length=16)
    after: str | None = Field(None, min_length=1, max_length=64)
    document_id: DocumentId | None = None
    # None: the deployment decides (GlobalBatch__routePriorities), else the queue lane.
    mode: RequestedMode | None = None


# --- claim check and the request message -------------------------------------------------


class ClaimCheck(_Strict):
    """Where the input lives and how to verify it: the message carries this, not the data."""

    blob_uri: str
    sha256: Sha256Hex
    size: int = Field(ge=0)
    media_type: str


class InlineText(_Strict):
    """Small inline input, for producers that send text in the message itself."""

    text: str


def input_characters(given: ClaimCheck | InlineText | None) -> int:
    """How long an input is before it is read: an inline text's length, a claim-checked
    document's size in bytes (what pacing a request by its tokens can know of it)."""
    if isinstance(given, InlineText):
        return len(given.text)
    return given.size if given is not None else 0


class RequestMessage(_Strict):
    """Body of a request message on the requests queue (``inferbus.request/v1``)."""

    schema_: Literal["inferbus.request/v1"] = Field(REQUEST_MESSAGE_SCHEMA, alias="schema")
    request_id: str
    tenant_id: str
    model: ModelName
    input: ClaimCheck | InlineText
    parameters: dict[str, Any] = Field(default_factory=dict)
    priority: Priority = Priority.NORMAL
    not_before: AwareDatetime | None = None
    deadline: AwareDatetime | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    after: str | None = None
    document_id: DocumentId | None = None
    mode: ProcessingMode = ProcessingMode.QUEUE

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# --- results ----------------------------------------------------------------------------


class TokenUsage(_Strict):
    """Tokens one model call consumed, as the model reported them.

    Kept with the result because tokens are what a hosted model bills and throttles by:
    cost and quota per tenant are read from stored results as well as from metrics.
    """

    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    total_tokens: int = Field(ge=0)


# A Decimal amount of money, exact to the places ``shared.accounting.cost`` rounds to,
# written to JSON as a number (the schema says so: a JSON reader sees a number, never a
# string).
Amount = Annotated[
    Decimal,
    Field(ge=0, allow_inf_nan=False),
    PlainSerializer(float, return_type=float, when_used="json"),
    WithJsonSchema({"type": "number", "minimum": 0}),
]


class Cost(_Strict):
    """What the result's token usage cost at its model's prices in the model catalog, in
    the catalog's currency: the online price on the queue lane, the discounted price on
    the Global Batch lane; the amount is rounded to 10 decimal places."""

    amount: Amount
    currency: Annotated[str, StringConstraints(pattern=CURRENCY_PATTERN.pattern)]


class InferenceResult(BaseModel):
    """The result of the built-in task, document analysis (``DOCUMENT_ANALYSIS``)."""

    model_config = ConfigDict(extra="forbid")

    summary: str
    document_type: str
    confidence: float = Field(ge=0, le=1)
    language: str | None = None
    review_required: bool = False
    suggested_priority: Priority = Priority.NORMAL
    statistics: dict[str, float | int] = Field(default_factory=dict)
    details: dict[str, Any] = Field(default_factory=dict)
    # Facts about the call rather than the answer, filled by the model client (None when
    # the model did not report them); finish_reason "length" means the answer was cut short.
    usage: TokenUsage | None = None
    finish_reason: str | None = None


class ResultDocument(BaseModel):
    """A request's result: kept in its job document and served at ``.../result``.

    ``task`` says what ``result`` is: for the built-in ``document-analysis`` an
    ``InferenceResult`` (summary, document type, ...), for any other task the answer object
    its output schema describes, as the model gave it. ``usage`` and ``finish_reason`` are
    the model call's, whatever the task (the built-in result also carries them inside);
    ``cost`` is what ``usage`` cost at the model's prices on the lane that ran it (null:
    the model has no prices in the catalog, the call reported no usage, or the result was
    stored before costs were kept).
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: Literal["inferbus.result/v1"] = Field(RESULT_SCHEMA, alias="schema")
    request_id: str
    tenant_id: str
    model: str
    task: str = DOCUMENT_ANALYSIS  # before ``result``: its validator reads it
    outcome: Literal["completed", "refused"]
    result: InferenceResult | dict[str, Any] | None = None
    refusal: dict[str, str] | None = None
    usage: TokenUsage | None = None
    cost: Cost | None = None
    finish_reason: str | None = None
    completed_at: str

    @field_validator("result", mode="plain")
    @classmethod
    def _result_of_task(
        cls, value: Any, info: ValidationInfo
    ) -> InferenceResult | dict[str, Any] | None:
        """The built-in task's result is read as an ``InferenceResult``; another task's is
        kept as the object it is (the union alone would read an answer that happens to
        have a ``summary`` as an analysis)."""
        if value is None:
            return None
        if info.data.get("task", DOCUMENT_ANALYSIS) == DOCUMENT_ANALYSIS:
            return InferenceResult.model_validate(value)
        if isinstance(value, InferenceResult):
            raise ValueError(f"a result of task {info.data.get('task')!r} is its answer object")
        if not isinstance(value, Mapping):
            raise ValueError("a task's result is a JSON object")
        return dict(value)

    @model_validator(mode="after")
    def _call_facts(self) -> ResultDocument:
        """A document stored before ``usage`` and ``finish_reason`` were kept beside the
        result has them in its analysis only."""
        analysis = self.analysis
        if analysis is not None and self.usage is None and self.finish_reason is None:
            self.usage, self.finish_reason = analysis.usage, analysis.finish_reason
        return self

    @property
    def analysis(self) -> InferenceResult | None:
        """The built-in task's result (None for any other task, or a refusal)."""
        return self.result if isinstance(self.result, InferenceResult) else None

    def summary(self) -> dict[str, object]:
        """What the status endpoint shows of a result (the whole of it is at ``.../result``)."""
        summary: dict[str, object] = {"outcome": self.outcome, "task": self.task}
        if (analysis := self.analysis) is not None:
            summary["document_type"] = analysis.document_type
            summary["confidence"] = analysis.confidence
            summary["review_required"] = analysis.review_required
        if self.refusal:
            summary["refusal"] = self.refusal
        return summary


# --- the job document ----------------------------------------------------------------------


class JobError(_Strict):
    code: str
    message: str


class BatchMembership(_Strict):
    """Where a batch-mode request stands in the Global Batch lane: the submission (one
    JSONL file, one service batch) it went out in, once it went out."""

    deployment: str
    submission_id: str | None = None
    batch_id: str | None = None
    resubmissions: int = Field(0, ge=0)


class Job(BaseModel):
    """The durable record of one request, stored as JSON and changed by compare-and-swap."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: Literal["inferbus.job/v1"] = Field(JOB_SCHEMA, alias="schema")
    id: str
    tenant_id: str
    status: JobStatus = JobStatus.ACCEPTED
    model: str
    priority: Priority = Priority.NORMAL
    source: str = Door.HTTP
    input: ClaimCheck | InlineText | None = None
    parameters: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, str] = Field(default_factory=dict)
    correlation_id: str
    created_at: datetime
    updated_at: datetime
    not_before: datetime | None = None
    deadline: datetime | None = None
    completed_at: datetime | None = None
    attempts: int = 0
    last_error: JobError | None = None
    error: JobError | None = None
    settlement: str | None = None
    after: str | None = None
    document_id: str | None = None
    result: ResultDocument | None = None
    mode: ProcessingMode = ProcessingMode.QUEUE
    batch: BatchMembership | None = None


# --- what the HTTP API answers (documented by entrypoints/http/openapi.py) --------------


class _View(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JobErrorView(_View):
    code: str
    message: str


class ResultSummary(_View):
    """What the status document shows of a result (the whole of it is at ``.../result``)."""

    outcome: Literal["completed", "refused"]
    task: str = DOCUMENT_ANALYSIS
    document_type: str | None = None  # document_type, confidence, review_required: the
    confidence: float | None = None  # built-in document analysis only
    review_required: bool | None = None
    refusal: dict[str, str] | None = None


class BatchCounts(_View):
    total: int = Field(ge=0)
    completed: int = Field(ge=0)
    failed: int = Field(ge=0)


class BatchProgress(_View):
    """A batch-mode request's batch: ``waiting`` until it is submitted, then the service's
    status of its batch (validating, in_progress, finalizing, completed, ...)."""

    status: str
    submission_id: str | None = None
    batch_id: str | None = None
    request_counts: BatchCounts | None = None


class BatchView(_View):
    """``GET``/``DELETE /api/v1/batches/{id}``: one submission of the Global Batch lane
    (one input file and its service batch), as the tenant that owns it may see it."""

    id: str
    status: str  # planned, uploaded, then the service's status; closed when concluded
    model: str
    deployment: str
    requests: int = Field(ge=0)
    batch_id: str | None = None
    request_counts: BatchCounts
    created_at: datetime
    submitted_at: datetime | None = None
    closed_at: datetime | None = None
    cancel_requested: bool = False
    outcomes: dict[str, int] = Field(default_factory=dict)


class UsageTotals(_View):
    """Tokens and cost of a period's answers (``cost`` in ``UsageView.currency``; answers
    whose cost is not known are counted in ``uncosted``)."""

    requests: int = Field(ge=0)
    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    cost: Amount
    uncosted: int = Field(0, ge=0)


class UsageRowView(UsageTotals):
    """One day's answers of one model on one lane."""

    day: date
    model: str
    mode: ProcessingMode


class HeldView(_View):
    """Requests admitted against a budget and not answered yet, at their estimates."""

    requests: int = Field(ge=0)
    tokens: int = Field(ge=0)
    cost: Amount


class BudgetView(_View):
    """One budget of the tenant catalog in its current period: what is spent of it
    (answers and reservations) and when it resets."""

    name: Literal["tokens_per_day", "tokens_per_month", "cost_per_month"]
    period: str
    limit: float
    spent: float
    remaining: float
    resets_at: datetime


class UsageView(_View):
    """``GET /api/v1/usage``: the caller's tenant's usage of one UTC month, its budgets'
    current periods, and what its unanswered requests hold."""

    tenant: str
    month: str
    currency: str | None = None
    today: UsageTotals | None = None  # only for the current month
    total: UsageTotals
    held: HeldView
    days: list[UsageRowView] = Field(default_factory=list)
    budgets: list[BudgetView] = Field(default_factory=list)


class AcceptedRequest(_View):
    """``202 Accepted``: the new request's id and where to poll it (also in ``Location``)."""

    id: str
    status: JobStatus
    status_url: str


class JobView(_View):
    """``GET /api/v1/requests/{id}``: a request's job as its caller may see it."""

    id: str
    status: JobStatus
    model: str
    priority: Priority
    created_at: datetime
    updated_at: datetime
    completed_at: datetime | None
    not_before: datetime | None
    deadline: datetime | None
    attempts: int = Field(ge=0)
    status_url: str
    error: JobErrorView | None = None
    result: ResultSummary | None = None
    result_url: str | None = None
    mode: ProcessingMode = ProcessingMode.QUEUE
    batch: BatchProgress | None = None


class RequestSummary(_View):
    """One request in ``GET /api/v1/requests``: what a list shows (the whole job is at
    ``status_url``)."""

    id: str
    status: JobStatus
    model: str
    priority: Priority
    mode: ProcessingMode
    created_at: datetime
    updated_at: datetime
    completed_at: datetime | None
    status_url: str


class RequestList(_View):
    """``GET /api/v1/requests``: a page of the caller's requests, newest first.

    ``continuation`` (with ``next``, the same query with it) is present while more may
    follow, absent on the last page; a page may be shorter than its limit, even empty,
    and still have one."""

    requests: list[RequestSummary]
    continuation: str | None = None
    next: str | None = None


class FieldProblem(_View):
    field: str
    message: str


class ProblemDetails(BaseModel):
    """RFC 9457 problem details: every error the HTTP API answers (``application/problem+json``)."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int = Field(ge=400, le=599)
    detail: str
    errors: list[FieldProblem] | None = None
