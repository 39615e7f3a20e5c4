"""Replaying a dead-lettered message of a results-topic subscription.

A results message (``InferenceCompleted``, ``InferenceFailed``... for consumers) reaches a
subscription's dead-letter sub-queue when its consumer gives up on it, or the broker does
(``MaxDeliveryCountExceeded``, ``TTLExpiredException``). It carries no job to reopen: the
fix is on the consumer's side, and a replay only sends the message again.

Nothing can send to one subscription: a copy goes to the topic, and every subscription
whose filter admits it receives it. The copy keeps the original's routing properties (so
it reaches the subscription it was dead-lettered from), gets a new message id
``<original>:replay:<n>`` (the topic's duplicate detection would drop the original id)
with ``replay_of=<original id>``, and names its subscription in ``replay_subscription``,
so that a subscription rule can admit a replay only where it is meant to go:
``(<filter>) AND (replay_subscription IS NULL OR replay_subscription = '<name>')``. Until
the rules say so, the other matching subscriptions (``audit`` matches every message) get
the copy too; results messages carry deterministic event ids, so consumers drop a repeat.
"""

from __future__ import annotations

from shared.messaging import OutgoingMessage
from shared.processing.dead_letters.queues import DEAD_LETTER_PROPERTIES, topic_subscription
from shared.processing.values import DeadLetteredMessage

REPLAY_SUBSCRIPTION = "replay_subscription"


def is_subscription(item: DeadLetteredMessage) -> bool:
    return topic_subscription(item.queue) is not None


def result_copy(item: DeadLetteredMessage, copy_id: str) -> OutgoingMessage:
    """The copy of a subscription's dead-lettered message, to send to its topic."""
    found = topic_subscription(item.queue)
    if found is None:
        raise ValueError(f"{item.queue} is not a topic subscription")
    original = item.message_id or copy_id
    properties = {
        k: v
        for k, v in item.application_properties.items()
        if v is not None and k not in DEAD_LETTER_PROPERTIES
    }
    properties.update({"replay_of": original, REPLAY_SUBSCRIPTION: found[1]})
    return OutgoingMessage(
        body=item.body,
        message_id=copy_id,
        correlation_id=item.correlation_id or original,
        content_type=item.content_type or "application/json",
        subject=item.subject,
        session_id=item.session_id,
        time_to_live=None,  # the topic's default
        application_properties=properties,
    )
