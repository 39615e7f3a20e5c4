"""A queue (pull delivery) event subscription: receive, locks and settlement.

Received events are locked for ``receiveLockDurationInSeconds`` under a lock token that
is new for every delivery. Acknowledge deletes, release makes the event available again
(optionally after one of the allowed delays), reject dead-letters, renewLock extends the
lock within an hour of the receive. A lock that runs out returns the event for redelivery
with ``deliveryCount`` + 1; an event that has been delivered ``maxDeliveryCount`` times and
is not settled, or that outlives its time to live, is dead-lettered. The caller holds the
broker's lock around every method.
"""

from __future__ import annotations

import base64
import binascii
import heapq
import itertools
import logging
import os
from collections import deque
from typing import Any, NamedTuple

from .clock import Clock, utcnow
from .config import SubscriptionConfig
from .dead_letter import (
    MAX_DELIVERY_EXCEEDED,
    NOT_SETTLED,
    REJECTED,
    RELEASED,
    TIME_TO_LIVE_EXPIRED,
    DeadLetter,
    DeadLetterSink,
    dead_letter_record,
)
from .entries import Entry

log = logging.getLogger("eventgrid_emulator.pull")

RENEW_WINDOW = 3600.0  # renewLock succeeds within an hour of the receive
_TOKEN_MAGIC = b"EGEMU\x00\x01\x00"  # lets a malformed token (BadToken) be told from a lost one


def new_lock_token() -> str:
    return base64.b64encode(_TOKEN_MAGIC + os.urandom(16)).decode()


def well_formed(token: str) -> bool:
    try:
        raw = base64.b64decode(token, validate=True)
    except (binascii.Error, ValueError):
        return False
    return len(raw) == len(_TOKEN_MAGIC) + 16 and raw.startswith(_TOKEN_MAGIC)


class Settled(NamedTuple):
    """The per-token answer of acknowledge, release, reject and renewLock."""

    succeeded: list[str]
    failed: list[dict[str, Any]]

    def body(self) -> dict[str, Any]:
        return {"failedLockTokens": self.failed, "succeededLockTokens": self.succeeded}


def _failure(token: str, code: str, message: str) -> dict[str, Any]:
    return {"lockToken": token, "error": {"code": code, "message": message}}


class PullSubscription:
    mode = "Queue"

    def __init__(
        self, prefix: str, config: SubscriptionConfig, clock: Clock, sink: DeadLetterSink
    ) -> None:
        self.prefix = prefix  # <namespace>/<topic>/<subscription>
        self.config = config
        self._clock = clock
        self._sink = sink
        self._available: deque[Entry] = deque()
        self._delayed: list[tuple[float, int, Entry]] = []
        self._locked: dict[str, Entry] = {}
        self._order = itertools.count()
        self.matched = 0
        self.acknowledged = 0
        self.dead_lettered = 0

    def enqueue(self, entry: Entry) -> None:
        self.matched += 1
        self._available.append(entry)

    def has_available(self) -> bool:
        return bool(self._available)

    def take(self, max_events: int) -> list[Entry]:
        """Lock up to ``max_events`` available events for one receive."""
        now = self._clock.now()
        taken: list[Entry] = []
        while self._available and len(taken) < max_events:
            entry = self._available.popleft()
            if entry.expired(now):
                self._dead_letter(entry, TIME_TO_LIVE_EXPIRED, NOT_SETTLED)
                continue
            entry.delivery_count += 1
            entry.lock_token = new_lock_token()
            entry.lock_created = now
            entry.locked_until = now + self._clock.span(self.config.lock_duration)
            entry.last_attempt_utc = utcnow()
            self._locked[entry.lock_token] = entry
            taken.append(entry)
        return taken

    def settle(self, action: str, tokens: list[str], delay: float = 0.0) -> Settled:
        """acknowledge, release (after ``delay`` service seconds), reject or renewLock."""
        now = self._clock.now()
        result = Settled([], [])
        for token in tokens:
            if not well_formed(token):
                result.failed.append(_failure(token, "BadToken", "Token is not valid."))
                continue
            entry = self._locked.get(token)
            if entry is None or entry.locked_until <= now:
                result.failed.append(_failure(token, "TokenLost", "Token has expired."))
                continue
            if action == "renewLock":
                if now - entry.lock_created > self._clock.span(RENEW_WINDOW):
                    result.failed.append(
                        _failure(token, "TokenLost", "Lock renewal window (1 hour) has passed.")
                    )
                    continue
                entry.locked_until = now + self._clock.span(self.config.lock_duration)
            else:
                del self._locked[token]
                entry.lock_token = None
                if action == "acknowledge":
                    self.acknowledged += 1
                elif action == "reject":
                    self._dead_letter(entry, REJECTED, "Rejected")
                else:
                    self._return(entry, now + self._clock.span(delay), RELEASED)
            result.succeeded.append(token)
        return result

    def sweep(self) -> bool:
        """Expire locks, reveal delayed events, expire the oldest; True if events came back."""
        now = self._clock.now()
        before = len(self._available)
        for token in [t for t, e in self._locked.items() if e.locked_until <= now]:
            entry = self._locked.pop(token)
            entry.lock_token = None
            self._return(entry, now, NOT_SETTLED)
        while self._delayed and self._delayed[0][0] <= now:
            self._available.append(heapq.heappop(self._delayed)[2])
        while self._available and self._available[0].expired(now):
            self._dead_letter(self._available.popleft(), TIME_TO_LIVE_EXPIRED, NOT_SETTLED)
        return len(self._available) > before

    def counts(self) -> dict[str, Any]:
        return {
            "deliveryMode": self.mode,
            "matched": self.matched,
            "available": len(self._available),
            "locked": len(self._locked),
            "delayed": len(self._delayed),
            "acknowledged": self.acknowledged,
            "deadLettered": self.dead_lettered,
        }

    def _return(self, entry: Entry, visible_at: float, result: str) -> None:
        if entry.delivery_count >= self.config.max_delivery_count:
            self._dead_letter(entry, MAX_DELIVERY_EXCEEDED, result)
        elif visible_at > self._clock.now():
            heapq.heappush(self._delayed, (visible_at, next(self._order), entry))
        else:
            self._available.append(entry)

    def _dead_letter(self, entry: Entry, reason: str, result: str) -> None:
        self.dead_lettered += 1
        log.info("%s: event %s dead-lettered: %s", self.prefix, entry.event.get("id"), reason)
        record = dead_letter_record(entry, reason, result)
        self._sink.put(DeadLetter(self.config.dead_letter_container, self.prefix, record))
