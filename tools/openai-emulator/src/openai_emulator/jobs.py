"""One batch job: its fields as the SDK's ``openai.types.Batch`` has them, and its steps.

The service's path is ``validating -> in_progress -> finalizing -> completed`` (or
``failed`` from validating, ``cancelling -> cancelled``, ``expired``). Each step here is
one of those transitions; ``BatchService`` decides when they happen (a test's advance or
the auto-advance timer). The lines are answered when ``in_progress`` ends, the output and
error files written when the batch completes, expires or is cancelled.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from .answers import Answer, answer, expired, jsonl, result_order
from .files import FileStore
from .input_file import InputFile, error

DAY = 86_400
ACTIVE = ("validating", "in_progress", "finalizing")  # whose tokens are enqueued
FORWARD = ("validating", "in_progress", "finalizing", "completed")
TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})
TIMESTAMPS = (
    "in_progress_at",
    "finalizing_at",
    "completed_at",
    "failed_at",
    "expired_at",
    "cancelling_at",
    "cancelled_at",
)


def thousands(limit: int) -> str:
    """A limit as the service writes it in its refusal: in thousands (``30K``)."""
    return f"{limit / 1000:g}K"


def quota_error(limit: int, model: str) -> dict[str, Any]:
    """The service's refusal when enqueued tokens pass the deployment's limit (its text)."""
    return error(
        "token_limit_exceeded",
        f"The number of enqueued tokens has surpassed the configured limit of "
        f"{thousands(limit)} for the deployment '{model}'. Please either increase the limit "
        "or try again once the current jobs have finished.",
    )


@dataclass
class BatchJob:
    id: str
    sequence: int  # creation order (ids are random)
    endpoint: str
    input_file_id: str
    metadata: dict[str, str] | None
    output_expiry: int | None  # seconds after the output files' creation
    plan: InputFile  # the input file as read at creation, applied in validating
    lines: int  # non-blank lines of the input file
    created_at: int = field(default_factory=lambda: int(time.time()))
    status: str = "validating"
    times: dict[str, int | None] = field(default_factory=lambda: dict.fromkeys(TIMESTAMPS))
    errors: list[dict[str, Any]] | None = None
    counts: dict[str, int] = field(
        default_factory=lambda: {"total": 0, "completed": 0, "failed": 0}
    )
    answers: list[Answer] | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    last_step: float = field(default_factory=time.monotonic)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "errors": None if self.errors is None else {"object": "list", "data": self.errors},
            "input_file_id": self.input_file_id,
            "completion_window": "24h",
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": self.created_at,
            "expires_at": self.created_at + DAY,
            **self.times,
            "request_counts": dict(self.counts),
            "metadata": self.metadata,
            "model": self.plan.model,
        }

    def _move(self, status: str, stamp: str | None = None) -> None:
        self.status = status
        self.times[stamp or f"{status}_at"] = int(time.time())
        self.last_step = time.monotonic()

    def fail(self, errors: list[dict[str, Any]]) -> None:
        self.errors = errors
        self._move("failed")

    def start(self) -> None:
        self.counts["total"] = len(self.plan.requests)
        self._move("in_progress")

    def answer_lines(self, count: int | None = None) -> list[Answer]:
        model = self.plan.model or ""
        if self.answers is None:
            requests = self.plan.requests if count is None else self.plan.requests[:count]
            return [answer(request, model) for request in requests]
        return self.answers if count is None else self.answers[:count]

    def finalize(self) -> None:
        self.answers = self.answer_lines()
        self._count(self.answers)
        self._move("finalizing")

    def _count(self, answers: list[Answer]) -> None:
        self.counts["completed"] = sum(a.succeeded for a in answers)
        self.counts["failed"] = len(answers) - self.counts["completed"]

    def write_results(self, files: FileStore, answers: list[Answer]) -> None:
        """The output (2xx) and error files; an empty one is not created (its id stays null)."""
        for succeeded, kind in ((True, "output"), (False, "error")):
            chosen = result_order([a for a in answers if a.succeeded is succeeded])
            if chosen:
                stored = files.add(
                    f"{self.id}_{kind}.jsonl", "batch_output", jsonl(chosen), self.output_expiry
                )
                setattr(self, f"{kind}_file_id", stored.id)

    def complete(self, files: FileStore) -> None:
        self.write_results(files, self.answers or [])
        self._move("completed")

    def cancel(self) -> None:
        self._move("cancelling")

    def cancelled(self, files: FileStore) -> None:
        """Only lines already answered (none: answers exist from finalizing on) are kept."""
        self.write_results(files, self.answers or [])
        self._move("cancelled")

    def expire(self, files: FileStore, completed_lines: int) -> None:
        """The window ran out after the first ``completed_lines`` lines were answered."""
        answers = self.answer_lines(completed_lines)
        self.counts["total"] = len(self.plan.requests)
        self._count(answers)
        unanswered = [expired(request) for request in self.plan.requests[completed_lines:]]
        self.write_results(files, answers + unanswered)
        self._move("expired")
