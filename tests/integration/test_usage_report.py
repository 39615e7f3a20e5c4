"""The ``usage`` ops command against Azurite, through ``BlobJsonDocuments`` (concurrent
reads), printed as JSON: by default the usage ledger's month documents, written by the
app's ``TenantSpending``, listed and read back with the tenant catalog's budgets; with
``--from-jobs`` the jobs written by the app's job store (with their index tags), found by
a tag query.

Each test has its own jobs and usage containers, so the command sees only the test's
documents; the documents port notes every document read, so a test can tell what the
report read.
"""

from __future__ import annotations

import json
import threading
import uuid
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from shared.accounting.ledger import Answer, Spend
from shared.adapters.blob_documents import BlobJsonDocuments
from shared.adapters.blob_storage import AzureBlobStore, blob_service_client
from shared.contracts import (
    Cost,
    InferenceResult,
    Job,
    JobStatus,
    ProcessingMode,
    ResultDocument,
    TokenUsage,
)
from shared.documents import Document
from shared.entrypoints.bootstrap import Services, build_services
from shared.entrypoints.cli.ops import main
from shared.entrypoints.port_sets import azure_ports, replaced
from shared.job_index import index_tags
from shared.jobs import transition
from tests.fixtures.azurite import Azurite
from tests.integration.conftest import make_settings
from tests.support.catalogs import priced_catalog_file
from tests.support.jobs import accepted_job, usage
from tests.support.wiring import tenant_catalog

pytestmark = pytest.mark.integration

BUDGET = {"tokens_per_day": 3000, "cost_per_month": 20}


class ReadCounting(BlobJsonDocuments):
    """The app's documents on Azurite, noting the name of every document read."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.read_names: list[str] = []
        self._noting = threading.Lock()

    def load(self, container: str, name: str) -> tuple[Document, str] | None:
        with self._noting:
            self.read_names.append(name)
        return super().load(container, name)


@pytest.fixture
def services(azurite: Azurite, storage: AzureBlobStore, tmp_path: Path) -> Services:
    """The app's services over Azurite with fresh jobs and usage containers and a tenant
    catalog giving ``trial`` a budget (no Service Bus is opened: the command only reads
    storage); its documents note their reads (``reads``)."""
    jobs, usage = f"jobs-{uuid.uuid4().hex[:10]}", f"usage-{uuid.uuid4().hex[:10]}"
    storage.ensure_containers([jobs, usage])
    catalog = tenant_catalog(tmp_path, {"tenants": {"trial": {"budget": BUDGET}}})
    settings = make_settings(
        azurite, JobsContainer=jobs, UsageContainer=usage,
        ModelCatalog=priced_catalog_file(tmp_path), **catalog,
    )  # fmt: skip
    documents = ReadCounting(blob_service_client(settings))
    return build_services(settings, replaced(azure_ports(settings), documents=documents))


def reads(services: Services) -> list[str]:
    """The names of the documents read so far, in name order."""
    documents = services.ports.documents
    assert isinstance(documents, ReadCounting)
    return sorted(documents.read_names)


@pytest.fixture
def today() -> date:
    return datetime.now(UTC).date()


def record(
    services: Services,
    tenant: str,
    finished: datetime | None,
    tokens: TokenUsage | None,
    *,
    mode: ProcessingMode = ProcessingMode.QUEUE,
    outcome: str = "completed",
) -> Job:
    """A job written by the app's job store; finished (with a result) when ``finished``."""
    created = (finished or datetime.now(UTC)) - timedelta(minutes=3)
    job = accepted_job(tenant, created, mode=mode)
    if finished is not None:
        answer = InferenceResult(
            summary="Invoice 12", document_type="invoice", confidence=0.9, usage=tokens
        )
        result = ResultDocument.model_validate(
            {
                "request_id": job.id,
                "tenant_id": tenant,
                "model": job.model,
                "outcome": outcome,
                "result": answer.model_dump(),
                "refusal": {"category": "hate", "message": "no"} if outcome == "refused" else None,
                "completed_at": finished.isoformat(),
            }
        )
        job = transition(job, JobStatus.COMPLETED, lambda: finished, result=result)
    assert services.jobs.create(job) is not None
    return job


