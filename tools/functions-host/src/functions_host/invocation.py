"""Invocations: an ``InvocationRequest`` to the worker, its response, timeouts and logs.

The host builds the request (trigger data as ``TypedData``, trigger metadata, trace
context) and the runtime in the worker does the rest: binding conversion, the call,
return values. Each invocation ends with one line in the host's words:
``Executed 'Functions.<name>' (Succeeded|Failed, Id=<id>, Duration=<ms>ms)``, and a
failure is logged with the exception the worker reported. host.json ``functionTimeout``
bounds the wait; as in the Python worker a running call cannot be stopped, so a timed-out
invocation fails while the worker finishes it in the background (the platform would
restart the worker instead).
"""

from __future__ import annotations

import concurrent.futures
import logging
import re
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from functions_host.functions import FunctionSpec
from functions_host.language_worker import LanguageWorker, describe_failure
from functions_host.protos import messages

log = logging.getLogger("host.invocation")


class FunctionTimeoutError(Exception):
    """The function ran past host.json ``functionTimeout``."""


class HostStoppingError(Exception):
    """The host is draining and accepts no new invocations."""


class FunctionInvocationError(Exception):
    """The worker reported the invocation as failed (the message is the worker's)."""


_TRACE_PARENT = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")


def trace_parent_for(incoming: str | None) -> str:
    """The caller's W3C traceparent when it is well formed, else a new trace."""
    if incoming and _TRACE_PARENT.fullmatch(incoming.strip()):
        return incoming.strip()
    return f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01"


class Invoker:
    """Sends invocations to the worker and knows how many are in flight (for the drain)."""

    def __init__(
        self, worker: LanguageWorker, function_timeout_s: float | None, running: dict[str, str]
    ) -> None:
        self._worker = worker
        self._timeout = function_timeout_s
        self._in_flight = 0
        self._idle = threading.Condition()
        self._stopping = False
        self._running = running  # invocation id -> function name, for the worker's logs

    def invoke(
        self,
        spec: FunctionSpec,
        inputs: Mapping[str, Any],
        trigger_metadata: Mapping[str, Any] | None = None,
        trace_parent: str | None = None,
    ) -> Any:
        """Run one invocation; returns its ``$return`` TypedData (or None), raises on failure.

        ``inputs`` maps parameter names to TypedData. Raises HostStoppingError while
        draining, FunctionTimeoutError past ``functionTimeout`` and FunctionInvocationError
        when the function raised.
        """
        with self._idle:
            if self._stopping:
                raise HostStoppingError(f"host is stopping: {spec.name} not invoked")
            self._in_flight += 1
        invocation_id = str(uuid.uuid4())
        self._running[invocation_id] = spec.name
        request = messages.InvocationRequest(
            invocation_id=invocation_id,
            function_id=spec.function_id,
            input_data=[messages.ParameterBinding(name=n, data=d) for n, d in inputs.items()],
            trigger_metadata=dict(trigger_metadata or {}),
            trace_context=messages.RpcTraceContext(trace_parent=trace_parent_for(trace_parent)),
            retry_context=messages.RetryContext(),
        )
        log.debug("Executing 'Functions.%s' (Id=%s)", spec.name, invocation_id)
        started = time.perf_counter()
        outcome = "Failed"
        try:
            try:
                response = self._worker.stream.invoke(request, self._timeout)
            except concurrent.futures.TimeoutError as error:
                raise FunctionTimeoutError(
                    f"Timeout value of {self._timeout:.0f}s exceeded by function "
                    f"'Functions.{spec.name}' (Id: '{invocation_id}')"
                ) from error
            if response.result.status != messages.StatusResult.Success:
                raise FunctionInvocationError(describe_failure(response.result))
            outcome = "Succeeded"
            return response.return_value if response.HasField("return_value") else None
        except Exception as error:
            log.error("Executed 'Functions.%s' failed (Id=%s): %s", spec.name, invocation_id, error)
            raise
        finally:
            duration_ms = (time.perf_counter() - started) * 1000
            log.info(
                "Executed 'Functions.%s' (%s, Id=%s, Duration=%.0fms)",
                spec.name,
                outcome,
                invocation_id,
                duration_ms,
            )
            self._running.pop(invocation_id, None)
            with self._idle:
                self._in_flight -= 1
                self._idle.notify_all()

    @property
    def in_flight(self) -> int:
        with self._idle:
            return self._in_flight

    def stop_accepting(self) -> None:
        with self._idle:
            self._stopping = True

    def drain(self, timeout_s: float) -> bool:
        """Wait for running invocations; True when all finished within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        with self._idle:
            self._stopping = True
            while self._in_flight:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(remaining)
        return True
