"""The Service Bus dead-letter CLI against the emulator's dead-letter queues and Azurite.

Request messages are sent with the app's real sender (``request_envelope`` through
``LazyServiceBusSender``) to their lane's queue, received with the SDK and dead-lettered
with a reason, as the processor or the broker would; the CLI then runs in-process.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from azure.servicebus import NEXT_AVAILABLE_SESSION, ServiceBusClient, ServiceBusReceivedMessage

from shared.adapters.servicebus import LazyServiceBusSender
from shared.adapters.servicebus_inbound import ReceiverSettler, from_sdk
from shared.contracts import ClaimCheck, InlineText, Job, JobStatus, Priority, RequestMessage
from shared.entrypoints.bootstrap import Services
from shared.entrypoints.cli.ops import main
from shared.jobs import fail, transition
from shared.lanes import Lane, LaneQueues, lane_for
from shared.messaging import request_envelope
from shared.processing.inbound import normalise_properties
from shared.tracing import continue_or_start
from tests.fixtures.servicebus_emulator import ServiceBusEmulator
from tests.integration.conftest import InstallServices
from tests.support.servicebus import connect, drain

pytestmark = pytest.mark.integration

STANDARD, PRIORITY, ORDERED = "inference-requests", "inference-priority", "inference-ordered"
SECRET = "S3CRET-do-not-print"


def empty_ordered_queue(client: ServiceBusClient, emulator: ServiceBusEmulator) -> None:
    while emulator.runtime_properties(ORDERED)["active_message_count"]:
        receiver = client.get_queue_receiver(
            ORDERED, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=1
        )
        with receiver:
            for message in receiver.receive_messages(100, max_wait_time=0.5):
                receiver.complete_message(message)


@pytest.fixture
def bus(servicebus_emulator: ServiceBusEmulator) -> Iterator[ServiceBusClient]:
    """A client of the emulator whose request queues and dead-letter queues are empty."""
    with connect(servicebus_emulator) as client:
        for queue in (STANDARD, PRIORITY, ORDERED):
            drain(client, queue, sub_queue="deadletter")
        drain(client, STANDARD)
        drain(client, PRIORITY)
        empty_ordered_queue(client, servicebus_emulator)
        yield client


@dataclass
class DeadLetters:
    """Dead-letters request messages of one tenant the way the app does."""

    services: Services
    bus: ServiceBusClient
    tenant: str
    senders: dict[str, LazyServiceBusSender] = field(default_factory=dict)

    def request(self, **fields: Any) -> RequestMessage:
        values: dict[str, Any] = {
            "request_id": str(uuid.uuid4()),
            "tenant_id": self.tenant,
            "model": "local-analyzer",
            "input": InlineText(text="Invoice 12: 300 EUR due."),
            "deadline": datetime.now(UTC) + timedelta(hours=1),
            **fields,
        }
        return RequestMessage(**values)

    def job(self, request: RequestMessage, status: JobStatus) -> None:
        now = datetime.now(UTC)
        job = Job(
            id=request.request_id,
            tenant_id=request.tenant_id,
            model=request.model,
            priority=request.priority,
            input=request.input,
            correlation_id=request.request_id,
            created_at=now,
            updated_at=now,
            deadline=request.deadline,
            document_id=request.document_id,
        )
        if status is JobStatus.FAILED:
            job = fail(job, "max_retries_exceeded", "gave up", settlement="dead-lettered")
        elif status is not JobStatus.ACCEPTED:
            job = transition(job, status)
        assert self.services.jobs.create(job) is not None

    def queue_of(self, request: RequestMessage) -> str:
        lanes = LaneQueues.from_settings(self.services.settings)
        return lanes.queue(lane_for(request.priority, request.document_id))

    def add(
        self,
        request: RequestMessage,
        reason: str,
        description: str = "gave up",
        *,
        job: JobStatus | None = JobStatus.FAILED,
        keep_ttl: bool = True,
    ) -> int:
        """Send ``request`` with the app's sender, dead-letter it; its sequence number."""
        envelope = request_envelope(
            request,
            correlation_id=request.request_id,
            trace=continue_or_start(None),
            now=datetime.now(UTC),
        )
        if not keep_ttl:  # a producer's message without a time to live
            envelope = replace(envelope, time_to_live=None)
        queue = self.queue_of(request)
        if queue not in self.senders:
            self.senders[queue] = LazyServiceBusSender(lambda: self.bus, queue)
        self.senders[queue].send(envelope)
        receiver = self.bus.get_queue_receiver(queue, session_id=request.document_id)
        with receiver:
            [message] = receiver.receive_messages(1, max_wait_time=5)
            assert message.message_id == request.request_id
            receiver.dead_letter_message(message, reason=reason, error_description=description)
        if job is not None:
            self.job(request, job)
        return int(message.sequence_number or 0)

    def status(self, request: RequestMessage) -> JobStatus:
        return self.services.jobs.get(self.tenant, request.request_id).status


