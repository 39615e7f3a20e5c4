"""W3C Trace Context: carry one trace from the HTTP caller through Service Bus.

Intake continues the caller's trace when a valid ``traceparent`` arrives (as a new span
of it) and starts one otherwise. The values travel in the request message's application
properties, where the processor and the Functions host pick them up.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_INVALID_TRACE_ID = "0" * 32


@dataclass(frozen=True)
class TraceContext:
    traceparent: str
    tracestate: str | None = None

    @property
    def trace_id(self) -> str:
        return self.traceparent.split("-")[1]


def continue_or_start(traceparent: str | None, tracestate: str | None = None) -> TraceContext:
    """A new span in the caller's trace, or the root span of a new trace."""
    match = _TRACEPARENT.match((traceparent or "").strip().lower())
    span_id = secrets.token_hex(8)
    if match and match.group(1) != _INVALID_TRACE_ID:
        return TraceContext(f"00-{match.group(1)}-{span_id}-{match.group(3)}", tracestate)
    return TraceContext(f"00-{secrets.token_hex(16)}-{span_id}-01", None)
