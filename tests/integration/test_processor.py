"""The batch processor end to end on the Service Bus emulator and Azurite.

Work is submitted through the HTTP function (or sent raw with the SDK), received with the
unmodified SDK in peek-lock, handed to the registered trigger function, and every
outcome is checked from the broker's side: dead-letter queue contents, scheduled retry
copies, deferred recovery, results-topic subscriptions, and job states.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from azure.servicebus import (
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusMessageState,
    ServiceBusReceiver,
)
from azure.servicebus.exceptions import MessageNotFoundError

from shared.adapters.blob_storage import AzureBlobStore
from shared.contracts import JobStatus
from shared.entrypoints import functions as entry_points
from shared.entrypoints.bootstrap import Services
from shared.events.announcements import event_id
from shared.processing.inbound import normalise_properties
from tests.fixtures.servicebus_emulator import ServiceBusEmulator
from tests.integration.conftest import Call, InstallServices, json_body
from tests.support.functions import indexed_functions
from tests.support.http_recorder import Recorder, recording_server
from tests.support.servicebus import ReceiverMessageActions, connect, drain

pytestmark = pytest.mark.integration

QUEUE = "inference-requests"
TOPIC = "inference-results"
SUBSCRIPTIONS = ("high-priority", "human-review", "audit", "model-local-analyzer")


@pytest.fixture
def bus(servicebus_emulator: ServiceBusEmulator) -> Iterator[ServiceBusClient]:
    client = connect(servicebus_emulator)
    with client:
        for sub_queue in (None, "deadletter"):
            drain(client, QUEUE, sub_queue=sub_queue)
        for subscription in SUBSCRIPTIONS:
            drain(client, topic=TOPIC, subscription=subscription)
        yield client


@pytest.fixture
def event_grid() -> Iterator[Recorder]:
    with recording_server() as recorder:
        yield recorder


@pytest.fixture
def processing(
    install_services: InstallServices, bus: ServiceBusClient, event_grid: Recorder
) -> Services:
    return install_services(
        RetryBaseSeconds="0.3",
        RetryMaxSeconds="0.6",
        MaxRetries="2",
        LocalModelRefusalTerms="forbidden",
        LocalModelFaults="true",
        MaxInlineTextBytes="65536",
        settings={
            "EventGridTopic__topicEndpoint": f"{event_grid.base_url}/api/events",
            "EventGridTopic__topicKey": "local-key",
        },
    )


@pytest.fixture
def receiver(bus: ServiceBusClient) -> Iterator[ServiceBusReceiver]:
    """One long-lived peek-lock receiver, as the Functions host keeps per trigger.

    (A receiver closed with credit outstanding strands whatever the broker delivered
    into its buffer until the lock lapses, exactly as on Azure.)
    """
    with bus.get_queue_receiver(QUEUE) as queue_receiver:
        yield queue_receiver


@pytest.fixture
def priority_receiver(bus: ServiceBusClient) -> Iterator[ServiceBusReceiver]:
    """The high-priority lane's queue, as its own trigger's listener holds it."""
    with bus.get_queue_receiver("inference-priority") as queue_receiver:
        yield queue_receiver


def run_trigger(
    receiver: ServiceBusReceiver,
    rounds: int = 1,
    wait: float = 0.3,
    function: str = "process_requests",
) -> list[tuple[str, Any]]:
    """Receive batches as the Functions host does and hand them to the registered function.

    ``wait`` bounds an empty receive only: a receive returns as soon as messages arrive.
    """
    trigger = indexed_functions()[function].get_user_function()
    calls: list[tuple[str, Any]] = []
    for _ in range(rounds):
        messages = receiver.receive_messages(max_message_count=50, max_wait_time=wait)
        if not messages:
            continue
        actions = ReceiverMessageActions(receiver)
        trigger(messages=messages, message_actions=actions)
        calls.extend(actions.calls)
    return calls


def submit(call: Call, text: str, **fields: Any) -> str:
    body = {"model": "local-analyzer", "input": {"text": text}, **fields}
    response = call("submit_request", "POST", "/v1/requests", body=body)
    assert response.status_code == 202, response.get_body()
    return str(json_body(response)["id"])


def wait_until_terminal(
    services: Services,
    tenant: str,
    ids: list[str],
    receivers: tuple[ServiceBusReceiver, ServiceBusReceiver],
    timeout: float = 40,
) -> None:
    """Runs both batch lanes' triggers (standard, high priority) until the jobs end."""
    deadline = time.monotonic() + timeout
    standard, priority = receivers
    while time.monotonic() < deadline:
        if all(services.jobs.get(tenant, i).status.is_terminal for i in ids):
            return
        run_trigger(standard)
        run_trigger(priority, wait=0.05, function="process_priority_requests")
        entry_points.sweep_deferred(lambda: services)
    states = {i: services.jobs.get(tenant, i).status.value for i in ids}
    raise AssertionError(f"jobs not terminal in time: {states}")


