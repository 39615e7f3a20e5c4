"""The worker's ``RpcLog`` messages, printed the way the Functions host prints them.

A log written by the app during an invocation appears under ``Function.<name>.User`` (the
host's category for a function's own logs); the runtime's and the worker's own logs under
``Host.Worker``; app logs outside any invocation (module import, background threads)
under their Python logger's name.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from functions_host.log_lines import STACK_TRACE
from functions_host.protos import messages
from functions_host.redaction import redact

# The level the protocol names ``None`` (a Python keyword, so read by name): log nothing.
LEVEL_NONE = messages.RpcLog.Level.Value("None")
_LEVELS = {
    messages.RpcLog.Trace: logging.DEBUG,
    messages.RpcLog.Debug: logging.DEBUG,
    messages.RpcLog.Information: logging.INFO,
    messages.RpcLog.Warning: logging.WARNING,
    messages.RpcLog.Error: logging.ERROR,
    messages.RpcLog.Critical: logging.CRITICAL,
}


class WorkerLogPrinter:
    def __init__(self, running: Mapping[str, str]) -> None:
        self._running = running  # invocation id -> function name, kept by the invoker

    def category(self, rpc_log: Any) -> str:
        if rpc_log.log_category == messages.RpcLog.System:
            return "Host.Worker"
        function = self._running.get(rpc_log.invocation_id)
        if function:
            return f"Function.{function}.User"
        return str(rpc_log.category or "Host.Worker")

    def print(self, rpc_log: Any) -> None:
        if rpc_log.level == LEVEL_NONE:
            return
        level = _LEVELS.get(rpc_log.level, logging.INFO)
        logger = logging.getLogger(self.category(rpc_log))
        if not logger.isEnabledFor(level):
            return
        stack = ""
        if rpc_log.HasField("exception") and rpc_log.exception.stack_trace:
            stack = redact(rpc_log.exception.stack_trace.rstrip())
        # The stack trace goes below the line, indented (``log_lines.OneLineFormatter``).
        logger.log(level, "%s", redact(str(rpc_log.message)), extra={STACK_TRACE: stack})
