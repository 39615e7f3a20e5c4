"""Job documents and idempotency markers as JSON blobs (implements the two store ports).

Names: ``<JobsContainer>/<tenant>/<request_id>.json`` and
``<IdempotencyContainer>/<tenant>/<sha256(key)>.json``. The tenant prefix keeps tenants
apart by construction and lets lifecycle rules or operators act per tenant.
"""

from __future__ import annotations

from datetime import datetime

from shared.adapters.blob_storage import AzureBlobStore
from shared.contracts import Job
from shared.errors import PermanentError
from shared.intake.idempotency import IdempotencyRecord
from shared.jobs import Versioned


class BlobJobStore:
    def __init__(self, blobs: AzureBlobStore, container: str) -> None:
        self._blobs = blobs
        self._container = container

    @staticmethod
    def _name(tenant_id: str, job_id: str) -> str:
        return f"{tenant_id}/{job_id}.json"

    def create(self, job: Job) -> bool:
        document = job.model_dump(mode="json", by_alias=True)
        return (
            self._blobs.create_json(self._container, self._name(job.tenant_id, job.id), document)
            is not None
        )

    def load(self, tenant_id: str, job_id: str) -> Versioned | None:
        if not job_id or "/" in job_id or job_id in (".", ".."):
            return None
        found = self._blobs.load_json(self._container, self._name(tenant_id, job_id))
        if found is None:
            return None
        document, etag = found
        if document.get("schema") != "inferbus.job/v1":
            raise PermanentError(f"job {job_id} has unknown schema {document.get('schema')!r}")
        return Versioned(Job.model_validate(document), etag)

    def replace(self, job: Job, etag: str) -> str:
        document = job.model_dump(mode="json", by_alias=True)
        return self._blobs.replace_json(
            self._container, self._name(job.tenant_id, job.id), document, etag
        )


class BlobIdempotencyStore:
    def __init__(self, blobs: AzureBlobStore, container: str) -> None:
        self._blobs = blobs
        self._container = container

    @staticmethod
    def _name(tenant_id: str, key_hash: str) -> str:
        return f"{tenant_id}/{key_hash}.json"

    @staticmethod
    def _document(record: IdempotencyRecord) -> dict[str, str]:
        return {
            "tenant_id": record.tenant_id,
            "key_hash": record.key_hash,
            "request_hash": record.request_hash,
            "request_id": record.request_id,
            "state": record.state,
            "created_at": record.created_at.isoformat(),
        }

    def try_create(self, record: IdempotencyRecord) -> str | None:
        name = self._name(record.tenant_id, record.key_hash)
        return self._blobs.create_json(self._container, name, self._document(record))

    def load(self, tenant_id: str, key_hash: str) -> tuple[IdempotencyRecord, str] | None:
        found = self._blobs.load_json(self._container, self._name(tenant_id, key_hash))
        if found is None:
            return None
        document, etag = found
        record = IdempotencyRecord(
            tenant_id=document["tenant_id"],
            key_hash=document["key_hash"],
            request_hash=document["request_hash"],
            request_id=document["request_id"],
            state=document["state"],
            created_at=datetime.fromisoformat(document["created_at"]),
        )
        return record, etag

    def replace(self, record: IdempotencyRecord, etag: str) -> str:
        name = self._name(record.tenant_id, record.key_hash)
        return self._blobs.replace_json(self._container, name, self._document(record), etag)

    def delete(self, tenant_id: str, key_hash: str, etag: str) -> None:
        self._blobs.delete(self._container, self._name(tenant_id, key_hash), etag)
