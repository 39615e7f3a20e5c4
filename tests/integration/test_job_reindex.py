"""``python -m shared.ops jobs reindex`` against Azurite: jobs stored by a version without
the job index get their tags, so the watchdog and the usage report see them."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from shared.adapters.blob_documents import BlobJsonDocuments
from shared.adapters.blob_storage import AzureBlobStore, blob_service_client
from shared.contracts import Job, JobStatus
from shared.documents import Document, Tags
from shared.entrypoints.bootstrap import Services, build_services
from shared.entrypoints.cli.ops import main
from shared.entrypoints.port_sets import azure_ports
from shared.job_index import JobIndex, index_tags, job_name
from shared.job_reindex import JobReindexer
from shared.jobs import transition
from tests.fixtures.azurite import Azurite
from tests.integration.conftest import make_settings
from tests.support.jobs import accepted_job

pytestmark = pytest.mark.integration

TENANT = "legacy"
NOW = datetime.now(UTC)


@pytest.fixture
def services(azurite: Azurite, storage: AzureBlobStore) -> Services:
    jobs = f"jobs-{uuid.uuid4().hex[:10]}"
    storage.ensure_containers([jobs])
    settings = make_settings(azurite, JobsContainer=jobs)
    return build_services(settings, azure_ports(settings))


def a_job(status: JobStatus) -> Job:
    job = accepted_job(TENANT, NOW, deadline=NOW + timedelta(minutes=5))
    return job if status is JobStatus.ACCEPTED else transition(job, status, lambda: NOW)


def store_untagged(services: Services, job: Job) -> str:
    """Write ``job`` as an earlier version did: the document, no tags."""
    name = job_name(job.tenant_id, job.id)
    document = job.model_dump(mode="json", by_alias=True)
    assert services.ports.documents.create(services.settings.containers.jobs, name, document)
    return name


def test_reindex_tags_the_jobs_stored_without_tags_and_leaves_the_rest(
    services: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    container = services.settings.containers.jobs
    documents = services.ports.documents
    index = JobIndex(documents, container)
    open_legacy = store_untagged(services, a_job(JobStatus.ACCEPTED))
    failed_legacy = store_untagged(services, a_job(JobStatus.FAILED))
    tagged = a_job(JobStatus.ACCEPTED)
    assert services.jobs.create(tagged) is not None
    documents.put(container, "notes/readme.json", {"not": "a job"})
    assert [name for name, _ in index.open_jobs()] == [job_name(TENANT, tagged.id)]

    assert main(["jobs", "reindex", "--dry-run", "--json"], lambda: services) == 0
    dry = json.loads(capsys.readouterr().out)
    assert (dry["listed"], dry["already_tagged"], dry["tagged"]) == (4, 1, 2)
    assert dry["not_jobs"] == ["notes/readme.json"]
    assert len(index.open_jobs()) == 1, "a dry run writes nothing"

    assert main(["jobs", "reindex", "--json"], lambda: services) == 0
    done = json.loads(capsys.readouterr().out)
    assert (done["listed"], done["already_tagged"], done["tagged"]) == (4, 1, 2)

    assert sorted(name for name, _ in index.open_jobs()) == sorted(
        [open_legacy, job_name(TENANT, tagged.id)]
    )
    day = NOW.date()
    assert index.ended_on(day, day, TENANT) == [failed_legacy]
    assert stored_job(services, failed_legacy).status is JobStatus.FAILED, "only tags change"

    assert main(["jobs", "reindex"], lambda: services) == 0
    again = capsys.readouterr().out
    assert "3 already tagged, tagged 0" in again


def stored_job(services: Services, name: str) -> Job:
    """The stored job of ``name``, read straight from its document."""
    found = services.ports.documents.load(services.settings.containers.jobs, name)
    assert found is not None
    return Job.model_validate(found[0])


class ChangedMeanwhile(BlobJsonDocuments):
    """The app's documents, where another writer moves every job just before the
    reindexer's compare-and-swap (as the processor might)."""

    def replace(
        self,
        container: str,
        name: str,
        document: Document,
        etag: str,
        tags: Tags | None = None,
    ) -> str:
        found = super().load(container, name)
        assert found is not None
        moved = transition(Job.model_validate(found[0]), JobStatus.RUNNING)
        super().replace(
            container, name, moved.model_dump(mode="json", by_alias=True), etag, index_tags(moved)
        )
        return super().replace(container, name, document, etag, tags)


def test_a_job_that_changed_meanwhile_keeps_its_newer_state_and_tags(
    azurite: Azurite, storage: AzureBlobStore
) -> None:
    container = f"jobs-{uuid.uuid4().hex[:10]}"
    storage.ensure_containers([container])
    settings = make_settings(azurite, JobsContainer=container)
    documents = ChangedMeanwhile(blob_service_client(settings))
    job = a_job(JobStatus.ACCEPTED)
    name = job_name(TENANT, job.id)
    documents.create(container, name, job.model_dump(mode="json", by_alias=True))

    report = JobReindexer(documents, container).reindex()

    assert (report.tagged, report.changed_meanwhile) == (0, 1)
    stored = BlobJsonDocuments.load(documents, container, name)
    assert stored is not None
    assert stored[0]["status"] == "running"
    index = JobIndex(documents, container)
    assert [found for found, _ in index.open_jobs()] == [name]
