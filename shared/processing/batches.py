"""Batches: run each message independently, a bounded number at a time, keeping locks.

Model capacity, not the batch size, decides how many messages run at once: one pool of
``ModelConcurrency`` workers per process serves every batch. In batch mode the Functions
host does not renew locks, so a ``LockKeeper`` renews each in-flight message's lock
every ``LockRenewalSeconds`` (well inside the entity's lock duration), stops as soon as
the message is settled, and gives up after ``MaxLockRenewalSeconds`` so a stuck message
cannot hold its lock forever.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from shared import telemetry
from shared.processing.inbound import InboundMessage
from shared.processing.ports import MessageHandler, Settler
from shared.processing.values import Outcome

log = logging.getLogger(__name__)


class LockKeeper:
    def __init__(self, settler: Settler, interval_seconds: float, max_seconds: float) -> None:
        self._settler = settler
        self._interval = interval_seconds
        self._max = max_seconds
        self._in_flight: dict[int, tuple[InboundMessage, float]] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lock-keeper", daemon=True)
        self.renewals = 0

    def __enter__(self) -> LockKeeper:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)

    def track(self, message: InboundMessage) -> None:
        with self._lock:
            self._in_flight[id(message)] = (message, time.monotonic())

    def release(self, message: InboundMessage) -> None:
        with self._lock:
            self._in_flight.pop(id(message), None)

    def _run(self) -> None:
        while not self._stopped.wait(self._interval):
            now = time.monotonic()
            with self._lock:
                due = [
                    (key, message)
                    for key, (message, started) in self._in_flight.items()
                    if now - started < self._max
                ]
                for key, (message, started) in list(self._in_flight.items()):
                    if now - started >= self._max:
                        log.warning(
                            "stopped renewing the lock of %s after %.0fs",
                            message.message_id,
                            self._max,
                        )
                        self._in_flight.pop(key)
            for key, message in due:
                with self._lock:
                    if key not in self._in_flight:
                        continue  # settled meanwhile
                try:
                    self._settler.renew_lock(message)
                    self.renewals += 1
                except Exception:
                    log.warning("could not renew the lock of %s", message.message_id, exc_info=True)


@dataclass
class BatchReport:
    outcomes: Counter[Outcome] = field(default_factory=Counter)
    lock_renewals: int = 0


class BatchProcessor:
    def __init__(
        self,
        processor: MessageHandler,
        concurrency: int,
        lock_renewal_seconds: float,
        max_lock_renewal_seconds: float,
    ) -> None:
        self._processor = processor
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="inference")
        self._renewal = lock_renewal_seconds
        self._max_renewal = max_lock_renewal_seconds

    def process(self, messages: list[InboundMessage], settler: Settler) -> BatchReport:
        """Process every message of a batch; never raises."""
        report = BatchReport()
        started = time.monotonic()
        with LockKeeper(settler, self._renewal, self._max_renewal) as keeper:
            # Every message's lock is kept from receipt, not from when a model slot frees
            # up: with more messages than slots (or other batches sharing the pool) a queued
            # message would otherwise lose its lock while it waits.
            for message in messages:
                keeper.track(message)

            invocation = telemetry.current_traceparent()  # this thread's: the pool's lack it

            def one(message: InboundMessage) -> Outcome:
                try:
                    return self._processor.process(message, settler, invocation)
                finally:
                    keeper.release(message)

            for outcome in self._pool.map(one, messages):
                report.outcomes[outcome] += 1
        report.lock_renewals = keeper.renewals
        log.info(
            "batch of %d processed in %.2fs: %s",
            len(messages),
            time.monotonic() - started,
            {str(outcome): count for outcome, count in report.outcomes.items()},
        )
        return report
