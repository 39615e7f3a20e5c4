"""Entry points of the non-HTTP triggers: thin enough to keep triggers/ at a few lines.

Each entry point contains every failure: a batch function that raised would make the
host abandon messages the processor already settled or meant to leave to lock expiry.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from typing import Any

from shared.composition import get_services
from shared.errors import InvalidInput
from shared.events.incoming import IncomingEvent
from shared.events.intake import NotOurs

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


def handle_new_blob(path: str, read: Callable[[int], bytes]) -> None:
    """A document landed in the incoming container (``path`` is ``container/name``).

    The SHA-256 is computed while streaming the binding's content. Invalid documents are
    logged and acknowledged (retrying cannot fix them); transient failures raise so the
    host retries the trigger.
    """
    container, _, name = path.partition("/")
    digest = hashlib.sha256()
    while chunk := read(1 << 20):
        digest.update(chunk)
    services = get_services()
    try:
        accepted = services.event_intake.accept_blob(container, name, sha256=digest.hexdigest())
    except NotOurs as reason:
        log.info("blob %s ignored: %s", path, reason)
        return
    except InvalidInput as error:
        log.error("blob %s was not accepted: %s", path, error)
        return
    log.info(
        "blob %s -> request %s%s",
        path,
        accepted.job.id,
        " (duplicate)" if accepted.replayed else "",
    )


def handle_event(event: IncomingEvent) -> None:
    """An event from the Event Grid trigger; transient failures raise for a redelivery."""
    outcome = get_services().event_intake.accept_event(event, source="eventgrid")
    if outcome.status == "rejected":
        log.error("event %s (%s) rejected: %s", event.id, event.type, outcome.reason)


def report_backlog() -> None:
    """Log the request queue's counts and oldest message age (see shared/backlog_report.py)."""
    from shared.ops.backlog_report import report_backlog as report

    try:
        services = get_services()
        report(services.settings.requests_queue_name, services.queue_observer())
    except Exception:
        log.exception("backlog report failed; it runs again on the next schedule")
