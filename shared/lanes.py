"""Lanes: which queue a request travels on, decided by the request itself.

Three queues carry requests, each with its own trigger so one cannot starve another:

- ``standard`` (``RequestsQueueName``): ``normal`` and ``low`` priority work, batched;
- ``priority`` (``PriorityQueueName``): ``high`` priority work. Its trigger has its own
  concurrency, so a high request never waits behind a backlog of standard ones;
- ``ordered`` (``OrderedQueueName``, session-enabled): requests that carry a
  ``document_id``. The id is the message's ``session_id``: the steps of one document run
  one at a time in the order they were sent, while different documents run in parallel.
  Order outranks priority: a ``high`` step of a document still waits for its earlier steps.

The rule lives here once, so intake, retries, the producer CLI and the ops tools agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from shared.contracts import Priority
from shared.messaging import OutgoingMessage, Scheduled, SchedulingSender
from shared.settings import Settings


class Lane(StrEnum):
    STANDARD = "standard"
    PRIORITY = "priority"
    ORDERED = "ordered"

    @property
    def is_ordered(self) -> bool:
        return self is Lane.ORDERED


def lane_for(priority: Priority | str, document_id: str | None) -> Lane:
    """The lane of a request with this priority and (optional) document id."""
    if document_id:
        return Lane.ORDERED
    if Priority(priority) is Priority.HIGH:
        return Lane.PRIORITY
    return Lane.STANDARD


def lane_of_message(message: OutgoingMessage) -> Lane:
    """The lane of a request envelope (``messaging.request_envelope``)."""
    priority = message.application_properties.get("priority", Priority.NORMAL.value)
    try:
        return lane_for(Priority(str(priority)), message.session_id)
    except ValueError:
        return lane_for(Priority.NORMAL, message.session_id)


@dataclass(frozen=True)
class LaneQueues:
    """The queue name of each lane (app settings ``RequestsQueueName``,
    ``PriorityQueueName``, ``OrderedQueueName``)."""

    standard: str
    priority: str
    ordered: str

    @classmethod
    def from_settings(cls, settings: Settings) -> LaneQueues:
        return cls(
            settings.queues.requests,
            settings.queues.priority,
            settings.queues.ordered,
        )

    def queue(self, lane: Lane) -> str:
        return {Lane.STANDARD: self.standard, Lane.PRIORITY: self.priority}.get(lane, self.ordered)

    def lane(self, queue: str) -> Lane:
        """The lane a queue name serves; ValueError for a queue that is no lane's."""
        for lane in Lane:
            if self.queue(lane) == queue:
                return lane
        raise ValueError(f"'{queue}' is not a request queue")


class LaneRouter:
    """Implements ``messaging.SchedulingSender``: each request envelope goes to its lane's
    queue (intake's first send and the processor's retry copies alike)."""

    def __init__(self, senders: Mapping[Lane, SchedulingSender]) -> None:
        missing = [lane.value for lane in Lane if lane not in senders]
        if missing:
            raise ValueError(f"no sender for lanes: {', '.join(missing)}")
        self._senders = dict(senders)

    def send(self, message: OutgoingMessage) -> None:
        self._senders[lane_of_message(message)].send(message)

    def schedule(self, message: OutgoingMessage) -> Scheduled:
        return self._senders[lane_of_message(message)].schedule(message)

    def cancel(self, scheduled: Sequence[Scheduled]) -> None:
        """Each lane's sender cancels what waits in its own queue."""
        for sender in self._senders.values():
            sender.cancel(scheduled)
