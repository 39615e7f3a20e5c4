"""RFC 9457 problem details for every error the HTTP API returns.

One mapping from the exception tree to status codes keeps the API consistent: callers
and Event Grid alike decide whether to retry from the status code, so transient trouble
is always 503 with Retry-After and never a 4xx.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from shared.errors import (
    BudgetExceeded,
    ClaimCheckInvalid,
    ConfigurationError,
    Conflict,
    Forbidden,
    Gone,
    InferbusError,
    InvalidContinuation,
    InvalidInput,
    InvalidParameters,
    ModelNotAllowed,
    NotFound,
    PayloadTooLarge,
    PermanentError,
    PolicyRefusal,
    TransientError,
    Unauthenticated,
    UnknownModel,
    UnsupportedMediaType,
    UnsupportedMode,
)

PROBLEM_CONTENT_TYPE = "application/problem+json"
PROBLEM_TYPE_PREFIX = "urn:inferbus:problem:"

# Most specific first: the first matching class decides the status. Every class of the
# error tree has its row (a test keeps it so): whatever a caller sent is answered with a
# 4xx; only the deployment's own trouble is a 5xx (503 when waiting helps).
STATUS_BY_ERROR: tuple[tuple[type[InferbusError], int, str], ...] = (
    (UnknownModel, 422, "Unknown model"),
    (ModelNotAllowed, 403, "Model not allowed"),
    (BudgetExceeded, 429, "Budget exceeded"),
    (UnsupportedMode, 422, "Mode not available"),
    (InvalidParameters, 422, "Invalid model parameters"),
    (PayloadTooLarge, 413, "Payload too large"),
    (UnsupportedMediaType, 415, "Unsupported media type"),
    (InvalidContinuation, 400, "Invalid continuation"),
    (InvalidInput, 400, "Invalid request"),
    (Unauthenticated, 401, "Authentication required"),
    (Forbidden, 403, "Forbidden"),
    (Gone, 410, "Gone"),
    (NotFound, 404, "Not found"),
    (Conflict, 409, "Conflict"),
    (TransientError, 503, "Service unavailable"),
    (ClaimCheckInvalid, 422, "Claim check invalid"),
    (PermanentError, 422, "Request cannot be processed"),
    (PolicyRefusal, 422, "Refused by policy"),
    (ConfigurationError, 500, "Service misconfigured"),
    (InferbusError, 500, "Internal error"),
)


@dataclass(frozen=True)
class Problem:
    status: int
    title: str
    detail: str
    code: str
    extensions: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def type(self) -> str:
        return PROBLEM_TYPE_PREFIX + self.code.replace("_", "-")

    def body(self) -> bytes:
        document = {
            "type": self.type,
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            **self.extensions,
        }
        return json.dumps(document).encode("utf-8")


def problem_for(error: InferbusError) -> Problem:
    """The problem document and headers for an application error."""
    status, title = 500, "Internal error"
    for error_type, mapped_status, mapped_title in STATUS_BY_ERROR:
        if isinstance(error, error_type):
            status, title = mapped_status, mapped_title
            break
    extensions: dict[str, Any] = {}
    headers: dict[str, str] = {}
    if isinstance(error, InvalidInput) and error.fields:
        extensions["errors"] = [{"field": f.field, "message": f.message} for f in error.fields]
    if isinstance(error, BudgetExceeded):
        extensions["budget"] = {
            "name": error.budget, "period": error.period, "limit": error.limit,
            "spent": error.spent, "resets_at": error.resets_at,
        }  # fmt: skip
    retry_after = getattr(error, "retry_after", None)
    if retry_after is not None:
        headers["Retry-After"] = str(max(1, round(retry_after)))
    elif status == 503:
        headers["Retry-After"] = "5"
    detail = error.message if status != 500 else "the service cannot handle this request now"
    return Problem(status, title, detail, error.code, extensions, headers)


def unexpected_problem() -> Problem:
    """For bugs: no internals leak to the caller; the log has the traceback."""
    return Problem(500, "Internal error", "an unexpected error occurred", "internal_error")