def test_a_mixed_batch_settles_every_message_on_its_own(
    call: Call,
    processing: Services,
    bus: ServiceBusClient,
    receiver: ServiceBusReceiver,
    priority_receiver: ServiceBusReceiver,
    storage: AzureBlobStore,
    tenant: str,
    event_grid: Recorder,
) -> None:
    ok = submit(
        call, "Invoice 12. Total amount due: 300 EUR. Payment within 30 days.", priority="high"
    )
    flaky = submit(
        call, "Report: quarterly results.", parameters={"simulate": {"transient_attempts": 1}}
    )
    hopeless = submit(
        call, "Report on results.", parameters={"simulate": {"always_transient": True}}
    )
    refused = submit(call, "This contains a forbidden word.")
    review = submit(call, "Please refund card 4111 1111 1111 1111 today.")
    later = submit(
        call,
        "A report for later.",
        not_before=(datetime.now(UTC) + timedelta(seconds=3)).isoformat(),
    )
    missing = submit(call, "Its input will vanish.")
    storage.delete("inputs", f"{tenant}/{missing}")

    with bus.get_queue_sender(QUEUE) as sender:
        sender.send_messages(
            [
                ServiceBusMessage(
                    b"{not json", message_id="raw-1", application_properties={"tenant": tenant}
                ),
                ServiceBusMessage(
                    json.dumps({"schema": "inferbus.request/v0"}), message_id="raw-2"
                ),
                ServiceBusMessage(
                    json.dumps(
                        {
                            "schema": "inferbus.request/v1",
                            "request_id": "raw-3",
                            "tenant_id": tenant,
                            "model": "gpt-9",
                            "input": {"text": "x"},
                        }
                    ),
                    message_id="raw-3",
                ),
            ]
        )

    ids = [ok, flaky, hopeless, refused, review, later, missing]
    wait_until_terminal(processing, tenant, ids, (receiver, priority_receiver))

    # a duplicate delivery of finished work changes nothing
    job_before = processing.jobs.get(tenant, ok)
    with bus.get_queue_sender(QUEUE) as sender:
        stored = processing.ports.blobs.read("inputs", f"{tenant}/{ok}")
        assert stored is not None
        body = _request_body(processing, tenant, ok)
        sender.send_messages(
            ServiceBusMessage(
                body, message_id=f"{ok}:redelivered", application_properties={"tenant": tenant}
            )
        )
    settled: list[tuple[str, Any]] = []
    deadline = time.monotonic() + 10
    while ("complete", f"{ok}:redelivered") not in settled and time.monotonic() < deadline:
        settled += run_trigger(receiver)
    assert ("complete", f"{ok}:redelivered") in settled
    assert processing.jobs.get(tenant, ok) == job_before

    status = {i: processing.jobs.get(tenant, i) for i in ids}
    assert status[ok].status is JobStatus.COMPLETED
    assert status[flaky].status is JobStatus.COMPLETED
    assert status[flaky].attempts == 2
    assert status[hopeless].status is JobStatus.FAILED
    assert status[hopeless].error.code == "max_retries_exceeded"  # type: ignore[union-attr]
    assert status[refused].status is JobStatus.COMPLETED
    assert status[refused].result.outcome == "refused"  # type: ignore[union-attr]
    assert status[review].result.result.review_required is True  # type: ignore[union-attr]
    assert status[later].status is JobStatus.COMPLETED, "recovered by the deferred sweeper"
    assert status[missing].status is JobStatus.FAILED
    assert status[missing].error.code == "claim_check_invalid"  # type: ignore[union-attr]

    dead = {str(m.message_id): m for m in drain(bus, QUEUE, sub_queue="deadletter")}
    reasons = {
        mid: (m.dead_letter_reason, m.dead_letter_error_description) for mid, m in dead.items()
    }
    assert reasons["raw-1"][0] == "InvalidPayload"
    assert "not JSON" in str(reasons["raw-1"][1])
    assert reasons["raw-2"][0] == "InvalidPayload"
    assert "unknown schema" in str(reasons["raw-2"][1])
    assert reasons["raw-3"][0] == "InvalidPayload"
    assert "unknown model 'gpt-9'" in str(reasons["raw-3"][1])
    assert reasons[missing][0] == "ClaimCheckInvalid"
    assert reasons[f"{hopeless}:retry:2"][0] == "MaxRetriesExceeded"
    assert len(dead) == 5

    completed_event = "com.inferbus.InferenceCompleted"
    finished = [ok, flaky, refused, review, later]
    received = {
        subscription: {
            str(m.message_id) for m in drain(bus, topic=TOPIC, subscription=subscription)
        }
        for subscription in SUBSCRIPTIONS
    }
    completed_ids = {event_id(i, completed_event) for i in finished}
    failed_ids = {event_id(i, "com.inferbus.InferenceFailed") for i in (hopeless, missing)}
    assert received["audit"] == completed_ids | failed_ids
    assert received["model-local-analyzer"] == completed_ids | failed_ids
    assert received["high-priority"] == {event_id(ok, completed_event)}

    def needs_review(request_id: str) -> bool:
        result = processing.jobs.get(tenant, request_id).result
        assert result is not None, request_id
        return bool(result.summary().get("review_required"))

    review_ids = {i for i in finished if needs_review(i)}
    assert review in review_ids
    assert received["human-review"] == {event_id(i, completed_event) for i in review_ids}

    published = [event for request in event_grid.requests for event in request.json()]
    for event in published:  # every event continues the trace that intake started
        job = processing.jobs.get(tenant, event["data"]["request_id"])
        assert event["traceparent"].split("-")[1] == job.correlation_id
    assert {e["id"] for e in published if e["type"] == completed_event} == completed_ids
    assert all(
        e["subject"].startswith(f"/tenants/{tenant}/models/local-analyzer/requests/")
        for e in published
    )


