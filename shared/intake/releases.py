"""Requests scheduled to reach the queue later, called back and sent again when their
tenant's part of the deployment changes.

Intake releases a tenant's burst into the standard lane at the tenant's part of the
deployment's rate (``inference.tenant_shares``): beside another tenant's scheduled
burst, its weight's part; alone, the whole rate. A part set while another tenant was
busy would hold the deployment idle once that one is gone, and a whole rate set while a
tenant was alone would take the turns of one that came since; so the messages are sent
with the broker's schedule operation, which answers a sequence number, and kept here
until they are due. When the tenants with work held for a deployment change (one's burst
is all released, another's begins), all its held work is spaced again at the tenants' new
parts (``TenantPacing.respace``), and every message that would now come out much sooner
or later is sent again for its new time, then the earlier copy is cancelled.

- **Nothing is lost.** The copy is sent before the original is cancelled: a process that
  stops between the two leaves both, and the processor completes the second as a
  duplicate (its job has ended or runs). A cancel the broker refuses (a message that
  came due meanwhile) leaves the same. A message due within ``MARGIN_SECONDS`` is not
  called back at all, and the soonest are moved first, their cancels sent every
  ``CANCEL_CHUNK`` copies. A deployment whose moves did not all go is looked at again.
- **Nothing is stored.** A move is a broker operation (the copy's schedule) and a part
  of another (one cancel for a chunk of copies); the job is untouched.
- **Its own message id.** A copy needs an id of its own (``<request id>:release:<n>``),
  or the queue's duplicate detection would drop it as a copy of the original; the
  request id travels in the body.
- **One instance's view.** Each instance calls back what it scheduled itself: the
  instances' intakes share nothing, as their gates share nothing but the deployment's
  budget.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Final

from shared.clock import Clock, utc_now
from shared.errors import TransientError
from shared.inference.capacity import Release
from shared.intake.ports import TenantPacing
from shared.messaging import OutgoingMessage, Scheduled, SchedulingSender
from shared.periodic import run_every

log = logging.getLogger(__name__)

# A message due sooner than this is left where it is: its call-back could reach the broker
# after it was enqueued, and the move would gain little.
MARGIN_SECONDS: Final = 2.0
# A message is sent again only to come out at least this much sooner or later (and a tenth
# of its wait): a move is a broker operation and a part of another.
LEAST_GAIN_SECONDS: Final = 5.0
# How many earlier copies one cancel calls back: the copies of a chunk are sent first, so
# the earliest of them must not come due before their cancel.
CANCEL_CHUNK: Final = 16

RELEASE_MARK: Final = ":release:"
# How often the app looks for tenants whose scheduled work is all released.
LOOK_SECONDS: Final = 1.0


@dataclass
class _Held:
    """A message the broker holds for intake until ``due``."""

    message: OutgoingMessage
    tenant: str
    model: str
    key: str  # its deployment (``TenantPacing.pacing_key``)
    text_chars: int
    parameters: Mapping[str, Any]
    due: datetime
    scheduled: Scheduled
    moves: int = 0


class ScheduledReleases:
    """The requests this instance's intake scheduled (see the module doc). Thread-safe:
    requests are scheduled from the doors' threads while a thread of its own looks; a
    held message is changed only by the looking thread, under the lock."""

    def __init__(
        self, sender: SchedulingSender, pacing: TenantPacing, clock: Clock = utc_now
    ) -> None:
        self._sender = sender
        self._pacing = pacing
        self._clock = clock
        self._lock = threading.Lock()
        self._held: list[_Held] = []
        # Per deployment, the tenants with work held at the last look whose moves all went.
        self._tenants: dict[str, frozenset[str]] = {}
        self._looking = False

    def schedule(
        self,
        message: OutgoingMessage,
        *,
        tenant: str,
        model: str,
        text_chars: int,
        parameters: Mapping[str, Any],
    ) -> None:
        """Send ``message`` for its ``scheduled_enqueue_time`` and keep it until then;
        TransientError when the broker cannot take it (nothing is kept)."""
        scheduled = self._sender.schedule(message)
        due = message.scheduled_enqueue_time
        assert due is not None  # the sender refuses a message without one
        key = self._pacing.pacing_key(model)
        held = _Held(message, tenant, model, key, text_chars, parameters, due, scheduled)
        with self._lock:
            self._held.append(held)

    def held(self) -> int:
        """Messages scheduled and not due yet."""
        now = self._clock()
        with self._lock:
            return sum(1 for held in self._held if held.due > now)

    def look(self) -> int:
        """Drop what came due; where the tenants with work held for a deployment changed
        (one's burst is all released, or another's began), space all its held work again
        and send again what would come out much sooner or later. The messages moved. A
        deployment whose moves did not all go is looked at again the next time."""
        now = self._clock()
        with self._lock:
            self._held = [held for held in self._held if held.due > now]
            gathered: dict[str, set[str]] = defaultdict(set)
            for held in self._held:
                gathered[held.key].add(held.tenant)
            waiting = {key: frozenset(tenants) for key, tenants in gathered.items()}
            self._tenants = {k: v for k, v in self._tenants.items() if k in waiting}
            changed = {key for key, tenants in waiting.items() if self._tenants.get(key) != tenants}
            candidates = [held for held in self._held if held.key in changed]
        if not candidates:
            return 0
        releases = [
            Release(h.tenant, h.model, h.text_chars, h.parameters, _seconds(h.due - now))
            for h in candidates
        ]
        delays = self._pacing.respace(releases)
        moving = sorted(
            (
                (held, delay)
                for held, delay in zip(candidates, delays, strict=True)
                if _worth_moving(_seconds(held.due - now), delay)
            ),
            key=lambda move: move[0].due,  # the soonest first: their call-back is the most urgent
        )
        moved, unmoved = self._move(moving, now)
        with self._lock:
            for key in changed - unmoved:
                self._tenants[key] = waiting[key]
        return moved

    def _move(self, moving: list[tuple[_Held, float]], now: datetime) -> tuple[int, set[str]]:
        """Send each message again for its new time, then cancel the earlier copies, a few
        at a time; a message whose copy could not be sent stays as it was. The messages
        moved, and the deployments of those that could not be."""
        moved, unmoved = 0, set[str]()
        for start in range(0, len(moving), CANCEL_CHUNK):
            earlier: list[Scheduled] = []
            for held, delay in moving[start : start + CANCEL_CHUNK]:
                previous = self._send_again(held, now + timedelta(seconds=max(delay, 0.0)))
                if previous is None:
                    unmoved.add(held.key)
                else:
                    earlier.append(previous)
            if earlier:
                self._cancel(earlier)
                moved += len(earlier)
        if moved:
            log.info("sent %d scheduled requests again for their tenants' new parts of the "
                     "deployment", moved)  # fmt: skip
        return moved, unmoved

    def _send_again(self, held: _Held, due: datetime) -> Scheduled | None:
        """Schedule a copy of ``held`` for ``due`` and keep it instead; the earlier copy's
        handle, or None when the broker did not take the copy."""
        copy = replace(
            held.message,
            message_id=f"{_request_id(held.message)}{RELEASE_MARK}{held.moves + 1}",
            scheduled_enqueue_time=due,
        )
        try:
            scheduled = self._sender.schedule(copy)
        except TransientError as error:
            log.warning("request %s could not be sent again (%s); it comes at %s",
                        _request_id(held.message), error, held.due.isoformat())  # fmt: skip
            return None
        with self._lock:
            previous = held.scheduled
            held.message, held.due, held.scheduled = copy, due, scheduled
            held.moves += 1
        return previous

    def _cancel(self, earlier: list[Scheduled]) -> None:
        """Cancel the earlier copies; when the broker refuses them together (one came due
        meanwhile), one at a time."""
        try:
            self._sender.cancel(earlier)
            return
        except TransientError:
            if len(earlier) == 1:
                self._not_cancelled(1)
                return
        missed = 0
        for one in earlier:
            try:
                self._sender.cancel([one])
            except TransientError:
                missed += 1
        if missed:
            self._not_cancelled(missed)

    @staticmethod
    def _not_cancelled(count: int) -> None:
        # Their copies are sent: the processor completes the second of each pair.
        log.warning("could not cancel %d scheduled requests sent again; each arrives twice, "
                    "and its second copy ends as a duplicate", count)  # fmt: skip

    def start_looking(self, every_seconds: float) -> None:
        """Look every ``every_seconds`` in a thread of its own (the app starts it with its
        services); idempotent."""
        with self._lock:
            if self._looking:
                return
            self._looking = True
        run_every(self, every_seconds, ScheduledReleases.look, name="scheduled-releases")


def _worth_moving(delay: float, new_delay: float) -> bool:
    """A message moves by at least ``LEAST_GAIN_SECONDS`` and a tenth of its wait, and
    only when it is not about to come due anyway."""
    change = abs(delay - new_delay)
    return delay > MARGIN_SECONDS and change >= max(LEAST_GAIN_SECONDS, delay / 10)


def _request_id(message: OutgoingMessage) -> str:
    return message.message_id.split(RELEASE_MARK)[0]


def _seconds(span: timedelta) -> float:
    return span.total_seconds()
