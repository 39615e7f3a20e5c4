"""The deferred sweeper against the emulator: a vanished message is told from a busy broker.

Through the unmodified SDK, a deferred message that is not there comes back as the
broker's ``message-not-found`` (``MessageNotFoundError``): only that sets a ledger entry
aside as missing. The entry of a message that is deferred is swept and leaves the ledger.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.composition import Services
from shared.processing.deferral import DeferredEntry

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


def test_a_deferred_message_that_is_gone_is_reported_missing(
    services: Services, tenant: str
) -> None:
    queue = services.settings.requests_queue_name
    vanished = 987_654_321  # no message ever had this sequence number
    services.ledger.record(_entry(queue, vanished, tenant))

    report = services.sweeper.sweep(queue, services.ports.deferred_source)

    assert vanished in report.missing
    assert vanished in [e.sequence_number for e in services.ledger.missing(queue)]
    due = services.ledger.due(queue, datetime.now(UTC))
    assert vanished not in [e.sequence_number for e in due]