def _request_body(services: Services, tenant: str, request_id: str) -> bytes:
    """A request message body as intake built it (for re-delivery tests)."""
    from shared.contracts import RequestMessage

    job = services.jobs.get(tenant, request_id)
    assert job.input is not None
    message = RequestMessage(
        request_id=job.id, tenant_id=tenant, model=job.model, input=job.input, deadline=job.deadline
    )
    return message.model_dump_json(by_alias=True).encode()


def test_a_transient_failure_schedules_its_retry_copy_within_the_backoff_window(
    call: Call,
    processing: Services,
    bus: ServiceBusClient,
    receiver: ServiceBusReceiver,
    tenant: str,
) -> None:
    request_id = submit(
        call,
        "Try again later.",
        parameters={"simulate": {"transient_attempts": 1, "retry_after": 5}},
    )
    before = datetime.now(UTC)
    calls = run_trigger(receiver, wait=5)
    assert ("complete", request_id) in calls

    with bus.get_queue_receiver(QUEUE) as receiver:
        peeked = receiver.peek_messages(max_message_count=10)
    copies = [m for m in peeked if str(m.message_id) == f"{request_id}:retry:1"]
    assert len(copies) == 1
    copy = copies[0]
    assert copy.state == ServiceBusMessageState.SCHEDULED
    assert copy.scheduled_enqueue_time_utc is not None
    assert (
        before + timedelta(seconds=4)
        <= copy.scheduled_enqueue_time_utc
        <= before + timedelta(seconds=7)
    )
    properties = normalise_properties(copy.application_properties)
    assert properties["retry_count"] == 1
    assert properties["tenant"] == tenant
    assert str(copy.correlation_id) == processing.jobs.get(tenant, request_id).correlation_id
    job = processing.jobs.get(tenant, request_id)
    assert job.status is JobStatus.ACCEPTED
    assert job.last_error is not None
    assert "429" in job.last_error.message
    # The copy is due in seconds, on an emulator the worker's next test files share: it is
    # cancelled, or, on a machine slow enough that it came due, received.
    assert copy.sequence_number is not None
    with bus.get_queue_sender(QUEUE) as sender:
        try:
            sender.cancel_scheduled_messages(copy.sequence_number)
        except MessageNotFoundError:
            drain(bus, QUEUE)
