"""Budgets held by several instances over one storage: against Azurite (``BlobJsonDocuments``:
If-Match on the month's document) and against ``InMemoryDocuments`` with the same
assertions, so the in-memory adapter the unit tests rely on is held to what Blob storage
does. Each instance has its own cache and lock, as app instances do: only the document's
ETag serialises their reservations."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from shared.accounting.ledger import Spend, month_of
from shared.accounting.spending import TenantSpending
from shared.accounting.tenants import Budget, TenantCatalog, TenantPolicy
from shared.adapters.blob_documents import BlobJsonDocuments
from shared.adapters.blob_storage import AzureBlobStore, blob_service_client
from shared.adapters.in_memory import InMemoryDocuments
from shared.documents import JsonDocuments
from shared.errors import BudgetExceeded
from tests.fixtures.azurite import Azurite
from tests.integration.conftest import make_settings

pytestmark = pytest.mark.integration

BUDGET = TenantCatalog(tenants={"trial": TenantPolicy(budget=Budget(tokens_per_day=10_000))})


@pytest.fixture(params=["azurite", "in_memory"])
def place(request: pytest.FixtureRequest) -> tuple[JsonDocuments, str]:
    """Documents and a container of their own."""
    container = f"usage-{uuid.uuid4().hex[:10]}"
    if request.param == "in_memory":
        return InMemoryDocuments(), container
    azurite: Azurite = request.getfixturevalue("azurite")
    client = blob_service_client(make_settings(azurite))
    AzureBlobStore(client).ensure_containers([container])
    return BlobJsonDocuments(client), container


def test_instances_over_one_storage_never_admit_more_than_the_budget_together(
    place: tuple[JsonDocuments, str],
) -> None:
    documents, container = place
    instances = [TenantSpending(documents, container, BUDGET) for _ in range(4)]
    until = datetime.now(UTC) + timedelta(hours=1)
    admitted: list[str] = []
    refused: list[str] = []
    lock = threading.Lock()

    def send(instance: TenantSpending, index: int) -> None:
        for number in range(20):
            request_id = f"{index}-{number}"
            try:
                instance.reserve("trial", request_id, Spend(300), until)
            except BudgetExceeded:
                with lock:
                    refused.append(request_id)
                continue
            with lock:
                admitted.append(request_id)

    threads = [
        threading.Thread(target=send, args=(instance, index))
        for index, instance in enumerate(instances)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    stored = documents.load(container, f"trial/{month_of(datetime.now(UTC))}.json")
    assert stored is not None
    assert len(admitted) == 10_000 // 300, "each one checked against every other's hold"
    assert len(admitted) + len(refused) == 80, "every reservation was answered"
    assert sorted(stored[0]["reserved"]) == sorted(admitted)
