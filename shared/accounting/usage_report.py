"""Read the stored jobs that ended in a day range and sum their usage.

Jobs are documents ``<JobsContainer>/<tenant>/<id>.json``, each stored with index tags
(``job_index``) that name the UTC day it ended and its tenant. One tag query (Find Blobs
by Tags: one call per 5,000 matches) names the jobs that ended in the range, so a report
reads that range's jobs and nothing else, however many are retained. The tag's day is
``finished_at``, the same instant the ledger counts by.

The jobs are read concurrently (``READERS`` at a time). A document can vanish between
finding and reading (the retention rule deletes old jobs) and the container can hold
something that is not a job: both are counted and named in the report, never fatal, so
one stray blob does not hide every tenant's usage. A storage outage stops the report
(``TransientError``): a partial sum would read as a complete one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field

from pydantic import ValidationError

from shared.accounting.reading import load_of_schema, read_in_order
from shared.accounting.usage import DayRange, UsageCounts, UsageLedger, UsageRow
from shared.contracts import JOB_SCHEMA, Job
from shared.documents import JsonDocuments
from shared.job_index import JobIndex, job_ids

# The Storage client keeps 10 HTTP connections per host (azure-core's requests transport):
# more readers than that would open connections only to discard them.
READERS = 10
PROGRESS_EVERY = 1000  # documents read between two progress lines


@dataclass(frozen=True)
class NotAJob:
    name: str
    reason: str


@dataclass
class DocumentTally:
    """What the report did with the documents the index named."""

    listed: int = 0
    read: int = 0
    unfinished: int = 0
    ended_without_result: int = 0
    vanished: list[str] = field(default_factory=list)
    not_jobs: list[NotAJob] = field(default_factory=list)

    def as_json(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class UsageReport:
    days: DayRange
    tenant: str | None
    rows: list[UsageRow]
    totals: UsageCounts
    documents: DocumentTally


@dataclass(frozen=True)
class _Read:
    """One listed document after reading: a job, or why it is none."""

    name: str
    job: Job | None = None
    vanished: bool = False
    not_a_job: str | None = None


def _problem(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "document"
    return f"not a valid job: {where}: {first['msg']}"


class UsageReader:
    """Reads jobs from ``container`` through the document ports and sums their usage."""

    def __init__(
        self,
        documents: JsonDocuments,
        index: JobIndex,
        container: str,
        readers: int = READERS,
    ) -> None:
        if readers < 1:
            raise ValueError(f"readers must be at least 1, not {readers}")
        self._documents = documents
        self._index = index
        self._container = container
        self._readers = readers

    def report(
        self,
        days: DayRange,
        tenant: str | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> UsageReport:
        """The usage of the jobs that finished in ``days`` (of ``tenant``, when given);
        ``progress(read, to_read)`` is told every ``PROGRESS_EVERY`` documents read and
        after the last of a long read."""
        if tenant is not None and (not tenant or "/" in tenant):
            raise ValueError(f"not a tenant id: {tenant!r}")
        tally = DocumentTally()
        ledger = UsageLedger(days, tenant)
        to_read: list[str] = []
        for name in self._index.ended_on(days.first, days.last, tenant):
            tally.listed += 1
            if job_ids(name) is None:
                tally.not_jobs.append(NotAJob(name, "not named <tenant>/<id>.json"))
            else:
                to_read.append(name)
        total = len(to_read)
        for read, outcome in enumerate(self._read_all(to_read), start=1):
            self._count(outcome, ledger, tally)
            if progress is not None and (
                read % PROGRESS_EVERY == 0 or (read == total and total >= PROGRESS_EVERY)
            ):
                progress(read, total)
        return UsageReport(days, tenant, ledger.rows(), ledger.totals(), tally)

    @staticmethod
    def _count(outcome: _Read, ledger: UsageLedger, tally: DocumentTally) -> None:
        if outcome.vanished:
            tally.vanished.append(outcome.name)
            return
        tally.read += 1
        job = outcome.job
        if job is None:
            tally.not_jobs.append(NotAJob(outcome.name, outcome.not_a_job or "not a job"))
        elif not job.status.is_terminal:
            tally.unfinished += 1
        elif job.result is not None:
            ledger.add(job)
        elif ledger.in_scope(job):
            tally.ended_without_result += 1

    def _read_all(self, names: list[str]) -> Iterator[_Read]:
        """Each document read, in listing order (``reading.read_in_order``)."""
        return read_in_order(names, self._read, self._readers, "usage-read")

    def _read(self, name: str) -> _Read:
        loaded = load_of_schema(self._documents, self._container, name, JOB_SCHEMA)
        if loaded.document is None:
            return _Read(name, not_a_job=loaded.problem, vanished=loaded.problem is None)
        try:
            return _Read(name, job=Job.model_validate(loaded.document))
        except ValidationError as error:
            return _Read(name, not_a_job=_problem(error))
