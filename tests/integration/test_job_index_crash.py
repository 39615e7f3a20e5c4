"""No job escapes the watchdog when the app dies while writing jobs.

A process records jobs the way intake does (``JobRepository`` over Blob storage, against
Azurite) from several threads and is killed (SIGKILL) mid-stream, between any two
requests or in the middle of one. The job index is the tags of each job's own Put Blob,
so there is no moment at which a job is stored and its index entry is not: every job
document left in the container is named by the index, and a watchdog run later ends
every one of them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from azure.storage.blob import BlobServiceClient

from shared.adapters.blob_documents import BlobJsonDocuments
from shared.adapters.blob_storage import AzureBlobStore
from shared.contracts import JobStatus
from shared.entrypoints.bootstrap import Services
from shared.job_index import JobIndex, job_ids
from shared.processing.watchdog import WatchOutcome
from tests.fixtures.azurite import Azurite
from tests.integration.conftest import InstallServices

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TENANT = "crash-tenant"
# Records jobs as intake does, from 8 threads, until it is killed; prints one line per
# job stored so the test knows the writes have started.
WRITER = r"""
import os, sys
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from azure.storage.blob import BlobServiceClient
from shared.adapters.blob_documents import BlobJsonDocuments
from shared.jobs import DocumentJobStore, JobRepository
from tests.support.jobs import accepted_job

connection, container, tenant = sys.argv[1:4]
client = BlobServiceClient.from_connection_string(connection)
jobs = JobRepository(DocumentJobStore(BlobJsonDocuments(client), container))

def record(_: int) -> None:
    while True:
        now = datetime.now(UTC)
        jobs.create(accepted_job(tenant, now, deadline=now + timedelta(minutes=5)))
        os.write(1, b"stored\n")

with ThreadPoolExecutor(8) as pool:
    list(pool.map(record, range(8)))
"""


class AheadClock:
    """Real time plus ``ahead``: the watchdog's view of a later moment."""

    def __init__(self, ahead: timedelta) -> None:
        self.ahead = ahead

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.ahead


def kill_while_writing(
    azurite: Azurite, container: str, stored_before_kill: int, errors: Path
) -> None:
    """Start the writer and kill it once ``stored_before_kill`` jobs are stored; its eight
    threads are then mid-request or between requests. Its stderr goes to ``errors``."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    with errors.open("w") as stderr:
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, azurite.connection_string, container, TENANT],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=environment,
            cwd=ROOT,
        )
    try:
        assert writer.stdout is not None
        for _ in range(stored_before_kill):
            line = writer.stdout.readline()
            assert line == "stored\n", f"the writer stopped: {errors.read_text()}"
        writer.send_signal(signal.SIGKILL)
    finally:
        writer.kill()
        writer.wait(timeout=30)
    assert writer.returncode == -signal.SIGKILL


def stored_names(client: BlobServiceClient, container: str) -> set[str]:
    return {blob.name for blob in client.get_container_client(container).list_blobs()}


def test_every_job_stored_before_a_kill_is_indexed_and_ended_by_the_watchdog(
    azurite: Azurite, storage: AzureBlobStore, install_services: InstallServices, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:10]
    container, ledger = f"jobs-{suffix}", f"ledger-{suffix}"
    storage.ensure_containers([container, ledger])
    client = BlobServiceClient.from_connection_string(azurite.connection_string)

    kill_while_writing(azurite, container, 40, tmp_path / "writer.stderr")

    stored = stored_names(client, container)
    assert len(stored) >= 40
    index = JobIndex(BlobJsonDocuments(client), container)
    deadline = time.monotonic() + 10
    indexed = {name for name, _ in index.open_jobs()}
    while indexed != stored and time.monotonic() < deadline:  # the index may trail a write
        time.sleep(0.2)
        indexed = {name for name, _ in index.open_jobs()}
    assert indexed == stored, f"stored but not indexed: {sorted(stored - indexed)}"

    # Past every deadline and the grace period: the watchdog must end each stored job.
    services: Services = install_services(
        ports={"clock": AheadClock(timedelta(minutes=30))},
        JobsContainer=container,
        LedgerContainer=ledger,
        JobWatchdogGraceSeconds="900",
    )
    assert services.watchdog is not None
    report = services.watchdog.watch()
    assert report.finished
    assert report.outcomes == {WatchOutcome.ENDED: len(stored)}
    for name in stored:
        ids = job_ids(name)
        assert ids is not None
        assert services.jobs.get(*ids).status is JobStatus.EXPIRED
    assert index.open_jobs() == [], "every job left the open set"
