"""Where the Global Batch lane keeps its records: one container (``BatchContainer``).

    pending/<deployment>/<tenant>/<request id>.json   a staged request (records.PendingRequest)
    submissions/<submission id>.json                  a submission (records.Submission)
    open/<submission id>                              present while the submission is open
    files/<submission id>/input.jsonl                 the input file, written when planned
    files/<submission id>/members.jsonl               what concluding needs of each member
    files/<submission id>/output.jsonl, errors.jsonl  the service's files, copied out
    ledger/<tenant>/<day>/<submission id>.json        the tenant's ledger (records.LedgerEntry)

The names carry what a run must find without reading: the pending listing says which
deployments and tenants have work waiting, and since when (last-modified); the ``open``
markers say which submissions still need the control plane. A submission is written
before its marker and its marker deleted after it is closed, so a crash leaves at worst a
marker of a closed submission (deleted by the next run) or a planned submission without
a marker, which never went out (its members are planned again).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime

from shared.blobs import BlobStore
from shared.documents import ListedDocuments
from shared.errors import PermanentError
from shared.global_batch.records import LedgerEntry, MemberFacts, PendingRequest, Submission

JSONL = "application/jsonl"
# Documents read (or jobs changed) at once when a run needs many (a planned file, a join):
# within the storage client's connection pool, so no connection is dropped.
READERS = 8


def concurrently[T, R](work: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """``work`` done for each of ``items``, ``READERS`` at a time; the results in order."""
    with ThreadPoolExecutor(max_workers=READERS) as pool:
        return list(pool.map(work, items))


@dataclass(frozen=True)
class Waiting:
    """A pending request as the listing shows it: enough to group and to decide when."""

    deployment: str
    tenant_id: str
    request_id: str
    staged_at: datetime


def pending_name(deployment: str, tenant_id: str, request_id: str) -> str:
    return f"pending/{deployment}/{tenant_id}/{request_id}.json"


class BatchRecords:
    def __init__(self, documents: ListedDocuments, blobs: BlobStore, container: str) -> None:
        self._documents = documents
        self._blobs = blobs
        self.container = container

    # --- pending requests ------------------------------------------------------------

    def stage(self, pending: PendingRequest) -> bool:
        """Record a staged request; False when it was staged already (kept as it was)."""
        name = pending_name(pending.deployment, pending.tenant_id, pending.request_id)
        return self._documents.create(self.container, name, _dump(pending)) is not None

    def restage(self, pending: PendingRequest) -> None:
        """Overwrite a staged request (a resubmission counts itself in it)."""
        name = pending_name(pending.deployment, pending.tenant_id, pending.request_id)
        self._documents.put(self.container, name, _dump(pending))

    def waiting(self) -> list[Waiting]:
        found = []
        for name, modified in self._documents.list_modified(self.container, "pending/"):
            parts = name.removeprefix("pending/").split("/")
            if len(parts) != 3 or not parts[2].endswith(".json"):
                continue
            found.append(Waiting(parts[0], parts[1], parts[2].removesuffix(".json"), modified))
        return found

    def pending(self, deployment: str, tenant_id: str, request_id: str) -> PendingRequest | None:
        loaded = self._documents.load(
            self.container, pending_name(deployment, tenant_id, request_id)
        )
        return PendingRequest.model_validate(loaded[0]) if loaded else None

    def pending_many(
        self, deployment: str, tenant_id: str, request_ids: Iterable[str]
    ) -> dict[str, PendingRequest]:
        """The staged requests that still exist, read concurrently."""
        found = concurrently(lambda rid: self.pending(deployment, tenant_id, rid), request_ids)
        return {pending.request_id: pending for pending in found if pending is not None}

    def unstage(self, deployment: str, tenant_id: str, request_ids: Iterable[str]) -> None:
        concurrently(
            lambda rid: self._documents.delete(
                self.container, pending_name(deployment, tenant_id, rid)
            ),
            request_ids,
        )

    # --- submissions -------------------------------------------------------------------

    def open(self, submission: Submission) -> None:
        """Record a new submission, then mark it open (the order the docstring relies on)."""
        if self._documents.create(self.container, _submission(submission.id), _dump(submission)):
            self._documents.put(self.container, f"open/{submission.id}", {})
            return
        raise PermanentError(f"submission {submission.id} exists already")

    def open_ids(self) -> list[str]:
        names = self._documents.list_names(self.container, "open/")
        return [name.removeprefix("open/") for name in names]

    def submission(self, submission_id: str) -> tuple[Submission, str] | None:
        if not submission_id or "/" in submission_id:
            return None
        loaded = self._documents.load(self.container, _submission(submission_id))
        if loaded is None:
            return None
        return Submission.model_validate(loaded[0]), loaded[1]

    def save(self, submission: Submission, etag: str) -> str:
        """Compare-and-swap: a cancelling caller and the control plane may both write."""
        return self._documents.replace(
            self.container, _submission(submission.id), _dump(submission), etag
        )

    def unmark(self, submission_id: str) -> None:
        self._documents.delete(self.container, f"open/{submission_id}")

    # --- copies of the service's files and the ledger ------------------------------------

    def keep_file(self, submission_id: str, kind: str, content: bytes) -> None:
        self._blobs.upload(self.container, _file(submission_id, kind), content, JSONL, {})

    def kept_file(self, submission_id: str, kind: str) -> bytes | None:
        return self._blobs.read(self.container, _file(submission_id, kind))

    def keep_members(self, submission_id: str, members: Iterable[MemberFacts]) -> None:
        lines = (member.model_dump_json(by_alias=True) + "\n" for member in members)
        self.keep_file(submission_id, "members", "".join(lines).encode("utf-8"))

    def kept_members(self, submission_id: str) -> dict[str, MemberFacts]:
        """The members' facts by request id (empty when the document is missing)."""
        content = self.kept_file(submission_id, "members") or b""
        members = (MemberFacts.model_validate_json(line) for line in content.splitlines() if line)
        return {member.request.request_id: member for member in members}

    def record_in_ledger(self, entry: LedgerEntry) -> None:
        """Idempotent: the name is the submission's, so a repeated run writes the same."""
        self._documents.put(self.container, _ledger(entry), _dump(entry))

    def ledger_entries(self, tenant_id: str, day: str) -> list[LedgerEntry]:
        names = self._documents.list_names(self.container, f"ledger/{tenant_id}/{day}/")
        entries = []
        for name in names:
            loaded = self._documents.load(self.container, name)
            if loaded is not None:
                entries.append(LedgerEntry.model_validate(loaded[0]))
        return entries


def _dump(record: PendingRequest | Submission | LedgerEntry) -> dict[str, object]:
    return record.model_dump(mode="json", by_alias=True)


def _submission(submission_id: str) -> str:
    return f"submissions/{submission_id}.json"


def _file(submission_id: str, kind: str) -> str:
    return f"files/{submission_id}/{kind}.jsonl"


def _ledger(entry: LedgerEntry) -> str:
    day = entry.submitted_at.date().isoformat()
    return f"ledger/{entry.tenant_id}/{day}/{entry.submission_id}.json"
