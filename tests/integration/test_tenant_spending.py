"""Budgets held by several instances over one storage: against Azurite (``BlobJsonDocuments``:
If-Match on the month's document) and against ``InMemoryDocuments`` with the same
assertions, so the in-memory adapter the unit tests rely on is held to what Blob storage
does. Each instance has its own cache and lock, as app instances do: only the document's
ETag serialises their reservations."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from shared.accounting.ledger import Spend, month_of
from shared.accounting.spending import TenantSpending
from shared.accounting.tenants import Budget, TenantCatalog, TenantPolicy
from shared.documents import JsonDocuments
from shared.errors import BudgetExceeded
from tests.integration.conftest import Documents

pytestmark = pytest.mark.integration

BUDGET = TenantCatalog(tenants={"trial": TenantPolicy(budget=Budget(tokens_per_day=10_000))})


@pytest.fixture
def place(own_container: tuple[Documents, str]) -> tuple[JsonDocuments, str]:
    """Documents and a container of their own, on Azurite and in memory."""
    return own_container


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
