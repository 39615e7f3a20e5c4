"""Where a Service Bus dead-letter sub-queue is, and what its messages carry beside them.

A request message lands in its queue's dead-letter sub-queue when the processor gives up
on it (``processing.settlement.DeadLetterReason``: InvalidPayload, ClaimCheckInvalid,
MaxRetriesExceeded, PermanentFailure) or the broker does (MaxDeliveryCountExceeded,
TTLExpiredException). It keeps its body, properties and sequence number there, with the
reason and description beside its application properties.

The message (``values.DeadLetteredMessage``) and the port (``ports.DeadLetterQueues``)
live with the other processing values and ports; this module holds what the filters, the
operations and the adapter share about the sub-queues themselves: a subscription's path,
the properties the broker adds (``DEAD_LETTER_PROPERTIES``) and the port read in pages
(``pages_of``).
"""

from __future__ import annotations

from shared.processing.ports import DeadLetterPages, DeadLetterQueues
from shared.processing.values import DeadLetteredMessage

# A topic subscription's entity path, as Service Bus writes it (``<topic>/subscriptions/<s>``):
# where the dead-letter tools name a queue, they also take a subscription of the results
# topic this way.
SUBSCRIPTIONS = "/subscriptions/"


def subscription_path(topic: str, subscription: str) -> str:
    return f"{topic}{SUBSCRIPTIONS}{subscription}"


def topic_subscription(entity: str) -> tuple[str, str] | None:
    """(topic, subscription) of a subscription's entity path; None for a queue."""
    topic, found, subscription = entity.partition(SUBSCRIPTIONS)
    return (topic, subscription) if found and topic and subscription else None


# The broker puts these beside the application properties; they are not the sender's.
DEAD_LETTER_PROPERTIES = frozenset({"DeadLetterReason", "DeadLetterErrorDescription"})


class _SlicedPages:
    """Pages cut from a whole ``peek``: for dead-letter queues that hold everything in
    memory anyway (the in-memory adapter)."""

    def __init__(self, queues: DeadLetterQueues) -> None:
        self._queues = queues

    def peek_page(
        self, queue: str, from_sequence_number: int, max_count: int
    ) -> list[DeadLetteredMessage]:
        later = [i for i in self._queues.peek(queue) if i.sequence_number >= from_sequence_number]
        return sorted(later, key=lambda i: i.sequence_number)[:max_count]


def pages_of(queues: DeadLetterQueues) -> DeadLetterPages:
    """``queues`` read by pages: itself when it can, else pages cut from its ``peek``."""
    return queues if isinstance(queues, DeadLetterPages) else _SlicedPages(queues)
