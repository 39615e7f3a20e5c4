"""Fail fast while the broker is down: a circuit breaker around intake's sends.

When Service Bus cannot be reached, every HTTP worker thread would wait for its own
failed send before the same 503. Intake's sends make one try (its client has no SDK
retries, which took about 11 s), and after one send fails with ``BrokerUnreachable``
(what the Service Bus adapter makes of a
connection, communication or timeout failure), the breaker *opens*: for
``open_seconds`` every send is refused at once with ``ServiceUnavailable`` and a
Retry-After of the time left. Then it lets one call through as a probe (the others are
still refused while it runs): if the broker takes it, the breaker closes; if not, it
opens again. Nothing is sent while it is open, so
nothing is accepted, and intake releases the Idempotency-Key and records no job, exactly
as for a send that failed. Other transient failures (a busy or full entity) are one
entity's state, not an outage: they pass through and leave the breaker as it is.

It guards intake only: the processor's retry copies keep their own policy (a message
whose reschedule fails is abandoned and delivered again). One breaker serves every lane,
since the lanes' queues live in one namespace and an outage takes them all.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from shared.errors import BrokerUnreachable, ServiceUnavailable
from shared.messaging import OutgoingMessage, Scheduled, SchedulingSender

log = logging.getLogger(__name__)

T = TypeVar("T")


class SendBreaker:
    """Implements ``messaging.SchedulingSender`` around ``sender`` (see the module
    docstring): a scheduled send and its call-back are sends as well."""

    def __init__(
        self,
        sender: SchedulingSender,
        open_seconds: float,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if open_seconds <= 0:
            raise ValueError("open_seconds must be above zero")
        self._sender = sender
        self._open_seconds = open_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._open_until: float | None = None  # None: closed
        self._probing = False

    @property
    def is_open(self) -> bool:
        """True from a failed send until a send gets through again."""
        with self._lock:
            return self._open_until is not None

    def send(self, message: OutgoingMessage) -> None:
        self._guarded(lambda: self._sender.send(message))

    def schedule(self, message: OutgoingMessage) -> Scheduled:
        return self._guarded(lambda: self._sender.schedule(message))

    def cancel(self, scheduled: Sequence[Scheduled]) -> None:
        self._guarded(lambda: self._sender.cancel(scheduled))

    def _guarded(self, call: Callable[[], T]) -> T:
        probe = self._admit()
        try:
            answer = call()
        except BrokerUnreachable as error:
            self._trip(error, probe)
            raise
        except BaseException:
            # The broker answered (busy, a message too large, an entity missing): it is up.
            self._close(probe)
            raise
        self._close(probe)
        return answer

    def _admit(self) -> bool:
        """Let the call through (True when it is the probe), or refuse it at once."""
        with self._lock:
            if self._open_until is None:
                return False
            left = self._open_until - self._clock()
            if left > 0 or self._probing:
                wait = left if left > 0 else self._open_seconds
                raise ServiceUnavailable(
                    "Service Bus is unreachable (a recent send failed); nothing was "
                    "accepted, retry later",
                    retry_after=max(1, math.ceil(wait)),
                )
            self._probing = True
            return True

    def _trip(self, error: BrokerUnreachable, probe: bool) -> None:
        with self._lock:
            was_closed = self._open_until is None
            self._open_until = self._clock() + self._open_seconds
            if probe:
                self._probing = False
        if was_closed:
            log.warning(
                "Service Bus send failed (%s); intake refuses work at once for %.0f s, "
                "then probes the broker",
                error,
                self._open_seconds,
            )
        else:
            log.debug("the broker probe failed (%s); the breaker stays open", error)

    def _close(self, probe: bool) -> None:
        with self._lock:
            was_open = self._open_until is not None
            self._open_until = None
            if probe:
                self._probing = False
        if was_open:
            log.info("Service Bus takes sends again; intake accepts work")
