"""A local Event Grid namespace emulator (development and tests only).

An HTTP server speaking the namespace data-plane API that the unmodified
``azure-eventgrid`` SDK uses (``EventGridPublisherClient(..., namespace_topic=...)`` and
``EventGridConsumerClient``): publish, receive, acknowledge, release, reject, renew lock,
push delivery to webhooks, and dead letters written to Azurite. See README.md.
"""

__version__ = "0.1.0"
