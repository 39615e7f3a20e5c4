"""Adapters: the only modules that import SDKs (Azure, OpenAI, JWT). Each implements a port.

Storage (``blob_storage``, ``blob_documents``), Service Bus (``servicebus`` sending,
``servicebus_inbound`` received messages and settlement, ``queue_counts`` runtime counts),
Event Grid (``eventgrid``), models (``models/``: one module per provider of the model
catalog, and the registry that finds them), identity and
tokens (``identity``, ``entra_tokens``), and ``in_memory``: every port without I/O, with
the same rules, for tests and benchmarks. Adapters translate SDK errors into
``shared.errors`` at the edge; they may import any of ``shared`` but nothing imports them
except the wiring (``entrypoints.bootstrap``, and ``entrypoints.cli.ops`` and
``entrypoints.cli.producer`` for the SDKs only their commands use) and the triggers, for
the binding types they decode.
"""