@pytest.fixture
def dead(
    install_services: InstallServices, bus: ServiceBusClient, tenant: str
) -> Iterator[DeadLetters]:
    dead_letters = DeadLetters(install_services(), bus, tenant)
    yield dead_letters
    for sender in dead_letters.senders.values():
        sender.close()


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["sb-deadletters", *argv])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def received(bus: ServiceBusClient, queue: str, session: str | None = None) -> list[Any]:
    if session is None:
        return drain(bus, queue)
    with bus.get_queue_receiver(queue, session_id=session, max_wait_time=2) as receiver:
        messages = receiver.receive_messages(10, max_wait_time=2)
        for message in messages:
            receiver.complete_message(message)
    return messages


def test_list_summarises_by_reason_tenant_and_queue_without_receiving(
    dead: DeadLetters, capsys: pytest.CaptureFixture[str], servicebus_emulator: ServiceBusEmulator
) -> None:
    other = DeadLetters(dead.services, dead.bus, f"{dead.tenant}-other", dead.senders)
    dead.add(dead.request(), "MaxRetriesExceeded")
    dead.add(dead.request(priority=Priority.HIGH), "MaxRetriesExceeded")
    dead.add(dead.request(document_id="doc-1"), "ClaimCheckInvalid")
    other.add(other.request(model="other-model"), "PermanentFailure")

    code, out = cli(capsys, "list")
    assert code == 0
    assert (
        "4 dead-lettered messages in inference-requests, inference-priority, inference-ordered"
        in out
    )
    assert "by reason: MaxRetriesExceeded 2, ClaimCheckInvalid 1, PermanentFailure 1" in out
    assert f"by tenant: {dead.tenant} 3, {other.tenant} 1" in out
    assert "by age: < 1h 4" in out
    assert "by model: local-analyzer 3, other-model 1" in out
    assert out.count("[pending]") == 4

    code, out = cli(capsys, "list", "--json", "--queue", "ordered")
    listing = json.loads(out)
    assert listing["queues"] == [ORDERED]
    assert listing["by_reason"] == {"ClaimCheckInvalid": 1}
    [message] = listing["messages"]
    assert (message["tenant"], message["session_id"]) == (dead.tenant, "doc-1")
    assert message["description"] == "gave up"

    for queue in (STANDARD, PRIORITY, ORDERED):  # peeking received nothing
        counts = servicebus_emulator.runtime_properties(queue)
        assert counts["dead_letter_message_count"] == (2 if queue == STANDARD else 1)
    with dead.bus.get_queue_receiver(STANDARD, sub_queue="deadletter") as receiver:
        assert [m.delivery_count for m in receiver.peek_messages(10)] == [0, 0]


def test_show_by_message_id_and_sequence_number_without_secrets(
    dead: DeadLetters, capsys: pytest.CaptureFixture[str]
) -> None:
    blob = f"https://acct.blob.core.windows.net/inputs/{dead.tenant}/scan.pdf"
    request = dead.request(
        input=ClaimCheck(
            blob_uri=f"{blob}?sv=2025-01-05&sig={SECRET}",
            sha256="a" * 64,
            size=2048,
            media_type="application/pdf",
        ),
        parameters={"api_key": SECRET, "temperature": 0.2},
    )
    number = dead.add(request, "ClaimCheckInvalid", f"blob {blob}?sig={SECRET} is missing")

    code, out = cli(capsys, "show", request.request_id)
    assert code == 0
    assert SECRET not in out
    assert f"message_id:          {request.request_id}" in out
    assert f"sequence_number:     {number}" in out
    assert "reason:              ClaimCheckInvalid" in out
    assert f"description:         blob {blob} is missing" in out
    assert f"dead_letter_source:  {STANDARD}" in out
    assert f'"tenant": "{dead.tenant}"' in out
    assert f'"blob_uri": "{blob}"' in out
    assert '"api_key": "***"' in out
    assert '"temperature": 0.2' in out

    code, out = cli(capsys, "show", str(number), "--json", "--queue", STANDARD)
    [shown] = json.loads(out)
    assert shown["message_id"] == request.request_id
    assert shown["body"]["input"]["size"] == 2048
    assert shown["application_properties"]["retry_count"] == 0
    assert SECRET not in out

    assert cli(capsys, "show", "no-such-message", "--queue", "standard")[0] == 1


LANES = ("--queue", "standard", "--queue", "ordered")  # where this test's messages are


