"""The job watchdog against Azurite: the job index (Find Blobs by Tags), real ETags, the
results topic.

The watchdog decides by each job's own last change (``updated_at``, its ``changed`` tag),
and its clock runs twenty minutes ahead, so the jobs recorded here with a past
``updated_at`` are past the grace period without waiting; each test has its own job and
ledger containers, so the watchdog sees only its jobs and its checkpoint.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from azure.servicebus import ServiceBusClient

from shared.adapters.blob_storage import AzureBlobStore
from shared.contracts import JobStatus
from shared.entrypoints import functions as entry_points
from shared.entrypoints.bootstrap import Services
from shared.jobs import transition
from tests.fixtures.servicebus_emulator import ServiceBusEmulator
from tests.integration.conftest import InstallServices
from tests.support.jobs import accepted_job
from tests.support.queued_requests import AUDIT, announced_failures
from tests.support.servicebus import connect, drain

pytestmark = pytest.mark.integration


class AheadClock:
    """Real time plus ``ahead``: the watchdog's view of a later moment."""

    def __init__(self, ahead: timedelta) -> None:
        self.ahead = ahead

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.ahead


@pytest.fixture
def bus(servicebus_emulator: ServiceBusEmulator) -> Iterator[ServiceBusClient]:
    with connect(servicebus_emulator) as client:
        drain(client, topic=AUDIT[0], subscription=AUDIT[1])
        yield client


@pytest.fixture
def clock() -> AheadClock:
    return AheadClock(timedelta(minutes=20))


@pytest.fixture
def services(
    install_services: InstallServices,
    storage: AzureBlobStore,
    bus: ServiceBusClient,
    clock: AheadClock,
) -> Services:
    suffix = uuid.uuid4().hex[:10]
    jobs, ledger = f"jobs-{suffix}", f"ledger-{suffix}"
    storage.ensure_containers([jobs, ledger])
    return install_services(
        ports={"clock": clock},
        JobsContainer=jobs,
        LedgerContainer=ledger,
        JobWatchdogGraceSeconds="900",
    )


def record(
    services: Services,
    tenant: str,
    status: JobStatus,
    *,
    updated_at: datetime,
    deadline: datetime | None,
) -> str:
    job = accepted_job(tenant, updated_at, deadline=deadline)
    if status is not JobStatus.ACCEPTED:
        job = transition(job, status, lambda: updated_at)
    assert services.jobs.create(job) is not None
    return job.id


def test_a_stale_job_expires_and_one_being_processed_is_left_alone(
    services: Services, bus: ServiceBusClient, clock: AheadClock, tenant: str
) -> None:
    now = clock()
    stale = record(
        services,
        tenant,
        JobStatus.RUNNING,
        updated_at=now - timedelta(hours=1),
        deadline=now - timedelta(minutes=50),
    )
    # Past its deadline too, but the processor moved it a moment ago: its model call may
    # still finish inside the grace period.
    working = record(
        services, tenant, JobStatus.RUNNING, updated_at=now, deadline=now - timedelta(minutes=1)
    )
    finished = record(
        services,
        tenant,
        JobStatus.COMPLETED,
        updated_at=now - timedelta(hours=1),
        deadline=now - timedelta(minutes=50),
    )

    entry_points.watch_jobs(lambda: services)

    expired = services.jobs.get(tenant, stale)
    assert expired.status is JobStatus.EXPIRED
    assert expired.error is not None
    assert expired.error.code == "deadline_exceeded"
    assert services.jobs.get(tenant, working).status is JobStatus.RUNNING
    assert services.jobs.get(tenant, finished).status is JobStatus.COMPLETED
    assert announced_failures(bus) == {stale: "deadline_exceeded"}

    assert services.watchdog is not None
    again = services.watchdog.watch()
    assert again.open == 1, "the index names only the job still running"
    assert again.read == 0, "nothing was written since, and nothing is due yet"
    assert announced_failures(bus) == {}

    clock.ahead += timedelta(minutes=16)
    assert dict(services.watchdog.watch().outcomes) == {"ended": 1}
    assert services.jobs.get(tenant, working).status is JobStatus.EXPIRED
    assert announced_failures(bus) == {working: "deadline_exceeded"}
