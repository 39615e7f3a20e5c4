"""Test helpers over the in-memory ports, and the names bench/batch_processing.py imports.

Unit tests use ``shared.adapters.in_memory`` (the one in-memory implementation of the
ports) through ``composition.in_memory_ports``. The classes below keep the benchmark's
imports working until it imports ``shared.adapters.in_memory`` itself.
"""

from __future__ import annotations

from shared.adapters.in_memory import (
    FixedBacklog,
    InMemoryBlobs,
    InMemoryDocuments,
    RecordingPublisher,
    RecordingSender,
    RecordingSettler,
)
from shared.errors import TransientError
from shared.jobs import DocumentJobStore
from shared.processing.deferral import DocumentDeferralLedger

__all__ = [
    "FixedBacklog",
    "InMemoryBlobStore",
    "InMemoryJobStore",
    "InMemoryLedger",
    "RecordingEvents",
    "RecordingSender",
    "RecordingSettler",
    "broker_down",
]


def broker_down() -> TransientError:
    """The error the Service Bus sender raises when the broker is unreachable."""
    return TransientError("sending to inference-requests: ServiceBusConnectionError")


# --- kept for bench/batch_processing.py ----------------------------------------------------

InMemoryBlobStore = InMemoryBlobs
RecordingEvents = RecordingPublisher


class InMemoryJobStore(DocumentJobStore):
    """Jobs as documents in a fresh in-memory account (the container ``jobs``)."""

    def __init__(self) -> None:
        super().__init__(InMemoryDocuments(), "jobs")


class InMemoryLedger(DocumentDeferralLedger):
    """The deferral ledger as documents in a fresh in-memory account (``ledgers``)."""

    def __init__(self) -> None:
        super().__init__(InMemoryDocuments(), "ledgers")
