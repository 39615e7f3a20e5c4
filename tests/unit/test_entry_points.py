"""The entry points the non-HTTP triggers call, over in-memory ports: a batch, the deferred
sweep and the backlog report each contain every failure (a batch function never raises)."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from shared.adapters.in_memory import InMemoryDeferredSource, RecordingSettler
from shared.entrypoints import functions as entry_points
from shared.entrypoints.bootstrap import Services
from shared.errors import ConfigurationError
from shared.intake.submissions import InlineContent, Submission
from shared.lanes import Lane
from tests.fakes import ManualClock
from tests.support.wiring import Wired, wire


def submit(wired: Wired, **changes: object) -> str:
    fields: dict[str, object] = {
        "tenant_id": "contoso",
        "model": "local-analyzer",
        "content": InlineContent(b"Invoice 12: 300 EUR due.", "text/plain"),
    }
    fields.update(changes)
    return wired.services.http.requests.intake.submit(Submission(**fields)).job.id  # type: ignore[arg-type]


def test_a_batch_is_processed_and_each_message_settled(wired: Wired) -> None:
    ids = [submit(wired) for _ in range(3)]
    settler = RecordingSettler()
    batch = [wired.deliver(m, n) for n, m in enumerate(wired.queue.sent, start=1)]

    entry_points.handle_request_batch(lambda: wired.services, batch, settler)

    assert sorted(settler.actions) == sorted(("complete", i, None, None) for i in ids)
    assert {wired.services.jobs.get("contoso", i).status.value for i in ids} == {"completed"}


def test_a_batch_whose_services_cannot_be_built_is_logged_not_raised(
    wired: Wired, caplog: pytest.LogCaptureFixture
) -> None:
    submit(wired)
    settler = RecordingSettler()

    def broken() -> Services:
        raise ConfigurationError("set Storage (connection string) or Storage__blobServiceUri")

    with caplog.at_level(logging.ERROR):
        entry_points.handle_request_batch(broken, [wired.deliver(wired.queue.sent[0])], settler)
    assert "locks will lapse" in caplog.text
    assert settler.actions == []


def test_the_sweep_runs_due_deferred_messages_through_the_pipeline() -> None:
    clock = ManualClock()
    wired = wire(clock=clock)
    job_id = submit(wired, not_before=clock.now + timedelta(seconds=30))
    message = wired.deliver(wired.queue.sent[0], sequence=42)
    assert (
        wired.services.lanes[Lane.STANDARD].processor.process(message, RecordingSettler())
        == "deferred"
    )
    with wired.ports.deferred_source("inference-requests") as source:
        assert isinstance(source, InMemoryDeferredSource)
        source.deferred[42] = message

    entry_points.sweep_deferred(lambda: wired.services)
    assert source.settler.actions == [], "not due yet: left alone"

    clock.now += timedelta(seconds=31)
    entry_points.sweep_deferred(lambda: wired.services)
    assert source.settler.actions == [("complete", job_id, None, None)]
    assert wired.services.jobs.get("contoso", job_id).status.value == "completed"
    assert (
        wired.services.lanes[Lane.STANDARD].ledger.due(
            "inference-requests", clock.now + timedelta(days=1)
        )
        == []
    )


def test_the_backlog_report_and_the_sweep_contain_their_failures(
    wired: Wired, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        entry_points.report_backlog(lambda: wired.services)
    assert "inferbus.backlog queue=inference-requests active=0" in caplog.text

    def broken() -> Services:
        raise ConfigurationError("no Service Bus connection is configured")

    entry_points.report_backlog(broken)
    entry_points.sweep_deferred(broken)
    assert "backlog report failed" in caplog.text
    assert "deferred sweep failed" in caplog.text
