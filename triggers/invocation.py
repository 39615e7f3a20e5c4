"""The invocation's trace, carried into the function's thread.

The Python worker attaches each invocation's trace context (``context.trace_context``, from
the host) in its event loop, while a synchronous function runs on a worker thread that
does not inherit it. Every trigger therefore takes ``context`` and runs inside
``in_trace(context)``, so the spans the app makes belong to the invocation's trace.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

import azure.functions as func

from shared import telemetry


def in_trace(context: func.Context) -> AbstractContextManager[None]:
    trace = context.trace_context
    return telemetry.invocation(trace.trace_parent or None, trace.trace_state or None)
