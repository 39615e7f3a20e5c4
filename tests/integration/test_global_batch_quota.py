"""The enqueued-token quota on the wire: the app's services on Azurite, the control plane
talking through the real ``openai`` SDK to a local Azure OpenAI emulator whose deployment
has an enqueued-token limit of its own (``--enqueued-token-limit DEPLOYMENT=N``).

A file the quota could not hold whole is split and every request completes; a batch the
quota keeps refusing past ``GlobalBatch__quotaWaitLimitSeconds`` fails its requests
``batch_quota_exceeded`` and is counted in ``inferbus.batch.ended``. The control plane
runs on the test's clock: waiting is moving that clock, not sleeping.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from openai import AzureOpenAI

from openai_emulator.process import API_VERSION, OpenAIEmulator
from openai_emulator.pytest_plugin import OpenAIEmulatorFactory
from shared.adapters.blob_storage import AzureBlobStore
from shared.adapters.in_memory import RecordingPublisher, RecordingSender
from shared.contracts import JobStatus
from shared.global_batch.quota import BATCH_QUOTA_EXCEEDED, line_tokens
from tests.fakes import ManualClock
from tests.integration.conftest import Call, InstallServices
from tests.support.global_batch import (
    DEPLOYMENT,
    BatchEndings,
    BatchLane,
    batch_settings,
    control_policy,
    statuses,
    submissions_of,
    with_control_plane,
)
from tests.support.global_batch import submit_batch as submit

pytestmark = pytest.mark.integration

LIMIT = 10_000  # the deployment's enqueued-token quota on the emulator


@pytest.fixture
def quota_emulator(openai_emulator_factory: OpenAIEmulatorFactory) -> OpenAIEmulator:
    return openai_emulator_factory(enqueued_token_limits={DEPLOYMENT: LIMIT})


@pytest.fixture
def lane(
    install_services: InstallServices,
    storage: AzureBlobStore,
    quota_emulator: OpenAIEmulator,
) -> tuple[BatchLane, ManualClock]:
    """The batch lane against ``quota_emulator``, in a container of its own (no other
    test's submission is moved by its runs), its control plane on a clock of the test's
    with ``GlobalBatch__enqueuedTokens`` at the deployment's limit."""
    container = f"batches-{uuid.uuid4().hex[:12]}"
    storage.ensure_containers([container])
    queue, events = RecordingSender(), RecordingPublisher()
    services = install_services(
        ports={"requests": queue, "events": events, "results_topic": None},
        settings=batch_settings(
            quota_emulator,
            BatchContainer=container,
            GlobalBatch__enqueuedTokens=str(LIMIT),
            GlobalBatch__submitAtLines="1",
            GlobalBatch__quotaRetrySeconds="60",
            GlobalBatch__quotaRetryMaxSeconds="240",
            GlobalBatch__quotaWaitLimitSeconds="600",
        ),
    )
    clock = ManualClock(datetime.now(UTC))
    policy = control_policy(services.settings)
    plain = BatchLane(services, quota_emulator, queue, events)
    return with_control_plane(plain, policy, clock), clock


@pytest.fixture
def blocker(quota_emulator: OpenAIEmulator) -> Iterator[str]:
    """Another client's batch in progress on the deployment, holding 9,900 of its 10,000
    enqueued tokens until the test ends."""
    with AzureOpenAI(
        azure_endpoint=quota_emulator.endpoint,
        api_key=quota_emulator.api_key,
        api_version=API_VERSION,
        max_retries=0,
    ) as client:
        line = (
            b'{"custom_id": "held", "method": "POST", "url": "/chat/completions", "body": '
            b'{"model": "' + DEPLOYMENT.encode() + b'", "max_tokens": 9900, "messages": '
            b'[{"role": "user", "content": "Hold the quota."}]}}\n'
        )
        uploaded = client.files.create(file=("held.jsonl", line), purpose="batch")
        batch = client.batches.create(
            input_file_id=uploaded.id,
            endpoint="/chat/completions",  # type: ignore[arg-type]  # Azure's form of the route
            completion_window="24h",
        )
    assert quota_emulator.advance(batch.id)["status"] == "in_progress"
    yield batch.id
    quota_emulator.advance(batch.id, to="completed")  # its tokens leave the queue


def test_a_file_over_the_quota_is_split_and_every_request_completes(
    lane: tuple[BatchLane, ManualClock], call: Call, tenant: str
) -> None:
    batch_lane, _ = lane
    ids = [
        submit(call, f"Report {n}: the quarter's figures.", parameters={"max_tokens": 3000})
        for n in range(5)
    ]
    assert batch_lane.process_queue() == ["staged"] * 5
    records = batch_lane.services.http.batches.records
    assert records is not None
    staged = records.pending_many(DEPLOYMENT, tenant, ids)
    assert sum(line_tokens(p.line) for p in staged.values()) > LIMIT  # one file: refused

    batch_lane.drive(tenant, ids)

    assert set(statuses(batch_lane, tenant, ids).values()) == {JobStatus.COMPLETED}
    submissions = list(submissions_of(batch_lane.services, tenant))
    assert len(submissions) > 1
    assert sum(s.requests for s in submissions) == 5
    assert all(s.estimated_tokens <= LIMIT for s in submissions)
    assert all(s.refused_batches == [] for s in submissions), "no batch was refused"
    assert sorted(batch_lane.announced(tenant)) == sorted(ids)


def test_a_batch_refused_past_the_wait_limit_fails_its_requests_and_is_counted(
    lane: tuple[BatchLane, ManualClock],
    call: Call,
    tenant: str,
    blocker: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    batch_lane, clock = lane
    endings = BatchEndings(monkeypatch)
    ids = [submit(call, f"Note {n}.", parameters={"max_tokens": 100}) for n in range(2)]
    batch_lane.process_queue()
    emulator = batch_lane.emulator
    batch_lane.run()  # uploaded, created, its jobs running

    started = clock.now
    with caplog.at_level("WARNING"):
        for _ in range(12):
            for batch_id, batch in emulator.stats()["batches"].items():
                if batch["status"] == "validating":
                    assert emulator.advance(batch_id)["status"] == "failed"  # the quota
            batch_lane.run()  # polled: refused, waits (or gives up)
            (submission,) = submissions_of(batch_lane.services, tenant)
            if submission.retry_at is None:
                break
            clock.now = submission.retry_at
            batch_lane.run()  # created again

    assert set(statuses(batch_lane, tenant, ids).values()) == {JobStatus.FAILED}
    assert batch_lane.failures(tenant) == dict.fromkeys(ids, BATCH_QUOTA_EXCEEDED)
    job = batch_lane.job(tenant, ids[0])
    assert job.error is not None
    assert "GlobalBatch__quotaWaitLimitSeconds" in job.error.message
    assert "surpassed the configured limit of 10K" in job.error.message  # the service's
    assert clock.now - started == timedelta(seconds=600)
    (closed,) = submissions_of(batch_lane.services, tenant)
    assert closed.state.value == "closed"
    refused = [
        b for b in emulator.stats()["batches"].values() if b["input_file_id"] == closed.file_id
    ]
    assert len(refused) == len(closed.refused_batches) == 5
    assert {b["status"] for b in refused} == {"failed"}
    assert endings.counted() == {(BATCH_QUOTA_EXCEEDED, DEPLOYMENT): 1}
    assert "left before it gives up" in caplog.text
