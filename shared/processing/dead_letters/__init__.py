"""Dead letters of the request queues and of the results topic's subscriptions, in one place.

- ``queues``: the dead-lettered message as the operations see it, and the port that pages
  through a dead-letter sub-queue (``DeadLetterQueues``, implemented in ``adapters``).
- ``filters``: which dead letters an operator's command selects.
- ``operations``: list, show, replay and purge, with their rules (a replay reopens a
  failed job once, and only while its deadline allows).
- ``deadlines``: ``replay --extend-deadline``: a later deadline carried on the copy.
- ``subscriptions``: the same operations over the results topic's subscriptions.
- ``reconciliation``: what the broker dead-lettered on its own (max deliveries, TTL)
  ends its job, from a checkpoint, once.
"""
