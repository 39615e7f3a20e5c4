"""Token usage per UTC day, tenant, model and mode, summed from finished jobs.

A hosted model bills and throttles by tokens, and the model reports them with each
answer; the processor keeps that report in the result (``ResultDocument.usage``), and
the result in the job. Summing stored jobs therefore attributes every token to the
tenant that asked, whichever lane ran the request: the Service Bus queue lane or the
Global Batch lane (``Job.mode``). The telemetry metric ``gen_ai.client.token.usage``
counts tokens per model call, as they happen, including a call a redelivery repeated;
this counts each request once, from the answer that was kept, on the day it finished.

What is counted: a job that ended with a result (``completed`` or ``refused``: a refusal
is an answer, and the model may have reported its tokens). Its day is the UTC day it
finished. A result without reported usage counts as a request and in
``requests_without_usage``, so a model that reports nothing shows up instead of looking
free. Jobs that ended without a result (failed, expired, cancelled) consumed no tokens
anyone reported and are not rows. Everything here is pure: no storage, no SDK.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from datetime import UTC, date, datetime, time, timedelta

from shared.clock import as_utc
from shared.contracts import Job, ProcessingMode, TokenUsage
from shared.job_index import finished_at


@dataclass(frozen=True)
class DayRange:
    """UTC days ``first`` through ``last``, both included."""

    first: date
    last: date

    def __post_init__(self) -> None:
        if self.last < self.first:
            raise ValueError(
                f"the range ends ({self.last.isoformat()}) before it starts "
                f"({self.first.isoformat()})"
            )

    @classmethod
    def single(cls, day: date) -> DayRange:
        return cls(day, day)

    @property
    def start(self) -> datetime:
        """The first instant of the range."""
        return datetime.combine(self.first, time(), UTC)

    @property
    def end(self) -> datetime:
        """The first instant after the range."""
        return datetime.combine(self.last + timedelta(days=1), time(), UTC)

    def contains(self, moment: datetime) -> bool:
        return self.start <= as_utc(moment) < self.end

    def describe(self) -> str:
        if self.first == self.last:
            return self.first.isoformat()
        return f"{self.first.isoformat()} to {self.last.isoformat()}"


@dataclass(frozen=True, order=True)
class UsageKey:
    """What one row is about; ``mode`` is the lane that ran the requests (queue or batch)."""

    day: date
    tenant: str
    model: str
    mode: ProcessingMode


@dataclass(frozen=True)
class UsageCounts:
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    requests_without_usage: int = 0

    def plus(self, other: UsageCounts) -> UsageCounts:
        return UsageCounts(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )

    @classmethod
    def of_one(cls, usage: TokenUsage | None) -> UsageCounts:
        """One request's counts: its tokens, or one request without reported usage."""
        if usage is None:
            return cls(requests=1, requests_without_usage=1)
        return cls(
            requests=1,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            total_tokens=usage.total_tokens,
        )

    def as_json(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class UsageRow:
    key: UsageKey
    counts: UsageCounts

    def as_json(self) -> dict[str, object]:
        return {
            "day": self.key.day.isoformat(),
            "tenant": self.key.tenant,
            "model": self.key.model,
            "mode": self.key.mode.value,
            **self.counts.as_json(),
        }


def reported_usage(job: Job) -> TokenUsage | None:
    """The tokens the model reported for ``job``'s answer, None when it reported none."""
    return job.result.usage if job.result is not None else None


class UsageLedger:
    """Sums jobs into rows, keeping only those that finished in ``days`` (and belong to
    ``tenant``, when given). Feed it with ``add``; read ``rows`` and ``totals``."""

    def __init__(self, days: DayRange, tenant: str | None = None) -> None:
        self.days = days
        self.tenant = tenant
        self._counts: dict[UsageKey, UsageCounts] = {}

    def in_scope(self, job: Job) -> bool:
        """Whether ``job`` is a finished job of the chosen tenant that ended in range."""
        if not job.status.is_terminal:
            return False
        if self.tenant is not None and job.tenant_id != self.tenant:
            return False
        return self.days.contains(finished_at(job))

    def add(self, job: Job) -> bool:
        """Count ``job`` when it is in scope and has a result; whether it was counted."""
        if job.result is None or not self.in_scope(job):
            return False
        key = UsageKey(finished_at(job).date(), job.tenant_id, job.model, job.mode)
        one = UsageCounts.of_one(reported_usage(job))
        self._counts[key] = self._counts.get(key, UsageCounts()).plus(one)
        return True

    def rows(self) -> list[UsageRow]:
        """Rows by day, then tenant, model and mode."""
        return [UsageRow(key, self._counts[key]) for key in sorted(self._counts)]

    def totals(self) -> UsageCounts:
        total = UsageCounts()
        for counts in self._counts.values():
            total = total.plus(counts)
        return total


def account(jobs: Iterable[Job], days: DayRange, tenant: str | None = None) -> list[UsageRow]:
    """The usage rows of ``jobs`` that finished in ``days`` (of ``tenant``, when given)."""
    ledger = UsageLedger(days, tenant)
    for job in jobs:
        ledger.add(job)
    return ledger.rows()
