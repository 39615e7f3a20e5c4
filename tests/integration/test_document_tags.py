"""Index tags on JSON documents: written with the document in the same request, found
again by a tag query, gone with the document.

Every test runs against Azurite (``BlobJsonDocuments``: Put Blob with ``x-ms-tags``,
Find Blobs by Tags in Container) and against ``InMemoryDocuments``, with the same
assertions, so the in-memory adapter the unit tests rely on is held to what Blob storage
does. Each test has containers of its own.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta

import pytest

from shared.adapters.blob_documents import BlobJsonDocuments
from shared.adapters.blob_storage import AzureBlobStore, blob_service_client
from shared.adapters.in_memory import InMemoryDocuments
from shared.clock import as_utc, utc_now
from shared.contracts import BatchMembership, Job, JobStatus, ProcessingMode
from shared.documents import Comparison, ListedDocuments, TagCondition, TagQuery, Tags
from shared.errors import ConcurrencyConflict
from shared.job_index import JobIndex, finished_at, job_name
from shared.jobs import DocumentJobStore, JobRepository, fail, transition
from tests.fixtures.azurite import Azurite
from tests.integration.conftest import make_settings
from tests.support.jobs import accepted_job

pytestmark = pytest.mark.integration

Condition = tuple[str, Comparison, str]


@dataclass(frozen=True)
class Place:
    """Documents and two containers of their own."""

    documents: ListedDocuments
    container: str
    elsewhere: str

    def find(self, *conditions: Condition) -> list[tuple[str, dict[str, str]]]:
        """The documents of ``container`` whose tags meet all ``conditions``."""
        query = TagQuery(tuple(TagCondition(*condition) for condition in conditions))
        return self.documents.find_tagged(self.container, query)


@pytest.fixture(params=["azurite", "in_memory"])
def place(request: pytest.FixtureRequest) -> Place:
    suffix = uuid.uuid4().hex[:10]
    container, elsewhere = f"tags-{suffix}", f"tags-{suffix}-other"
    if request.param == "in_memory":
        return Place(InMemoryDocuments(), container, elsewhere)
    azurite: Azurite = request.getfixturevalue("azurite")
    client = blob_service_client(make_settings(azurite))
    AzureBlobStore(client).ensure_containers([container, elsewhere])
    return Place(BlobJsonDocuments(client), container, elsewhere)


OPEN = {"state": "open", "tenant": "acme", "changed": "2026-11-30T12:00:00.000000Z"}
ENDED = {"state": "ended", "tenant": "acme", "ended": "2026-11-30"}


# --- writing tags -----------------------------------------------------------------------------


def test_create_writes_the_tags_with_the_document_and_a_lost_create_writes_none(
    place: Place,
) -> None:
    documents, container = place.documents, place.container

    etag = documents.create(container, "acme/a.json", {"n": 1}, OPEN)
    untagged = documents.create(container, "acme/b.json", {"n": 2})
    lost = documents.create(container, "acme/a.json", {"n": 3}, ENDED)

    assert etag is not None
    assert untagged is not None
    assert lost is None
    assert documents.load(container, "acme/a.json") == ({"n": 1}, etag)
    assert place.find(("state", "=", "open")) == [("acme/a.json", {"state": "open"})]
    assert place.find(("tenant", "=", "acme"), ("changed", ">", "0000")) == [
        ("acme/a.json", {"tenant": "acme", "changed": OPEN["changed"]})
    ]
    assert place.find(("state", "=", "ended")) == []


def test_a_conditional_replace_writes_its_tags_and_a_stale_one_writes_nothing(
    place: Place,
) -> None:
    documents, container = place.documents, place.container
    first = documents.create(container, "acme/a.json", {"n": 1}, OPEN)
    assert first is not None

    second = documents.replace(container, "acme/a.json", {"n": 2}, first, ENDED)
    with pytest.raises(ConcurrencyConflict):
        documents.replace(container, "acme/a.json", {"n": 3}, first, OPEN)
    with pytest.raises(ConcurrencyConflict):
        documents.replace(container, "acme/absent.json", {"n": 4}, first, OPEN)

    assert documents.load(container, "acme/a.json") == ({"n": 2}, second)
    assert place.find(("state", "=", "open")) == []
    assert place.find(("state", "=", "ended"), ("ended", "=", "2026-11-30")) == [
        ("acme/a.json", {"state": "ended", "ended": "2026-11-30"})
    ]
    assert documents.load(container, "acme/absent.json") is None


def _replace_untagged(documents: ListedDocuments, container: str, name: str, etag: str) -> str:
    return documents.replace(container, name, {"n": 2}, etag)


def _put(documents: ListedDocuments, container: str, name: str, etag: str) -> str:
    return documents.put(container, name, {"n": 2})


@pytest.mark.parametrize("rewrite", [_replace_untagged, _put], ids=["replace", "put"])
def test_a_write_without_tags_clears_them(
    place: Place, rewrite: Callable[[ListedDocuments, str, str, str], str]
) -> None:
    documents, container = place.documents, place.container
    etag = documents.create(container, "acme/a.json", {"n": 1}, OPEN)
    assert etag is not None
    assert place.find(("tenant", "=", "acme")) == [("acme/a.json", {"tenant": "acme"})]

    new_etag = rewrite(documents, container, "acme/a.json", etag)

    assert documents.load(container, "acme/a.json") == ({"n": 2}, new_etag)
    assert place.find(("tenant", "=", "acme")) == []
    assert place.find(("state", "=", "open")) == []


# --- finding by tags --------------------------------------------------------------------------


def ended(day: str, tenant: str = "acme") -> Tags:
    return {"state": "ended", "tenant": tenant, "ended": day}


def test_find_tagged_returns_exactly_the_matching_names_with_the_tags_the_query_names(
    place: Place,
) -> None:
    documents, container = place.documents, place.container
    tagged = {
        "acme/1.json": ended("2026-11-29"),
        "acme/2.json": ended("2026-11-30"),
        "globex/3.json": ended("2026-11-30", tenant="globex"),
        "acme/4.json": ended("2026-12-01"),
        "acme/5.json": OPEN,
    }
    for name, tags in tagged.items():
        assert documents.create(container, name, {"name": name}, tags) is not None
    # The same tags in another container, and a document without tags.
    assert documents.create(place.elsewhere, "acme/2.json", {}, ended("2026-11-30")) is not None
    assert documents.create(container, "acme/6.json", {}) is not None

    on_the_30th = place.find(("ended", ">=", "2026-11-30"), ("ended", "<", "2026-12-01"))
    acme_on_the_30th = place.find(
        ("ended", ">=", "2026-11-30"), ("ended", "<", "2026-12-01"), ("tenant", "=", "acme")
    )
    exclusive_inclusive = place.find(("ended", ">", "2026-11-29"), ("ended", "<=", "2026-11-30"))
    every_day = place.find(("ended", ">=", "2026-11-29"), ("ended", "<", "2026-12-02"))

    assert place.find(("tenant", "=", "globex")) == [("globex/3.json", {"tenant": "globex"})]
    assert on_the_30th == [
        ("acme/2.json", {"ended": "2026-11-30"}),
        ("globex/3.json", {"ended": "2026-11-30"}),
    ]
    assert acme_on_the_30th == [("acme/2.json", {"ended": "2026-11-30", "tenant": "acme"})]
    assert exclusive_inclusive == on_the_30th
    assert [name for name, _ in every_day] == [
        "acme/1.json",
        "acme/2.json",
        "acme/4.json",
        "globex/3.json",
    ]
    assert place.find(("state", "=", "open"), ("tenant", "=", "acme")) == [
        ("acme/5.json", {"state": "open", "tenant": "acme"})
    ]
    assert place.find(("state", "=", "ended"), ("tenant", "=", "initech")) == []


def test_a_deleted_document_is_not_found_and_its_name_created_again_has_only_its_new_tags(
    place: Place,
) -> None:
    documents, container = place.documents, place.container
    assert documents.create(container, "acme/a.json", {}, ENDED) is not None
    etag = documents.create(container, "acme/b.json", {}, ENDED)
    assert etag is not None
    assert len(place.find(("tenant", "=", "acme"))) == 2

    documents.delete(container, "acme/a.json")
    documents.delete(container, "acme/b.json", etag)

    assert place.find(("tenant", "=", "acme")) == []
    assert documents.create(container, "acme/a.json", {}, {"state": "open"}) is not None
    assert place.find(("state", "=", "open")) == [("acme/a.json", {"state": "open"})]
    assert place.find(("tenant", "=", "acme")) == []
    assert place.find(("ended", "=", "2026-11-30")) == []


# --- the job index ----------------------------------------------------------------------------


def new_job(tenant: str, mode: ProcessingMode = ProcessingMode.QUEUE) -> Job:
    return accepted_job(tenant, utc_now(), mode=mode)


def test_a_job_is_open_in_the_index_until_it_ends_then_found_on_the_day_it_ended(
    place: Place,
) -> None:
    jobs = JobRepository(DocumentJobStore(place.documents, place.container))
    index = JobIndex(place.documents, place.container)
    job = new_job("acme")
    name = job_name("acme", job.id)

    assert jobs.create(job) is not None
    accepted_open = index.open_jobs()
    running = jobs.update("acme", job.id, lambda current: transition(current, JobStatus.RUNNING))
    running_open = index.open_jobs()
    running_day = as_utc(running.updated_at).date()
    ended_while_running = index.ended_on(running_day - timedelta(days=1), running_day)
    failed = jobs.update("acme", job.id, lambda current: fail(current, "model_error", "no"))
    day = finished_at(failed).date()

    assert accepted_open == [(name, as_utc(job.updated_at))]
    assert running_open == [(name, as_utc(running.updated_at))]
    assert ended_while_running == []
    assert index.open_jobs() == []
    assert index.ended_on(day, day) == [name]
    assert index.ended_on(day - timedelta(days=1), day + timedelta(days=1), "acme") == [name]
    assert index.ended_on(day, day, "globex") == []
    assert index.ended_on(day + timedelta(days=1), day + timedelta(days=3)) == []
    assert index.ended_on(day - timedelta(days=3), day - timedelta(days=1)) == []


def test_a_job_in_a_global_batch_submission_is_neither_open_nor_ended(place: Place) -> None:
    jobs = JobRepository(DocumentJobStore(place.documents, place.container))
    index = JobIndex(place.documents, place.container)
    job = new_job("acme", ProcessingMode.BATCH)
    name = job_name("acme", job.id)
    assert jobs.create(job) is not None
    waiting = index.open_jobs()

    submitted = jobs.update(
        "acme",
        job.id,
        lambda current: transition(
            current,
            JobStatus.RUNNING,
            batch=BatchMembership(deployment="d", submission_id="s-1", batch_id="b-1"),
        ),
    )
    day = as_utc(submitted.updated_at).date()

    assert waiting == [(name, as_utc(job.updated_at))]
    assert index.open_jobs() == []
    assert index.ended_on(day - timedelta(days=1), day + timedelta(days=1)) == []
    assert place.find(("state", "=", "batch")) == [(name, {"state": "batch"})]


def test_the_day_range_of_ended_on_includes_both_of_its_days(place: Place) -> None:
    first, last = date(2026, 11, 29), date(2026, 11, 30)
    for day in ("2026-11-28", "2026-11-29", "2026-11-30", "2026-12-01"):
        name = f"acme/{day}.json"
        assert place.documents.create(place.container, name, {}, ended(day)) is not None

    found = JobIndex(place.documents, place.container).ended_on(first, last)

    assert found == ["acme/2026-11-29.json", "acme/2026-11-30.json"]


def test_a_listing_carries_each_documents_metadata_and_a_put_replaces_it(place: Place) -> None:
    documents = place.documents
    documents.put_described(place.container, "beats/a.json", {"n": 1}, {"demand": "g:10:5"})
    documents.put_described(place.container, "beats/b.json", {"n": 2}, {})
    documents.put_described(place.elsewhere, "beats/c.json", {"n": 3}, {"demand": "g:1:1"})
    documents.put_described(place.container, "beats/a.json", {"n": 4}, {"demand": "g:7:7"})
    listed = documents.list_described(place.container, "beats/")
    assert [(entry.name, dict(entry.metadata)) for entry in listed] == [
        ("beats/a.json", {"demand": "g:7:7"}),
        ("beats/b.json", {}),
    ]
    assert all(entry.modified.tzinfo is not None for entry in listed)
    loaded = documents.load(place.container, "beats/a.json")
    assert loaded is not None
    assert loaded[0] == {"n": 4}