def test_replay_reopens_failed_jobs_once_and_refuses_late_requests(
    dead: DeadLetters, capsys: pytest.CaptureFixture[str]
) -> None:
    failed = dead.request()
    ordered = dead.request(document_id=f"doc-{uuid.uuid4().hex[:8]}")
    completed = dead.request()
    late = dead.request(deadline=datetime.now(UTC) - timedelta(minutes=5))
    other = DeadLetters(dead.services, dead.bus, f"{dead.tenant}-other", dead.senders)
    untouched = other.request()
    dead.add(failed, "MaxRetriesExceeded")
    dead.add(ordered, "PermanentFailure")
    dead.add(completed, "PermanentFailure", job=JobStatus.COMPLETED)
    dead.add(late, "MaxRetriesExceeded", job=JobStatus.EXPIRED, keep_ttl=False)
    other.add(untouched, "MaxRetriesExceeded")

    code, out = cli(capsys, "replay", *LANES, "--tenant", dead.tenant, "--dry-run")
    assert code == 0
    assert "4 dead-lettered messages chosen" in out
    assert out.count("would replay") == 2
    assert "would refuse: deadline passed at" in out
    assert "would skip: job completed" in out
    assert drain(dead.bus, STANDARD) == []
    assert dead.status(failed) is JobStatus.FAILED

    code, out = cli(capsys, "replay", *LANES, "--tenant", dead.tenant, "--yes")
    assert code == 1  # the late one was refused
    assert "[1/4]" in out
    assert "[4/4]" in out
    assert f"replayed as {failed.request_id}:replay:1 to {STANDARD} (job failed, reopened)" in out
    assert f"deadline passed at {late.deadline.isoformat()}; submit a new request" in out  # type: ignore[union-attr]
    assert "skipped: job completed" in out
    assert "done: 2 replayed, 0 already replayed, 1 skipped, 1 refused" in out
    assert dead.status(failed) is JobStatus.ACCEPTED
    assert dead.status(ordered) is JobStatus.ACCEPTED
    assert dead.status(late) is JobStatus.EXPIRED
    assert other.status(untouched) is JobStatus.FAILED

    [ordered_copy] = received(dead.bus, ORDERED, ordered.document_id)
    assert ordered_copy.message_id == f"{ordered.request_id}:replay:1"
    assert ordered_copy.session_id == ordered.document_id
    with dead.bus.get_queue_receiver(STANDARD) as receiver:
        [copy] = receiver.receive_messages(10, max_wait_time=3)
        properties = normalise_properties(copy.application_properties)
        assert copy.message_id == f"{failed.request_id}:replay:1"
        assert (properties["replay_of"], properties["retry_count"]) == (failed.request_id, 0)
        assert "DeadLetterReason" not in properties
        assert json.loads(b"".join(copy.body))["request_id"] == failed.request_id
        outcome = dead.services.lanes[Lane.STANDARD].processor.process(
            from_sdk(copy), ReceiverSettler(receiver)
        )
    assert outcome == "completed"
    assert dead.status(failed) is JobStatus.COMPLETED

    code, out = cli(capsys, "replay", *LANES, "--tenant", dead.tenant, "--yes")
    assert code == 1
    assert out.count("already replayed as") == 2
    assert "skipped: job completed" in out
    assert drain(dead.bus, STANDARD) == []
    assert received(dead.bus, ORDERED, ordered.document_id) == []

    code, out = cli(capsys, "list", *LANES)
    assert out.count("[replayed]") == 2  # replayed messages stay for inspection
    assert out.count("[pending]") == 3


def test_replay_needs_a_choice(
    install_services: InstallServices, capsys: pytest.CaptureFixture[str]
) -> None:
    install_services()
    code, out = cli(capsys, "replay", "--yes")
    assert code == 2
    assert "choose what to replay" in out


def test_purge_removes_only_the_chosen(
    dead: DeadLetters, capsys: pytest.CaptureFixture[str], servicebus_emulator: ServiceBusEmulator
) -> None:
    keep = []
    for _ in range(2):  # interleaved, so that purging passes the ones it keeps
        dead.add(dead.request(), "InvalidPayload")
        keep.append(dead.add(dead.request(), "MaxRetriesExceeded"))
    dead.add(dead.request(), "InvalidPayload")
    dead.add(dead.request(document_id="doc-2"), "InvalidPayload")

    code, out = cli(capsys, "purge", "--reason", "InvalidPayload", "--dry-run")
    assert code == 0
    assert "would remove 4" in out
    assert servicebus_emulator.runtime_properties(STANDARD)["dead_letter_message_count"] == 5

    code, out = cli(capsys, "purge", "--reason", "InvalidPayload", "--queue", "standard", "--yes")
    assert code == 0
    assert "removed 3 of 3 dead-lettered messages" in out
    with dead.bus.get_queue_receiver(STANDARD, sub_queue="deadletter") as receiver:
        left: list[ServiceBusReceivedMessage] = receiver.peek_messages(10)
    assert sorted(int(m.sequence_number or 0) for m in left) == sorted(keep)
    assert [m.delivery_count for m in left] == [1, 1]  # passed over once, then let go
    assert servicebus_emulator.runtime_properties(ORDERED)["dead_letter_message_count"] == 1

    code, out = cli(capsys, "list", "--json")
    assert json.loads(out)["by_reason"] == {"MaxRetriesExceeded": 2, "InvalidPayload": 1}
