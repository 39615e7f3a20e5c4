"""The job index: tags written with every job, so maintenance reads what changed.

Jobs are kept for ``JobRetentionDays`` (90 by default), and the periodic jobs want a few
of them: the watchdog the unfinished ones that stopped moving, the usage report the ones
that ended on given days. Listing the container to find those costs what is retained
(one call per 5,000 jobs, every run). Instead, ``jobs.DocumentJobStore`` writes Blob
index tags with each job, in the same request as the document (``x-ms-tags`` on Put
Blob): no extra storage operation, and no moment when a job and its index disagree, so a
crash between "the job write" and "the index write" cannot happen. Find Blobs by Tags
then answers from the index, one call per 5,000 matches, whatever the container holds:

- ``state``: ``open`` (the job can still end by itself or by the watchdog), ``batch``
  (in a Global Batch submission, whose control plane ends it) or ``ended``;
- ``changed``: the job's last change (``updated_at``, UTC, fixed width, so that string
  order is time order);
- ``ended``: the UTC day it ended (``finished_at``), on ended jobs only;
- ``tenant``: its tenant, so one tenant's usage is one query.

Blob storage updates its tag index shortly after a write; the readers allow for it (the
watchdog looks only at jobs unchanged for its grace period; a usage report is read
after its days). Tags need the ``blobs/tags/write`` and ``blobs/filter/action`` data
actions, which Storage Blob Data Owner has and Contributor has not: the app is Owner of
the jobs container alone (infra/modules/storage-data.bicep).
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from enum import StrEnum

from shared.clock import as_utc
from shared.contracts import Job, JobStatus, ProcessingMode
from shared.documents import TagCondition, TaggedDocuments, TagQuery

STATE = "state"
CHANGED = "changed"
ENDED = "ended"
TENANT = "tenant"
# The oldest possible ``changed``: a query for "changed at all" compares against it.
BEGINNING = "0000"


class IndexState(StrEnum):
    OPEN = "open"
    IN_A_BATCH = "batch"
    ENDED = "ended"


def instant(moment: datetime) -> str:
    """A time as a tag value whose string order is time order."""
    return as_utc(moment).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def finished_at(job: Job) -> datetime:
    """When ``job`` ended: ``completed_at``, set by every terminal transition; a document
    written without it falls back to its result's time, then to its last change."""
    if job.completed_at is not None:
        return as_utc(job.completed_at)
    if job.result is not None:
        try:
            return as_utc(datetime.fromisoformat(job.result.completed_at))
        except ValueError:
            pass
    return as_utc(job.updated_at)


def in_a_global_batch(job: Job) -> bool:
    """A job in a submission of the Global Batch lane: that submission's control plane
    ends it (answered, resubmitted, failed, expired or cancelled), whatever its batch and
    the enqueued-token quota take, which can be days; so the watchdog leaves it alone."""
    membership = job.batch
    return (
        job.mode is ProcessingMode.BATCH
        and job.status is JobStatus.RUNNING
        and membership is not None
        and membership.submission_id is not None
    )


def index_tags(job: Job) -> dict[str, str]:
    """The tags stored with ``job`` (every write replaces them all)."""
    tags = {TENANT: job.tenant_id, CHANGED: instant(job.updated_at)}
    if job.status.is_terminal:
        tags[STATE] = IndexState.ENDED
        tags[ENDED] = finished_at(job).date().isoformat()
    elif in_a_global_batch(job):
        tags[STATE] = IndexState.IN_A_BATCH
    else:
        tags[STATE] = IndexState.OPEN
    return tags


def job_name(tenant_id: str, job_id: str) -> str:
    """A job's document name in the jobs container."""
    return f"{tenant_id}/{job_id}.json"


def job_ids(name: str) -> tuple[str, str] | None:
    """``(tenant, id)`` of a job document's name; None for anything else."""
    tenant, _, file_name = name.rpartition("/")
    if not tenant or "/" in tenant or not file_name.endswith(".json"):
        return None
    return tenant, file_name.removesuffix(".json")


class JobIndex:
    """The questions the periodic jobs ask of the index, each one tag query."""

    def __init__(self, documents: TaggedDocuments, container: str) -> None:
        self._documents = documents
        self._container = container

    def open_jobs(self) -> list[tuple[str, datetime]]:
        """Every job that can still end by itself or by the watchdog (not in a Global
        Batch submission), with its last change: as many as the backlog, not as the
        jobs retained."""
        query = TagQuery(
            (
                TagCondition(STATE, "=", IndexState.OPEN),
                TagCondition(CHANGED, ">", BEGINNING),
            )
        )
        found = self._documents.find_tagged(self._container, query)
        return [(name, datetime.fromisoformat(tags[CHANGED])) for name, tags in found]

    def ended_on(self, first: date, last: date, tenant: str | None = None) -> list[str]:
        """The jobs that ended on UTC days ``first`` through ``last`` (of ``tenant``)."""
        conditions = [
            TagCondition(ENDED, ">=", first.isoformat()),
            TagCondition(ENDED, "<", (last + timedelta(days=1)).isoformat()),
        ]
        if tenant is not None:
            conditions.append(TagCondition(TENANT, "=", tenant))
        found = self._documents.find_tagged(self._container, TagQuery(tuple(conditions)))
        return [name for name, _ in found]
