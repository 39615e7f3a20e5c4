"""Entry points of the non-HTTP triggers: thin enough to keep triggers/ at a few lines.

Triggers decode their bindings into the app's own types (``InboundMessage``, a
``Settler``, ``IncomingEvent``) and pass the process-wide services in. The batch and
timer entry points take a ``ServicesProvider`` rather than built ``Services`` so that even
a failure to build them is contained: a batch function that raised would make the host
abandon messages the processor already settled or meant to leave to lock expiry.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable

from shared.contracts import Door
from shared.entrypoints.bootstrap import Services, ServicesProvider
from shared.errors import InvalidInput, NotOurs
from shared.events.incoming import IncomingEvent
from shared.lanes import Lane
from shared.processing.inbound import InboundMessage
from shared.processing.ports import Settler

log = logging.getLogger(__name__)


def handle_request_batch(
    provider: ServicesProvider,
    messages: list[InboundMessage],
    settler: Settler,
    lane: Lane = Lane.STANDARD,
) -> None:
    """Process a batch from one lane's trigger; settle each message on its own."""
    try:
        provider().lanes[lane].message_batches.process(messages, settler)
    except Exception:
        log.exception(
            "batch of %d messages failed before processing; locks will lapse", len(messages)
        )


def sweep_deferred(provider: ServicesProvider) -> None:
    """Receive due deferred messages by sequence number and run them through the pipeline,
    for every lane that defers (the session queue does not)."""
    try:
        services = provider()
    except Exception:
        log.exception("deferred sweep failed; it runs again on the next schedule")
        return
    for lane in services.lanes.values():
        if lane.sweeper is None:
            continue
        try:
            report = lane.sweeper.sweep(lane.queue, services.ports.deferred_source)
            if report.missing:
                log.warning("deferred messages missing from %s: %s", lane.queue, report.missing)
        except Exception:
            log.exception("deferred sweep of %s failed; it runs again on schedule", lane.queue)


def handle_new_blob(services: Services, path: str, read: Callable[[int], bytes]) -> None:
    """A document landed in the incoming container (``path`` is ``container/name``).

    The SHA-256 is computed while streaming the binding's content. Invalid documents are
    logged and acknowledged (retrying cannot fix them); transient failures raise so the
    host retries the trigger.
    """
    container, _, name = path.partition("/")
    digest = hashlib.sha256()
    while chunk := read(1 << 20):
        digest.update(chunk)
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


def handle_event(services: Services, event: IncomingEvent) -> None:
    """An event from the Event Grid trigger; transient failures raise for a redelivery."""
    outcome = services.event_intake.accept_event(event, source=Door.EVENTGRID)
    if outcome.status == "rejected":
        log.error("event %s (%s) rejected: %s", event.id, event.type, outcome.reason)


def _scheduled_run(what: str, provider: ServicesProvider, work: Callable[[Services], None]) -> None:
    """One run of a timer: it never raises. A run that fails is logged, and the next
    scheduled run starts over (each timer's own bookkeeping makes it do only what is left)."""
    try:
        work(provider())
    except Exception:
        log.exception("%s failed; it runs again on the next schedule", what)


def pull_events(provider: ServicesProvider) -> None:
    """Drain the Event Grid namespace queue subscription through intake (when configured)."""

    def drain(services: Services) -> None:
        if services.pull_door is None:
            log.debug("no Event Grid namespace configured for pull delivery")
            return
        services.pull_door.drain()

    _scheduled_run("event grid pull", provider, drain)


def report_backlog(provider: ServicesProvider) -> None:
    """Log the request queue's counts and oldest message age (see processing/backlog.py)."""
    from shared.processing.backlog import report_backlog as report

    def log_backlog(services: Services) -> None:
        queue = services.lanes[Lane.STANDARD].queue
        report(queue, services.ports.queue_observer(queue))

    _scheduled_run("backlog report", provider, log_backlog)


def reconcile_dead_letters(provider: ServicesProvider) -> None:
    """End the job of every request message in a request queue's dead-letter sub-queue
    (``processing.dead_letters.reconciliation``)."""

    def reconcile(services: Services) -> None:
        if services.reconciler is None:
            log.debug("no dead-letter queues configured")
            return
        services.reconciler.reconcile(services.lanes[lane].queue for lane in Lane)

    _scheduled_run("dead-letter reconciliation", provider, reconcile)


def watch_jobs(provider: ServicesProvider) -> None:
    """End jobs that can no longer end by themselves (``processing.watchdog``)."""

    def watch(services: Services) -> None:
        services.watchdog.watch()

    _scheduled_run("job watchdog", provider, watch)


def drive_global_batch(provider: ServicesProvider) -> None:
    """One run of the Global Batch control plane (``global_batch.control_plane``)."""

    def drive(services: Services) -> None:
        if services.global_batch is None:
            log.debug("no Global Batch lane configured")
            return
        services.global_batch.run()

    _scheduled_run("global batch control plane", provider, drive)
