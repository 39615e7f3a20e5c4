"""Entry points of the non-HTTP triggers: thin enough to keep triggers/ at a few lines.

Each entry point contains every failure: a batch function that raised would make the
host abandon messages the processor already settled or meant to leave to lock expiry.
"""

from __future__ import annotations

import logging
from typing import Any

from shared.composition import get_services

log = logging.getLogger(__name__)


def handle_request_batch(messages: list[Any], message_actions: Any) -> None:
    """Process a batch from the Service Bus trigger; settle each message on its own."""
    from shared.adapters.servicebus_inbound import ActionsSettler, from_sdk

    try:
        services = get_services()
        settler = ActionsSettler(message_actions)
        services.batch.process([from_sdk(message) for message in messages], settler)
    except Exception:
        log.exception(
            "batch of %d messages failed before processing; locks will lapse", len(messages)
        )


def sweep_deferred() -> None:
    """Receive due deferred messages by sequence number and run them through the pipeline."""
    try:
        services = get_services()
        with services.deferred_source() as source:
            report = services.sweeper.sweep(services.settings.requests_queue_name, source)
        if report.missing:
            log.warning("deferred messages missing from the queue: %s", report.missing)
    except Exception:
        log.exception("deferred sweep failed; it runs again on the next schedule")
