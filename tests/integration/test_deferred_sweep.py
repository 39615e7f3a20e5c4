"""The deferred sweeper against the emulator: a vanished message is told from a lost broker.

Through the unmodified SDK, a deferred message that is not there comes back as the
broker's ``message-not-found`` (``MessageNotFoundError``): only that counts as a miss, and
it does not hide the deferred messages received with it. A miss is asked for again later;
after the last try the entry is set aside and the job fails ``deferred_message_lost``. A
broker that goes away is transient: every entry stays for the next sweep.
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage

from servicebus_emulator.process import run_emulator
from shared.adapters.in_memory import InMemoryDocuments
from shared.adapters.servicebus_inbound import ReceiverDeferredSource
from shared.contracts import InlineText, Job, JobStatus
from shared.entrypoints.bootstrap import Services
from shared.errors import TransientError
from shared.events.announcements import FAILED
from shared.lanes import Lane
from shared.processing.deferral import DeferredSweeper, DocumentDeferralLedger
from shared.processing.values import DeferredEntry
from tests.fixtures.servicebus_emulator import DEFAULT_CONFIG, ServiceBusEmulator
from tests.integration.conftest import InstallServices
from tests.support.servicebus import QueueRecorder, connect, drain

pytestmark = pytest.mark.integration


def _entry(queue: str, sequence_number: int, tenant: str) -> DeferredEntry:
    now = datetime.now(UTC)
    return DeferredEntry(
        queue=queue,
        sequence_number=sequence_number,
        tenant_id=tenant,
        request_id=f"vanished-{sequence_number}",
        due_at=now - timedelta(seconds=1),
        reason="not_before",
        recorded_at=now - timedelta(minutes=1),
    )


class AheadClock:
    """Real time plus ``ahead``: the sweeper's later runs without waiting for them."""

    def __init__(self) -> None:
        self.ahead = timedelta()

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.ahead


def _job(services: Services, tenant: str, request_id: str) -> None:
    now = datetime.now(UTC)
    job = Job(
        id=request_id,
        tenant_id=tenant,
        model="local-analyzer",
        input=InlineText(text="Invoice 12: 300 EUR due."),
        correlation_id=request_id,
        created_at=now,
        updated_at=now,
        deadline=now + timedelta(hours=1),
    )
    assert services.jobs.create(job) is not None


def test_a_vanished_message_is_asked_for_again_then_its_job_fails(
    install_services: InstallServices,
    sender: QueueRecorder,
    servicebus_emulator: ServiceBusEmulator,
    tenant: str,
) -> None:
    clock = AheadClock()
    services = install_services(
        ports={"clock": clock}, DeferredMissingRetries="1", DeferredMissingRetrySeconds="60"
    )
    queue = services.settings.queues.requests
    with (
        ServiceBusClient.from_connection_string(servicebus_emulator.connection_string) as bus,
        bus.get_queue_sender(queue) as queue_sender,
        bus.get_queue_receiver(queue, max_wait_time=5) as receiver,
    ):
        queue_sender.send_messages(ServiceBusMessage(b"not a request", message_id=f"{tenant}-kept"))
        received = receiver.receive_messages(max_message_count=1, max_wait_time=5)
        assert received, "the message to defer arrived"
        receiver.defer_message(received[0])
        kept = int(received[0].sequence_number or 0)
    vanished = 987_654_322
    services.lanes[Lane.STANDARD].ledger.record(_entry(queue, kept, tenant))
    services.lanes[Lane.STANDARD].ledger.record(_entry(queue, vanished, tenant))
    _job(services, tenant, f"vanished-{vanished}")
    audit = connect(servicebus_emulator)
    drain(audit, topic="inference-results", subscription="audit")

    sweeper = services.lanes[Lane.STANDARD].sweeper
    assert sweeper is not None
    first = sweeper.sweep(queue, services.ports.deferred_source)

    assert (first.retrying, first.missing) == ([vanished], [])
    assert kept not in first.retrying, "received with the vanished one, and processed"
    job = services.jobs.get(tenant, f"vanished-{vanished}")
    assert job.status is JobStatus.ACCEPTED, "not declared gone on the first miss"

    clock.ahead = timedelta(minutes=2)
    last = sweeper.sweep(queue, services.ports.deferred_source)

    assert (last.retrying, last.missing) == ([], [vanished])
    assert vanished in [
        e.sequence_number for e in services.lanes[Lane.STANDARD].ledger.missing(queue)
    ]
    job = services.jobs.get(tenant, f"vanished-{vanished}")
    assert job.status is JobStatus.FAILED
    assert job.error is not None
    assert job.error.code == "deferred_message_lost"
    with audit:
        announced = drain(audit, topic="inference-results", subscription="audit")
    failures = [json.loads(b"".join(m.body)) for m in announced if m.subject == FAILED]
    assert [(f["request_id"], f["error_code"]) for f in failures] == [
        (f"vanished-{vanished}", "deferred_message_lost")
    ]
    due = [
        e.sequence_number
        for e in services.lanes[Lane.STANDARD].ledger.due(queue, clock() + timedelta(days=1))
    ]
    assert kept not in due
    assert vanished not in due


def test_an_unreachable_broker_leaves_the_ledger_as_it_is(tmp_path: Path, tenant: str) -> None:
    ledger = DocumentDeferralLedger(InMemoryDocuments(), "ledgers")
    for number in (1, 2):
        ledger.record(_entry("inference-requests", number, tenant))
    sweeper = DeferredSweeper(ledger, handler=None, clock=lambda: datetime.now(UTC))  # type: ignore[arg-type]
    emulator_run = run_emulator(DEFAULT_CONFIG, tmp_path)
    emulator = emulator_run.__enter__()
    bus = ServiceBusClient.from_connection_string(emulator.connection_string, retry_total=0)
    with bus, bus.get_queue_receiver("inference-requests") as receiver:
        emulator_run.__exit__(None, None, None)  # the broker goes away under the receiver

        with pytest.raises(TransientError):
            sweeper.sweep(
                "inference-requests", lambda queue: nullcontext(ReceiverDeferredSource(receiver))
            )

    now = datetime.now(UTC)
    assert [e.sequence_number for e in ledger.due("inference-requests", now)] == [1, 2]
    assert ledger.missing("inference-requests") == []
