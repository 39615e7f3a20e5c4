"""Tag the jobs written before the job index existed, once, after an upgrade.

The periodic jobs find jobs by their index tags (``job_index``); a job stored by an
earlier version has none, so neither the watchdog nor the usage report would ever see
it. ``JobReindexer`` finds the untagged ones (the container's names minus those the index
knows) and writes each again through the job store, unchanged but for its tags: a
compare-and-swap on the ETag it read, so a job that changed meanwhile keeps its newer
state, and its newer write carried tags already. This reads every retained job name once:
an upgrade step (``python -m shared.ops jobs reindex``), not a periodic job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from shared.documents import ListedDocuments, TagCondition, TagQuery
from shared.errors import ConcurrencyConflict, PermanentError
from shared.job_index import BEGINNING, CHANGED, job_ids
from shared.jobs import DocumentJobStore

# Tagged jobs all carry ``changed``: this query names every one of them.
EVERY_TAGGED_JOB = TagQuery((TagCondition(CHANGED, ">", BEGINNING),))


@dataclass
class ReindexReport:
    listed: int = 0
    already_tagged: int = 0
    tagged: int = 0
    changed_meanwhile: int = 0
    vanished: int = 0
    not_jobs: list[str] = field(default_factory=list)


class JobReindexer:
    """Writes the index tags of every job in ``container`` that has none."""

    def __init__(self, documents: ListedDocuments, container: str) -> None:
        self._documents = documents
        self._container = container
        self._store = DocumentJobStore(documents, container)

    def untagged(self) -> tuple[int, list[str]]:
        """How many documents the container holds, and the names of those without tags."""
        names = self._documents.list_names(self._container, "")
        tagged = {
            name for name, _ in self._documents.find_tagged(self._container, EVERY_TAGGED_JOB)
        }
        return len(names), [name for name in names if name not in tagged]

    def reindex(
        self, dry_run: bool = False, progress: Callable[[int, int], None] | None = None
    ) -> ReindexReport:
        """Tag every untagged job (``dry_run``: only count them); ``progress(done, total)``
        is told every 1,000 jobs."""
        report = ReindexReport()
        report.listed, untagged = self.untagged()
        report.already_tagged = report.listed - len(untagged)
        for done, name in enumerate(untagged, start=1):
            self._tag(name, dry_run, report)
            if progress is not None and (done % 1000 == 0 or done == len(untagged)):
                progress(done, len(untagged))
        return report

    def _tag(self, name: str, dry_run: bool, report: ReindexReport) -> None:
        ids = job_ids(name)
        if ids is None:
            report.not_jobs.append(name)
            return
        try:
            current = self._store.load(*ids)
        except (PermanentError, ValueError):
            report.not_jobs.append(name)
            return
        if current is None:
            report.vanished += 1
            return
        if dry_run:
            report.tagged += 1
            return
        try:
            self._store.replace(current.job, current.etag)
        except ConcurrencyConflict:
            report.changed_meanwhile += 1  # its newer write carried its tags
            return
        report.tagged += 1
