"""Processing request messages: the pipeline, its outcome policy and per-message settlement.

Retries (scheduled copies with backoff), deferral with its ledger, batches with bounded
concurrency and lock renewal all live here. May import the root of ``shared``, ``intake``
(claim checks) and ``events`` (announcements); never ``adapters`` or an SDK.
"""
