"""The HTTP handlers: plain ``ApiRequest`` in, ``ApiResponse`` out (``messages``), the
error tree answered as problem+json (``problems``); ``triggers/`` adapts them to
``azure.functions``."""
