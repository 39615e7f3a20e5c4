"""The Service Bus SDK's ERROR lines for a connection drop that the listeners handle.

When the broker goes away under a receiver, the SDK logs "Transfer callback function
failed" at ERROR once for every message whose callback could no longer send on the dead
connection. The listener reports the same drop once, as a WARNING, and reconnects; each
of those messages comes back when its lock lapses. So for a connection error those lines
are lowered to DEBUG, and the log's ERRORs stay for what needs an operator. Any other
error of the callback stays an ERROR.
"""

from __future__ import annotations

import logging

from azure.servicebus._pyamqp.error import AMQPConnectionError

# The SDK's receiver links, sync and async, that log the failed callback.
RECEIVER_LOGGERS = (
    "azure.servicebus._pyamqp.receiver",
    "azure.servicebus._pyamqp.aio._receiver_async",
)
TRANSFER_CALLBACK_FAILED = "Transfer callback function failed"


class ConnectionDropLines(logging.Filter):
    """Lowers the SDK's failed-callback line to DEBUG when a connection error caused it
    (and lets it through only where DEBUG is wanted)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._a_dropped_connection(record):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)

    @staticmethod
    def _a_dropped_connection(record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR or not str(record.msg).startswith(
            TRANSFER_CALLBACK_FAILED
        ):
            return False
        args = record.args if isinstance(record.args, tuple) else (record.args,)
        return any(isinstance(arg, AMQPConnectionError) for arg in args)


def lower_connection_drop_lines() -> None:
    """Installs the filter on the SDK's receiver loggers (once, however often called)."""
    for name in RECEIVER_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, ConnectionDropLines) for f in logger.filters):
            logger.addFilter(ConnectionDropLines())
