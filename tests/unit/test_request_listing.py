"""``GET /api/v1/requests``: newest first, filters, pages, tokens, and what a page costs."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from shared.adapters.in_memory import InMemoryDocuments
from shared.contracts import Job, JobStatus
from shared.documents import NamePage
from shared.entrypoints.http.listing import (
    ListQuery,
    RequestListEndpoint,
    decode_token,
    encode_token,
    parse_query,
)
from shared.entrypoints.http.messages import ApiRequest, guarded
from shared.errors import InvalidContinuation, InvalidInput
from shared.intake.tenancy import CallerTenancy
from shared.job_listing import JobListing, Phase, Position, is_timed, time_prefix
from shared.jobs import DocumentJobStore
from shared.request_ids import new_request_id

CONTAINER = "jobs"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
URL = "http://localhost:7071/api/v1/requests"


class CountedDocuments(InMemoryDocuments):
    """In-memory documents that count the listing calls and document reads."""

    def __init__(self) -> None:
        super().__init__()
        self.listings = 0
        self.reads = 0

    def list_page(
        self, container: str, prefix: str, limit: int, marker: str | None = None
    ) -> NamePage:
        self.listings += 1
        return super().list_page(container, prefix, limit, marker)

    def load(self, container: str, name: str) -> tuple[dict[str, object], str] | None:
        self.reads += 1
        return super().load(container, name)


def job(tenant: str, job_id: str, created: datetime, **changes: object) -> Job:
    fields: dict[str, object] = {
        "id": job_id,
        "tenant_id": tenant,
        "model": "local-analyzer",
        "correlation_id": job_id,
        "created_at": created,
        "updated_at": created,
    }
    fields.update(changes)
    return Job.model_validate(fields)


def stored(documents: InMemoryDocuments, *jobs: Job) -> DocumentJobStore:
    store = DocumentJobStore(documents, CONTAINER)
    for each in jobs:
        assert store.create(each) is not None
    return store


def minted(tenant: str, count: int, spacing: timedelta, **changes: object) -> list[Job]:
    """``count`` jobs minted ``spacing`` apart, the last a minute before NOW."""
    first = NOW - timedelta(minutes=1) - spacing * (count - 1)
    moments = [first + spacing * index for index in range(count)]
    return [job(tenant, minted_at(moment), moment, **changes) for moment in moments]


def minted_at(moment: datetime) -> str:
    return new_request_id(lambda: moment)


def listing(documents: InMemoryDocuments, store: DocumentJobStore) -> JobListing:
    return JobListing(documents, store, CONTAINER, lambda: NOW)


def everything(listing_: JobListing, tenant: str, limit: int, query: ListQuery) -> list[str]:
    ids: list[str] = []
    position: Position | None = listing_.start()
    pages = 0
    while position is not None:
        page = listing_.page(tenant, position, limit, query.accepts)
        ids.extend(j.id for j in page.jobs)
        position = page.next
        pages += 1
        assert pages < 1_000, "the listing does not end"
    return ids


def test_time_prefix_is_the_start_of_a_minted_id() -> None:
    request_id = new_request_id(lambda: NOW)
    millis = int(NOW.timestamp() * 1000)
    assert request_id.startswith(time_prefix(millis))
    assert is_timed(request_id, time_prefix(millis + 1))
    assert not is_timed(request_id, time_prefix(millis))
    assert not is_timed(str(uuid.uuid5(uuid.NAMESPACE_URL, "x")), "ffffffff-ffff")


@pytest.mark.parametrize(
    ("count", "spacing", "limit"),
    [
        (5, timedelta(hours=1), 50),
        (120, timedelta(seconds=1), 25),
        (80, timedelta(hours=19), 7),
        (60, timedelta(milliseconds=1), 10),
    ],
)
def test_every_job_comes_once_newest_first(count: int, spacing: timedelta, limit: int) -> None:
    documents = InMemoryDocuments()
    jobs = minted("contoso", count, spacing)
    other = minted("fabrikam", 10, spacing)
    store = stored(documents, *jobs, *other)
    ids = everything(listing(documents, store), "contoso", limit, ListQuery())
    expected = [j.id for j in sorted(jobs, key=lambda j: (j.created_at, j.id), reverse=True)]
    assert ids == expected


def test_ids_without_a_time_come_after_the_minted_ones() -> None:
    documents = InMemoryDocuments()
    timed = minted("contoso", 30, timedelta(minutes=3))
    producers = [
        job("contoso", str(uuid.uuid5(uuid.NAMESPACE_URL, f"line-{n}")), NOW) for n in range(20)
    ]
    named = [job("contoso", "order-4711", NOW), job("contoso", "0-early", NOW)]
    store = stored(documents, *timed, *producers, *named)
    ids = everything(listing(documents, store), "contoso", 8, ListQuery())
    assert ids[:30] == [j.id for j in reversed(timed)]
    assert sorted(ids[30:]) == sorted(j.id for j in producers + named)
    assert ids[30:] == sorted(ids[30:]), "the untimed ones come in name order"


def test_filters_keep_only_matching_jobs() -> None:
    documents = InMemoryDocuments()
    done = minted("contoso", 12, timedelta(minutes=5), status=JobStatus.COMPLETED)
    failed = minted("contoso", 3, timedelta(minutes=7), status=JobStatus.FAILED)
    other_model = minted("contoso", 4, timedelta(minutes=11), model="summarizer")
    store = stored(documents, *done, *failed, *other_model)
    query = ListQuery(statuses=frozenset({JobStatus.FAILED, JobStatus.COMPLETED}))
    query = query.model_copy(update={"model": "local-analyzer"})
    ids = everything(listing(documents, store), "contoso", 5, query)
    expected = sorted(done + failed, key=lambda j: j.id, reverse=True)
    assert ids == [j.id for j in expected]


def test_a_page_costs_its_reads_and_a_few_listings_not_the_tenants_jobs() -> None:
    documents = CountedDocuments()
    jobs = minted("contoso", 3_000, timedelta(seconds=2))
    store = stored(documents, *jobs)
    page = listing(documents, store).page("contoso", listing(documents, store).start(), 50, bool)
    assert [j.id for j in page.jobs] == [j.id for j in reversed(jobs[-50:])]
    assert documents.reads == 50
    assert documents.listings <= 16, documents.listings


def test_a_rare_status_ends_the_page_short_with_a_way_on() -> None:
    documents = CountedDocuments()
    jobs = minted("contoso", 600, timedelta(seconds=5))
    jobs[3] = jobs[3].model_copy(update={"status": JobStatus.FAILED})
    store = stored(documents, *jobs)
    lister = JobListing(documents, store, CONTAINER, lambda: NOW, extra_calls=20)
    query = ListQuery(statuses=frozenset({JobStatus.FAILED}))
    first = lister.page("contoso", lister.start(), 10, query.accepts)
    assert first.jobs == ()
    assert first.next is not None
    assert documents.reads + documents.listings <= 10 + 20 + 1
    assert everything(lister, "contoso", 10, query) == [jobs[3].id]


def test_tokens_round_trip_and_refuse_what_they_did_not_issue() -> None:
    position = Position(horizon="019ca3b4-5c6d", bound="019ca3b4-5", phase=Phase.TIMED)
    scope = ListQuery().scope("contoso")
    token = encode_token(position, scope)
    assert decode_token(token, scope) == position
    scanning = Position("019ca3b4-5c6d", "", Phase.UNTIMED, marker="m!2", after="order-1")
    assert decode_token(encode_token(scanning, scope), scope) == scanning
    with pytest.raises(InvalidContinuation, match="another tenant"):
        decode_token(token, ListQuery().scope("fabrikam"))
    failed_only = ListQuery(statuses=frozenset({JobStatus.FAILED}))
    with pytest.raises(InvalidContinuation, match="another tenant or another status"):
        decode_token(token, failed_only.scope("contoso"))
    for garbage in ("not base64!", "e30", token[:-3], "x" * 5_000):
        with pytest.raises(InvalidContinuation):
            decode_token(garbage, scope)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "0"}, "query.limit"),
        ({"limit": "201"}, "query.limit"),
        ({"limit": "ten"}, "query.limit"),
        ({"status": "completed,done"}, "query.status"),
        ({"model": "no spaces"}, "query.model"),
    ],
)
def test_bad_query_parameters_are_named(params: dict[str, str], field: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        parse_query(params)
    assert [f.field for f in raised.value.fields] == [field]


def test_query_parameters_are_read() -> None:
    query = parse_query({"status": "failed, expired", "model": "m-1", "limit": "7", "code": "k"})
    assert query.statuses == {JobStatus.FAILED, JobStatus.EXPIRED}
    assert (query.model, query.limit) == ("m-1", 7)
    assert parse_query({}).limit == 50


def request(params: dict[str, str], tenant: str = "contoso") -> ApiRequest:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return ApiRequest("GET", f"{URL}?{query}", {"x-tenant-id": tenant}, params)


def test_the_endpoint_pages_with_next_links_and_refuses_foreign_tokens() -> None:
    documents = InMemoryDocuments()
    jobs = minted("contoso", 3, timedelta(minutes=1))
    endpoint = RequestListEndpoint(
        listing(documents, stored(documents, *jobs)), CallerTenancy(("tid",), True)
    )
    first = guarded(endpoint.list, request({"limit": "2", "code": "secret"}))
    assert first.status == 200
    body = json.loads(first.body)
    assert [item["id"] for item in body["requests"]] == [jobs[2].id, jobs[1].id]
    assert body["requests"][0]["status_url"] == f"{URL}/{jobs[2].id}"
    assert set(body["requests"][0]) >= {"status", "model", "priority", "mode", "created_at"}
    assert "code=" not in body["next"]
    assert "limit=2" in body["next"]

    second = json.loads(
        guarded(endpoint.list, request({"limit": "2", "continuation": body["continuation"]})).body
    )
    assert [item["id"] for item in second["requests"]] == [jobs[0].id]

    foreign = guarded(
        endpoint.list, request({"continuation": body["continuation"]}, tenant="fabrikam")
    )
    assert foreign.status == 400
    problem = json.loads(foreign.body)
    assert problem["type"] == "urn:inferbus:problem:invalid-continuation"
    assert problem["errors"][0]["field"] == "query.continuation"
