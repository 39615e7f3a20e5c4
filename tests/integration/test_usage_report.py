"""The ``usage`` ops command against Azurite: jobs written by the app's job store, read
back through ``BlobJsonDocuments`` (its listing with last-modified times and concurrent
reads), printed as JSON.

Each test has its own jobs container, so the command sees only the test's documents.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import pytest

from shared.adapters.blob_storage import AzureBlobStore
from shared.contracts import (
    InferenceResult,
    InlineText,
    Job,
    JobStatus,
    ProcessingMode,
    ResultDocument,
    TokenUsage,
)
from shared.entrypoints.bootstrap import Services, build_services
from shared.entrypoints.cli.ops import main
from shared.entrypoints.port_sets import azure_ports
from shared.jobs import transition
from tests.fixtures.azurite import Azurite
from tests.integration.conftest import make_settings

pytestmark = pytest.mark.integration


@pytest.fixture
def services(azurite: Azurite, storage: AzureBlobStore) -> Services:
    """The app's services over Azurite with a fresh jobs container (no Service Bus is
    opened: the command only reads storage)."""
    jobs = f"jobs-{uuid.uuid4().hex[:10]}"
    storage.ensure_containers([jobs])
    settings = make_settings(azurite, JobsContainer=jobs)
    return build_services(settings, azure_ports(settings))


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
) -> None:
    """A job written by the app's job store; finished (with a result) when ``finished``."""
    created = (finished or datetime.now(UTC)) - timedelta(minutes=3)
    job = Job(
        id=str(uuid.uuid4()),
        tenant_id=tenant,
        model="local-analyzer",
        input=InlineText(text="Invoice 12: 300 EUR due."),
        correlation_id="c",
        created_at=created,
        updated_at=created,
        mode=mode,
    )
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


def usage(input_tokens: int, output_tokens: int) -> TokenUsage:
    return TokenUsage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=input_tokens + output_tokens,
    )


def printed_json(
    services: Services, capsys: pytest.CaptureFixture[str], *argv: str
) -> dict[str, Any]:
    code = main(["usage", *argv, "--json"], lambda: services)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    document: dict[str, Any] = json.loads(captured.out)
    return document


def test_usage_per_tenant_and_mode_is_read_back_from_blob_storage(
    services: Services, storage: AzureBlobStore, today: date, capsys: pytest.CaptureFixture[str]
) -> None:
    start = datetime.combine(today, time(), UTC)
    record(services, "acme", start + timedelta(seconds=1), usage(120, 30))
    record(services, "acme", start + timedelta(hours=1), usage(80, 20))
    record(services, "acme", start + timedelta(hours=2), usage(500, 100), mode=ProcessingMode.BATCH)
    record(services, "acme", start + timedelta(hours=3), usage(9, 1), outcome="refused")
    record(services, "globex", start + timedelta(hours=4), None)
    record(services, "globex", start - timedelta(seconds=1), usage(7000, 7000))  # yesterday
    record(services, "globex", None, None)  # still running
    container = services.settings.containers.jobs
    services.ports.documents.put(container, "acme/idempotency.json", {"schema": "other/v1"})
    storage.upload(container, "globex/torn.json", b'{"schema": "inferb', "application/json", {})

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
    assert (read["listed"], read["read"], read["unfinished"]) == (9, 9, 1)
    assert {item["name"] for item in read["not_jobs"]} == {
        "acme/idempotency.json",
        "globex/torn.json",
    }


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


def test_jobs_written_before_the_range_are_skipped_by_their_listing(
    services: Services, today: date, capsys: pytest.CaptureFixture[str]
) -> None:
    for _ in range(3):
        record(services, "acme", datetime.now(UTC), usage(1, 1))
    later = today + timedelta(days=2)

    document = printed_json(services, capsys, "--day", later.isoformat())

    assert document["rows"] == []
    read = document["documents"]
    assert (read["listed"], read["skipped_by_last_modified"], read["read"]) == (3, 3, 0)
