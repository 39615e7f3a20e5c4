"""The entrypoints ring: the only part of ``shared`` that knows the wiring.

- ``bootstrap``: picks the adapters and builds the use cases from them (``Services``,
  over explicit ``Ports``); nothing below this ring imports it.
- ``functions``: what the non-HTTP triggers of ``function_app.py`` call (blobs, Event
  Grid, the lanes' batches, the timers).
- ``http/``: the HTTP handlers (requests, batches, the webhook, the OpenAPI document and
  its page) and the problem+json answers of the error tree.
- ``cli/``: the command lines (``python -m shared.ops``, ``python -m shared.producer``).

Only the wiring sees ``Services`` and the settings: ``bootstrap``, ``functions`` and the
command lines' composition (``cli.ops``, ``cli.producer``). An HTTP handler holds its
endpoints (``builders.HttpEndpoints``), an ops command what ``cli.ops`` builds for its
area; the capabilities below receive only the ports and values they use.
"""