def name_of(job: Job) -> str:
    return f"{job.tenant_id}/{job.id}.json"


def printed_json(
    services: Services, capsys: pytest.CaptureFixture[str], *argv: str, source: str = "jobs"
) -> dict[str, Any]:
    chosen = ["--from-jobs"] if source == "jobs" else []
    code = main(["usage", *chosen, *argv, "--json"], lambda: services)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    document: dict[str, Any] = json.loads(captured.out)
    return document


def test_usage_per_tenant_and_mode_is_read_back_from_blob_storage(
    services: Services, today: date, capsys: pytest.CaptureFixture[str]
) -> None:
    start = datetime.combine(today, time(), UTC)
    on_the_day = [
        record(services, "acme", start + timedelta(seconds=1), usage(120, 30)),
        record(services, "acme", start + timedelta(hours=1), usage(80, 20)),
        record(
            services, "acme", start + timedelta(hours=2), usage(500, 100), mode=ProcessingMode.BATCH
        ),
        record(services, "acme", start + timedelta(hours=3), usage(9, 1), outcome="refused"),
        record(services, "globex", start + timedelta(hours=4), None),
    ]
    ended_today = index_tags(on_the_day[-1])
    record(services, "globex", start - timedelta(seconds=1), usage(7000, 7000))  # yesterday
    record(services, "globex", None, None)  # still running
    container = services.settings.containers.jobs
    # Documents that are no jobs but carry the tags of a job that ended today.
    assert services.ports.documents.create(
        container,
        "acme/idempotency.json",
        {"schema": "other/v1"},
        {**ended_today, "tenant": "acme"},
    )
    blob_service_client(services.settings).get_blob_client(
        container, "globex/torn.json"
    ).upload_blob(b'{"schema": "inferb', tags=ended_today)
    # A document without tags is not in the index, whatever it holds.
    services.ports.documents.put(container, "acme/untagged.json", {"schema": "other/v1"})

    document = printed_json(services, capsys, "--day", today.isoformat())

    rows = {(row["tenant"], row["mode"]): row for row in document["rows"]}
    assert set(rows) == {("acme", "queue"), ("acme", "batch"), ("globex", "queue")}
    assert {key: rows[("acme", "queue")][key] for key in ("requests", "total_tokens")} == {
        "requests": 3,
        "total_tokens": 260,
    }
    assert rows[("acme", "batch")]["input_tokens"] == 500
    assert rows[("globex", "queue")]["requests_without_usage"] == 1
    assert {row["day"] for row in document["rows"]} == {today.isoformat()}
    assert document["totals"] == {
        "requests": 5,
        "input_tokens": 709,
        "output_tokens": 151,
        "total_tokens": 860,
        "requests_without_usage": 1,
    }
    read = document["documents"]
    assert (read["listed"], read["read"], read["unfinished"]) == (7, 7, 0)
    assert {item["name"] for item in read["not_jobs"]} == {
        "acme/idempotency.json",
        "globex/torn.json",
    }
    # Yesterday's job, the running one and the untagged document were not read.
    assert reads(services) == sorted(
        [*map(name_of, on_the_day), "acme/idempotency.json", "globex/torn.json"]
    )


def test_one_tenant_over_a_range_lists_only_its_own_jobs(
    services: Services, today: date, capsys: pytest.CaptureFixture[str]
) -> None:
    start = datetime.combine(today, time(), UTC)
    record(services, "acme", start - timedelta(hours=20), usage(1, 2))
    record(services, "acme", start + timedelta(hours=1), usage(3, 4), mode=ProcessingMode.BATCH)
    record(services, "acme-two", start + timedelta(hours=1), usage(1000, 1000))
    record(services, "globex", start + timedelta(hours=1), usage(1000, 1000))

    yesterday = today - timedelta(days=1)
    document = printed_json(
        services, capsys, "--since", yesterday.isoformat(), "--until", today.isoformat(),
        "--tenant", "acme",
    )  # fmt: skip

    assert [(row["day"], row["mode"], row["total_tokens"]) for row in document["rows"]] == [
        (yesterday.isoformat(), "queue", 3),
        (today.isoformat(), "batch", 7),
    ]
    assert document["documents"]["listed"] == 2
    assert len(reads(services)) == 2


