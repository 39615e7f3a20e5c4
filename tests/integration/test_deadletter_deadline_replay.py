"""``sb-deadletters replay --extend-deadline`` against the emulator's dead-letter queue and
Azurite: a request past its deadline is refused without the flag, and with it replayed with
a new deadline that the processor honours (the job completes instead of expiring)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from azure.servicebus import ServiceBusClient

from shared.adapters.servicebus_inbound import ReceiverSettler, from_sdk
from shared.contracts import JobStatus
from shared.lanes import Lane
from tests.integration.test_servicebus_deadletters import STANDARD, DeadLetters, bus, cli, dead
from tests.support.servicebus import drain

pytestmark = pytest.mark.integration

__all__ = ["bus", "dead"]  # the fixtures, shared with the dead-letter CLI tests


def test_a_late_request_is_refused_then_replayed_and_completed_with_a_new_deadline(
    dead: DeadLetters, capsys: pytest.CaptureFixture[str]
) -> None:
    late = dead.request(deadline=datetime.now(UTC) - timedelta(minutes=5))
    dead.add(late, "MaxRetriesExceeded", job=JobStatus.EXPIRED, keep_ttl=False)
    choose = ("replay", "--queue", "standard", "--message-id", late.request_id, "--yes")

    code, out = cli(capsys, *choose)
    assert code == 1
    assert "refused: deadline passed at" in out
    assert "--extend-deadline DURATION" in out
    assert drain(dead.bus, STANDARD) == []
    assert dead.status(late) is JobStatus.EXPIRED

    before = datetime.now(UTC)
    code, out = cli(capsys, *choose, "--extend-deadline", "2h")
    after = datetime.now(UTC)
    assert code == 0, out
    assert f"replayed as {late.request_id}:replay:1 to {STANDARD} (job expired, reopened)" in out
    assert f"deadline extended from {late.deadline.isoformat()} to " in out  # type: ignore[union-attr]
    assert "done: 1 replayed" in out
    job = dead.services.jobs.get(dead.tenant, late.request_id)
    assert job.status is JobStatus.ACCEPTED
    assert job.deadline is not None
    assert before + timedelta(hours=2) <= job.deadline <= after + timedelta(hours=2)

    completed = replayed_and_processed(dead, dead.bus, job.deadline)
    assert completed == "completed"
    assert dead.status(late) is JobStatus.COMPLETED


def replayed_and_processed(dead: DeadLetters, bus: ServiceBusClient, deadline: datetime) -> str:
    """Receive the replay copy from the queue and let the app's processor handle it."""
    with bus.get_queue_receiver(STANDARD) as receiver:
        [copy] = receiver.receive_messages(10, max_wait_time=3)
        body = json.loads(b"".join(copy.body))
        assert datetime.fromisoformat(body["deadline"]) == deadline
        assert copy.time_to_live is not None
        assert copy.time_to_live <= timedelta(hours=2)
        outcome: str = dead.services.lanes[Lane.STANDARD].processor.process(
            from_sdk(copy), ReceiverSettler(receiver)
        )
    return outcome
