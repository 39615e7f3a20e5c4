"""A job as intake records one, for the tests that store jobs directly, and an answer's
usage."""

from __future__ import annotations

import uuid
from datetime import datetime

from shared.contracts import InlineText, Job, ProcessingMode, TokenUsage


def accepted_job(
    tenant: str,
    at: datetime,
    *,
    deadline: datetime | None = None,
    mode: ProcessingMode = ProcessingMode.QUEUE,
) -> Job:
    """A new ``accepted`` job of ``tenant`` for the local analyzer, recorded ``at``."""
    return Job(
        id=str(uuid.uuid4()),
        tenant_id=tenant,
        model="local-analyzer",
        input=InlineText(text="Invoice 12: 300 EUR due."),
        correlation_id="c",
        created_at=at,
        updated_at=at,
        deadline=deadline,
        mode=mode,
    )


def usage(input_tokens: int, output_tokens: int) -> TokenUsage:
    """An answer's usage of ``input_tokens`` and ``output_tokens``."""
    return TokenUsage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=input_tokens + output_tokens,
    )