def test_the_report_reads_only_the_jobs_the_index_names_as_ended_in_the_range(
    services: Services, today: date, capsys: pytest.CaptureFixture[str]
) -> None:
    start = datetime.combine(today, time(), UTC)
    for hours in (1, 30):  # yesterday and the day before
        record(services, "acme", start - timedelta(hours=hours), usage(1, 1))
    ended_today = record(services, "acme", start + timedelta(minutes=1), usage(2, 2))
    record(services, "acme", None, None)  # still running
    later = today + timedelta(days=2)

    nothing = printed_json(services, capsys, "--day", later.isoformat())
    assert reads(services) == []
    found = printed_json(services, capsys, "--day", today.isoformat())

    assert nothing["rows"] == []
    assert (nothing["documents"]["listed"], nothing["documents"]["read"]) == (0, 0)
    assert found["totals"]["total_tokens"] == 4
    assert (found["documents"]["listed"], found["documents"]["read"]) == (1, 1)
    assert reads(services) == [name_of(ended_today)]


# --- the usage ledger (the default) -----------------------------------------------------------


def counted(
    services: Services, tenant: str, day: date, tokens: TokenUsage | None, cost: str
) -> None:
    """One answer counted in ``tenant``'s month by the app's ledger (written at once)."""
    answer = Answer(
        f"r-{uuid.uuid4().hex[:8]}",
        "local-analyzer",
        ProcessingMode.QUEUE,
        day,
        tokens,
        Cost(amount=Decimal(cost), currency="USD"),
    )
    services.spending.record(tenant, datetime.combine(day, time(), UTC), answer)
    services.spending.flush()


def test_the_ledger_is_listed_and_read_back_with_budgets_and_held_requests(
    services: Services, today: date, capsys: pytest.CaptureFixture[str]
) -> None:
    last_month = today.replace(day=1) - timedelta(days=1)
    counted(services, "acme", today, usage(1200, 34), "0.0002004")
    counted(services, "acme", today, usage(800, 66), "0.0001596")
    counted(services, "acme", last_month, usage(9000, 9000), "9")  # another month
    counted(services, "trial", today, usage(900, 100), "0.0012345678")
    services.spending.reserve(
        "trial", "held-1", Spend(541, Decimal("0.00033")), datetime.now(UTC) + timedelta(hours=1)
    )
    container = services.settings.containers.usage
    services.ports.documents.put(container, "stray.json", {"schema": "other/v1"})
    blob_service_client(services.settings).get_blob_client(
        container, f"torn/{today:%Y-%m}.json"
    ).upload_blob(b'{"schema": "inferb')
    documents = services.ports.documents
    assert isinstance(documents, ReadCounting)
    documents.read_names.clear()  # the writer's own reads are not the report's

    document = printed_json(services, capsys, "--day", today.isoformat(), source="ledger")

    rows = {row["tenant"]: row for row in document["rows"]}
    assert set(rows) == {"acme", "trial"}
    assert (rows["acme"]["requests"], rows["acme"]["total_tokens"]) == (2, 2100)
    assert rows["acme"]["cost"] == "0.0003600"
    assert document["totals"]["cost"] == "0.0015945678"
    assert document["held"] == [
        {"tenant": "trial", "requests": 1, "tokens": 541, "cost": "0.00033"}
    ]
    budgets = {b["budget"]: b for b in document["budgets"]}
    assert set(budgets) == {"tokens_per_day", "cost_per_month"}
    assert (budgets["tokens_per_day"]["spent"], budgets["tokens_per_day"]["limit"]) == (1541, 3000)
    assert budgets["cost_per_month"]["spent"] == "0.0015645678"
    assert document["documents"]["listed"] == 3
    assert {item["name"] for item in document["documents"]["not_ledgers"]} == {
        "stray.json",
        f"torn/{today:%Y-%m}.json",
    }
    # Only this month's documents were read: not last month's, not the stray.
    month = f"{today:%Y-%m}"
    assert reads(services) == [f"acme/{month}.json", f"torn/{month}.json", f"trial/{month}.json"]
