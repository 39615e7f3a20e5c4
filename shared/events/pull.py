"""The pull door: ``InferenceRequested`` events read from an Event Grid namespace queue.

A queue event subscription of a namespace topic is for consumers that cannot expose a
webhook, sit behind private links, or take work at their own pace. The consumer reads a
batch, runs each event through the same ``EventIntake`` as the push doors (durable dedupe
by source and id, so a redelivery makes no second job), and settles each event on its
own:

- accepted, duplicate, or not ours (a type the subscription should have filtered):
  **acknowledge** (the event is deleted);
- invalid (malformed CloudEvent, data that fails validation): **reject** (the namespace
  dead-letters it; the reason is logged, as the event itself carries none);
- transient trouble (storage or Service Bus unavailable, the backlog over its limit, a
  concurrent duplicate still being accepted) or a bug: **release** with a delay that
  grows with the delivery count, so a struggling dependency is not hammered; the
  subscription's max delivery count dead-letters an event that never gets through.

The events of a batch go through intake a few at a time (intake waits on storage and the
broker, so a batch taken one event after another would leave the door latency-bound),
and the batch is settled at its end, one call per action rather than one per event.
Locks last ``receiveLockDurationInSeconds`` (60 s by default): while a batch is in intake
the door renews its locks every ``lock_renewal_seconds`` (every token is still held then,
as nothing is settled before the batch ends).

Functions has no trigger for namespace pull delivery, so a timer runs ``drain``: it
receives until the queue is empty or its time window closes (the timer is a singleton
across instances, so there is one consumer; see docs/events-and-webhooks.md,
"Event Grid namespace pull").
"""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from shared.bounded_json import check_document
from shared.contracts import Door
from shared.errors import Conflict, InvalidInput, TransientError
from shared.events.incoming import IncomingEvent, event_from_cloudevent
from shared.events.intake import EventIntake
from shared.events.ports import EventQueue, PulledEvent

log = logging.getLogger(__name__)

# The delays Event Grid accepts for a release, in seconds (ReleaseDelay).
RELEASE_DELAYS = (10, 60, 600, 3600)


@dataclass(frozen=True)
class PullPolicy:
    max_events: int = 32
    max_wait_seconds: int = 10
    drain_seconds: float = 50.0
    lock_renewal_seconds: float = 30.0
    concurrency: int = 8  # events of a batch going through intake at once


@dataclass
class PullReport:
    """What one drain did, for its log line (and the tests)."""

    received: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    lost_locks: int = 0

    def summary(self) -> str:
        parts = [f"{name}={count}" for name, count in sorted(self.outcomes.items())]
        return " ".join([f"received={self.received}", *parts, f"lost_locks={self.lost_locks}"])


def release_delay(delivery_count: int) -> int:
    """10 s after the first delivery, then a minute, ten minutes, an hour."""
    index = min(max(delivery_count, 1), len(RELEASE_DELAYS)) - 1
    return RELEASE_DELAYS[index]


@dataclass(frozen=True)
class _Decision:
    action: str  # acknowledge | reject | release
    outcome: str  # for the report: accepted, duplicate, ignored, rejected, released
    delay: int = 0


class PullDoor:
    def __init__(
        self,
        queue: EventQueue,
        intake: EventIntake,
        policy: PullPolicy,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._queue = queue
        self._intake = intake
        self._policy = policy
        self._monotonic = monotonic

    def drain(self) -> PullReport:
        """Receive and settle batches until the queue is empty or the window closes (a run
        always receives once; a receive that starts in the window may wait past it)."""
        report = PullReport()
        closes = self._monotonic() + self._policy.drain_seconds
        with ThreadPoolExecutor(self._policy.concurrency, "eventgrid-pull") as pool:
            while batch := self._queue.receive(
                self._policy.max_events, self._policy.max_wait_seconds
            ):
                report.received += len(batch)
                self._settle_batch(pool, batch, report)
                if self._monotonic() >= closes:
                    break
        # An idle run (every few seconds) is not worth a line at the default level.
        log.log(
            logging.INFO if report.received else logging.DEBUG,
            "event grid pull: %s",
            report.summary(),
        )
        return report

    def _settle_batch(
        self, pool: ThreadPoolExecutor, batch: list[PulledEvent], report: PullReport
    ) -> None:
        """Decide the batch's events concurrently (intake waits on storage and the broker,
        not on the CPU), renewing the batch's locks while they run, then settle them in one
        call per action (and delay)."""
        running = {pool.submit(self._decide, pulled): pulled for pulled in batch}
        pending = set(running)
        while pending:
            _, pending = wait(pending, timeout=self._policy.lock_renewal_seconds)
            if pending:
                report.lost_locks += len(self._queue.renew_locks([p.lock_token for p in batch]))
        groups: dict[tuple[str, int], list[str]] = defaultdict(list)
        for future, pulled in running.items():
            decision = future.result()
            report.outcomes[decision.outcome] += 1
            groups[(decision.action, decision.delay)].append(pulled.lock_token)
        for (action, delay), tokens in groups.items():
            failed = self._settle(action, delay, tokens)
            if failed:
                log.warning(
                    "could not %s %d event(s): their locks were lost; they will be redelivered",
                    action,
                    len(failed),
                )
            report.lost_locks += len(failed)

    def _decide(self, pulled: PulledEvent) -> _Decision:
        try:
            check_document(pulled.cloud_event, what="the event")
            event: IncomingEvent = event_from_cloudevent(pulled.cloud_event)
        except (InvalidInput, ValueError) as error:
            log.warning("rejecting malformed event (lock %s): %s", pulled.lock_token, error)
            return _Decision("reject", "rejected")
        try:
            outcome = self._intake.accept_event(event, Door.EVENTGRID_PULL)
        except TransientError as error:
            return self._release(pulled, event, str(error))
        except Conflict as error:
            if error.retry_after is not None:
                return self._release(pulled, event, str(error))
            log.warning("rejecting event %s: %s", event.id, error)
            return _Decision("reject", "rejected")
        except Exception:
            log.exception("unexpected failure on event %s; releasing it", event.id)
            return _Decision("release", "released", release_delay(pulled.delivery_count))
        if outcome.status == "rejected":
            log.warning("rejecting event %s: %s", event.id, outcome.reason)
            return _Decision("reject", "rejected")
        return _Decision("acknowledge", outcome.status)

    def _release(self, pulled: PulledEvent, event: IncomingEvent, why: str) -> _Decision:
        delay = release_delay(pulled.delivery_count)
        log.warning(
            "releasing event %s for %d s (delivery %d): %s",
            event.id,
            delay,
            pulled.delivery_count,
            why,
        )
        return _Decision("release", "released", delay)

    def _settle(self, action: str, delay: int, tokens: list[str]) -> list[str]:
        if action == "acknowledge":
            return self._queue.acknowledge(tokens)
        if action == "reject":
            return self._queue.reject(tokens)
        return self._queue.release(tokens, delay)
