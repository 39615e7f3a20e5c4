"""Inferbus, the application package: the system as rings of capabilities around a core,
adapters at the SDK edge, and entrypoints that alone know the wiring.

From the bottom (``tests/unit/test_rings.py`` keeps every import pointing down):

- the core, at this package's root: contracts, errors (the one exception tree),
  settings, clock, tracing, telemetry, redaction, the job lifecycle, the JSON-document
  and message-sender ports, lanes.
- the domain: ``inference/`` (what a model is asked and answers, the catalog, the
  capacity gate), ``accounting/`` (tokens per tenant), ``results`` (an answer as a result).
- the capabilities: ``intake/`` (accepting work: submissions, claim checks, idempotency,
  tenancy, backpressure), ``events/`` (the Event Grid and blob doors, announcements,
  Event Grid's dead letters), ``processing/`` (the pipeline and its outcome table,
  settlement, retries, deferral, the watchdog, dead letters and the backlog),
  ``global_batch/`` (the Azure OpenAI Global Batch lane), ``producer/`` (request lines to
  the queues). Processing imports neither ``global_batch`` (its ``ports.BatchStaging``)
  nor the command lines.
- ``adapters/``: the only modules that import Azure, OpenAI or other SDKs; each
  implements a port declared by a capability (``in_memory`` implements them all without
  I/O, with the same rules, for tests and benchmarks).
- ``entrypoints/``: ``bootstrap`` (the wiring: ``build_services`` over explicit
  ``Ports``), ``functions`` (what the triggers call), ``http/`` (the handlers) and
  ``cli/`` (the command lines; ``ops/`` and ``producer/__main__`` keep their names).

Nothing here imports ``azure.functions`` (ruff enforces it, and that only ``adapters/``
imports SDKs).
"""
