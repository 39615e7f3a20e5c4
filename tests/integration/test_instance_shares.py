"""The instances' heartbeats on Azurite: each instance's demand travels in its heartbeat's
metadata, one listing reads everyone's, the quota's shares follow demand, and what each
served lately reaches the others."""

from __future__ import annotations

import uuid
from functools import partial

import pytest

from shared.adapters.blob_documents import BlobJsonDocuments
from shared.adapters.blob_storage import AzureBlobStore, blob_service_client
from shared.inference.capacity import Demand
from shared.inference.instances import IDLE_FLOOR, RAMP_SECONDS, InstanceRegistry
from tests.fixtures.azurite import Azurite
from tests.integration.conftest import make_settings

pytestmark = pytest.mark.integration

GATE = "azure_openai|https://example.openai.azure.com|gpt-4o-mini"


def test_the_budget_flows_to_the_instances_with_work(azurite: Azurite) -> None:
    client = blob_service_client(make_settings(azurite))
    container = f"ledgers-{uuid.uuid4().hex[:10]}"
    AzureBlobStore(client).ensure_containers([container])
    documents = BlobJsonDocuments(client)
    demands = {name: Demand() for name in ("busy", "light", "idle")}
    seconds = [0.0]
    registries = {}
    for name in demands:
        registry = InstanceRegistry(
            documents, container, name, heartbeat_seconds=30, monotonic=lambda: seconds[0]
        )
        registry.watch(GATE, partial(demands.__getitem__, name))
        registries[name] = registry
    assert [registry.beat() for registry in registries.values()] == [1, 2, 3]
    assert registries["idle"].share(GATE) == pytest.approx(1 / 3), "nobody has work"

    demands["busy"] = Demand(weighted=9_000, tokens=9_000)
    demands["light"] = Demand(weighted=1_000, tokens=1_000)
    for registry in registries.values():  # each writes the demand that started, then reads
        registry.beat()
    for registry in registries.values():
        registry.beat()
    # Work that has just started takes at most an equal share until the others had time to
    # publish theirs: a burst that wakes everyone must not hand each the whole quota.
    assert registries["busy"].share(GATE) == pytest.approx(1 / 3)
    seconds[0] += RAMP_SECONDS
    for registry in registries.values():
        registry.beat()

    busy, light, idle = (registries[name].share(GATE) for name in ("busy", "light", "idle"))
    assert idle == pytest.approx(IDLE_FLOOR / 3)
    assert busy == pytest.approx((1 - IDLE_FLOOR / 3) * 0.9)
    assert light == pytest.approx((1 - IDLE_FLOOR / 3) * 0.1)
    assert busy + light + idle == pytest.approx(1.0)
    assert registries["idle"].tokens_elsewhere(GATE) == 10_000
    assert registries["busy"].tokens_elsewhere(GATE) == 1_000

    # What each served lately travels too: the deployment's mix of priorities.
    demands["busy"] = Demand(weighted=9_000, tokens=9_000, high=300, served=900)
    demands["light"] = Demand(weighted=1_000, tokens=1_000, high=0, served=300)
    seconds[0] += 30  # a heartbeat's period: each writes, then each reads the others'
    for registry in [*registries.values(), *registries.values()]:
        registry.beat()
    assert registries["idle"].served_elsewhere(GATE) == (300, 1_200)
    assert registries["busy"].served_elsewhere(GATE) == (0, 300)
