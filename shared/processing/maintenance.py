"""Entry points of the maintenance timers: every accepted request ends.

``triggers/maintenance.py`` calls these with the process-wide services provider. Like
the other timer entry points they never raise: a run that fails is logged and the next
scheduled run starts over (the reconciler's markers and the watchdog's checkpoint make a
repeated run do only what is left).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from shared.lanes import LaneQueues

if TYPE_CHECKING:
    from shared.composition import ServicesProvider

log = logging.getLogger(__name__)


def reconcile_dead_letters(provider: ServicesProvider) -> None:
    """End the job of every request message in a request queue's dead-letter sub-queue
    (``processing.reconciliation``)."""
    try:
        services = provider()
        if services.reconciler is None:
            log.debug("no dead-letter queues configured")
            return
        queues = LaneQueues.from_settings(services.settings)
        services.reconciler.reconcile([queues.standard, queues.priority, queues.ordered])
    except Exception:
        log.exception("dead-letter reconciliation failed; it runs again on the next schedule")


def watch_jobs(provider: ServicesProvider) -> None:
    """End jobs that can no longer end by themselves (``processing.watchdog``)."""
    try:
        watchdog = provider().watchdog
        if watchdog is None:
            log.debug("no job listing configured")
            return
        watchdog.watch()
    except Exception:
        log.exception("job watchdog failed; it runs again on the next schedule")
