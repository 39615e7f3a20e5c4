"""Inferbus, the application package: the system as capabilities, ports, and the SDK edge.

- ``intake/``: how work is accepted: the HTTP request API, submissions (validation, claim
  check, job, request message), idempotency keys, tenancy, backpressure, problem details.
- ``processing/``: how a request message is processed: the pipeline and its outcome
  policy, settlement, scheduled retries and backoff, deferral, batches and locks.
- ``events/``: events in and out: the Event Grid and blob doors, the webhook and its
  authentication, and the CloudEvents and topic messages announcing results.
- ``inference/``: what a model is asked and answers (the ``ModelClient`` port), the model
  catalog (``models.json``), tasks and how an answer becomes a result, parameters.
- ``ops/``: commands for operators (``python -m shared.ops``) and the backlog report.
- ``adapters/``: the only modules that import Azure, OpenAI or other SDKs; each
  implements a port defined elsewhere in this package (``in_memory`` implements them all
  without I/O, with the same rules, for tests and benchmarks).
- The root holds what every capability shares: contracts, errors, settings, clock,
  tracing, the job lifecycle, results, the JSON-document and message-sender ports,
  the wiring (``composition``: ``build_services`` over explicit ``Ports``) and the
  functions the triggers call (``entry_points``, which receive their services).

Import rules (ruff enforces the SDK rule): nothing here imports ``azure.functions``;
only ``adapters/`` imports SDKs; capabilities import the root and each other's ports,
never an adapter (``composition`` is the one place that picks adapters).
"""
