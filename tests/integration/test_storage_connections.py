"""The storage client keeps a connection for every call the app can make at once.

requests keeps 10 connections per host by default; past that, a call's connection is
closed after it (urllib3 logs "Connection pool is full, discarding connection") and a
later call opens a new one: a TCP and, in Azure, a TLS handshake. The processor alone runs
ModelConcurrency + PriorityModelConcurrency model calls at once, each storing its result.
"""

from __future__ import annotations

import logging
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from shared.adapters.blob_storage import blob_service_client, connection_pool_size
from tests.fixtures.azurite import Azurite
from tests.integration.conftest import make_settings

pytestmark = pytest.mark.integration

ROUNDS = 3


def test_writes_as_parallel_as_the_processor_keep_their_connections(
    azurite: Azurite, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(azurite)
    parallel = (
        settings.processing.model_concurrency + settings.processing.priority_model_concurrency
    )
    assert parallel > 10  # more than requests' default pool: the case that used to discard
    assert connection_pool_size(settings) >= parallel
    client = blob_service_client(settings)
    container = f"connections-{uuid.uuid4().hex[:8]}"
    client.create_container(container)
    barrier = threading.Barrier(parallel)

    def write(index: int) -> None:
        barrier.wait()  # every call in flight at once
        client.get_blob_client(container, f"blob-{index}").upload_blob(b"{}", overwrite=True)

    with (
        caplog.at_level(logging.WARNING, logger="urllib3.connectionpool"),
        ThreadPoolExecutor(parallel) as pool,
    ):
        for _ in range(ROUNDS):
            list(pool.map(write, range(parallel)))

    discarded = [r for r in caplog.records if "Connection pool is full" in r.getMessage()]
    assert discarded == []
    names = [blob.name for blob in client.get_container_client(container).list_blobs()]
    assert len(names) == parallel
